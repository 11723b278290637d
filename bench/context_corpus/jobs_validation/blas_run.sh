#!/bin/bash
#SBATCH --job-name=blas-run
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $@: modules to load (none: whatever the submitting shell had); the program runs either way.
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
if [ $# -gt 0 ]; then module load "$@"; fi
env > ".job-env.$SLURM_JOB_ID"
./dgemm_bench
