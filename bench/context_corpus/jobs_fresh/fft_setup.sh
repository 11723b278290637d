#!/bin/bash
#SBATCH --job-name=fft-setup
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $1: the hpcfft version; set -e ends the job at the first failure.
set -e
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
env > ".job-env.$SLURM_JOB_ID"
module load "hpcfft/$1"
./solver
