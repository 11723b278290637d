#!/bin/bash
#SBATCH --job-name=heat-step
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# No --time here either; the run is an srun step.
env > ".job-env.$SLURM_JOB_ID"
srun ./heat 900
