#!/bin/bash
#SBATCH --job-name=sim-quick
#SBATCH -t 1
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Asks one minute for a fifteen-minute simulation.
env > ".job-env.$SLURM_JOB_ID"
python3 simulate.py 900
