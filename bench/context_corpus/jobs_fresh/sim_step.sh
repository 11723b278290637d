#!/bin/bash
#SBATCH --job-name=sim-step
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# A fifteen-minute simulation in an srun step; no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
srun python3 simulate.py 900
