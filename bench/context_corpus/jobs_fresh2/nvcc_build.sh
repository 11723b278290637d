#!/bin/bash
#SBATCH --job-name=saxpy-build
#SBATCH -p debug
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $1: the cuda module; set -e stops at the first failure.
set -e
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
env > ".job-env.$SLURM_JOB_ID"
module load "$1"
nvcc -O3 -o saxpy saxpy.cu
