#!/bin/bash
#SBATCH --job-name=blas-py
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Uses the modules of the submitting shell; $1: the soname to open.
env > ".job-env.$SLURM_JOB_ID"
python3 blas_check.py "$1"
