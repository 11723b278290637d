#!/bin/bash
#SBATCH --job-name=tokenize
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# The allocation runs in an srun step.
env > ".job-env.$SLURM_JOB_ID"
srun python3 grow.py "$1"
