#!/bin/bash
#SBATCH --job-name=fft-ctypes
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Python opens libhpcfft through ctypes; the modules are the submitting shell's.
env > ".job-env.$SLURM_JOB_ID"
python3 load_fft.py
