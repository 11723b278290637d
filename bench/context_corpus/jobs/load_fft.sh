#!/bin/bash
#SBATCH --job-name=pyfft
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $1: the hpcfft version to load, or nothing.
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
if [ -n "$1" ]; then module load "hpcfft/$1"; fi
env > ".job-env.$SLURM_JOB_ID"
python3 load_fft.py
