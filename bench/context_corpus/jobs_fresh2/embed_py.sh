#!/bin/bash
#SBATCH --job-name=embed
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# Embeds documents; keeps $1 MB of vectors in Python.
env > ".job-env.$SLURM_JOB_ID"
echo "embed: loading documents"
python3 grow.py "$1"
