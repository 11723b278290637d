#!/bin/bash
#SBATCH --job-name=relax
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# No --time: the limit is the partition's or the QOS's.
env > ".job-env.$SLURM_JOB_ID"
python3 simulate.py 600
