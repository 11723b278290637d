#!/bin/bash
#SBATCH --job-name=build-gpu
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $@: the toolchain modules; make builds whatever they provide.
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
module load "$@"
env > ".job-env.$SLURM_JOB_ID"
make -j 2
