#!/bin/bash
#SBATCH --job-name=tally
#SBATCH --mem=90M
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# Tallies field plots; keeps $1 MB of records in Python.
env > ".job-env.$SLURM_JOB_ID"
echo "tally: reading plot records"
python3 grow.py "$1"
