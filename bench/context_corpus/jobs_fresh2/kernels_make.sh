#!/bin/bash
#SBATCH --job-name=kernels
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $@: the toolchain modules; make builds the kernels with them.
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
module load "$@"
env > ".job-env.$SLURM_JOB_ID"
make kernels
