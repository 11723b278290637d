#!/bin/bash
#SBATCH --job-name=prep
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Holds $1 MB in Python; the request (--mem) comes from the submission.
env > ".job-env.$SLURM_JOB_ID"
echo "loading features into memory"
python3 grow.py "$1"
