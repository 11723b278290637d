#!/bin/bash
#SBATCH --job-name=compile
#SBATCH --partition=debug
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
set -e
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
env > ".job-env.$SLURM_JOB_ID"
module load "gcc/$1"
gcc -O2 -o model model.c
