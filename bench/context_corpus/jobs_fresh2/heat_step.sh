#!/bin/bash
#SBATCH --job-name=heat-step
#SBATCH --mem=60M
#SBATCH --output=%x-%j.out
# The heat loop as an srun step, fifteen minutes; no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
srun ./heat 900
