#!/bin/bash
#SBATCH --job-name=fft-py
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Python opens libhpcfft through ctypes; $@: modules to load, if any.
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
if [ $# -gt 0 ]; then module load "$@"; fi
env > ".job-env.$SLURM_JOB_ID"
echo "fft-py: python $(python3 -c 'import platform; print(platform.python_version())')"
python3 load_fft.py
