#!/bin/bash
#SBATCH --job-name=simulate
#SBATCH --time=1
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Ten minutes of work; the time limit comes from --time, the partition or the QOS.
env > ".job-env.$SLURM_JOB_ID"
python3 simulate.py 600
