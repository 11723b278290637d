#!/bin/bash
#SBATCH --job-name=build-cuda
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $@: the modules to load for the build.
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
module load "$@"
env > ".job-env.$SLURM_JOB_ID"
cmake --build build -j 2
