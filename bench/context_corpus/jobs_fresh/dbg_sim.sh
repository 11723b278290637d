#!/bin/bash
#SBATCH --job-name=sim-debug
#SBATCH -p debug
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# On debug without a --time of its own.
env > ".job-env.$SLURM_JOB_ID"
python3 simulate.py 900
