#!/bin/bash
#SBATCH --job-name=fit
#SBATCH --time=3
#SBATCH --mem=120M
#SBATCH --output=%x-%j.out
# Fits a model that keeps $1 MB of samples in Python.
env > ".job-env.$SLURM_JOB_ID"
echo "fit: reading samples"
python3 grow.py "$1"
