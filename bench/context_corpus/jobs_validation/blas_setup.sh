#!/bin/bash
#SBATCH --job-name=blas-setup
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $1: the hpcblas version; under set -e a failed load ends the job.
set -e
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
env > ".job-env.$SLURM_JOB_ID"
module load "hpcblas/$1"
./dgemm_bench
