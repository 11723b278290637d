#!/bin/bash
#SBATCH --job-name=kernels
#SBATCH --partition=debug
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
module load "cuda/$1"
env > ".job-env.$SLURM_JOB_ID"
"$CUDA_HOME/bin/nvcc" -O2 -o kernels kernels.cu
