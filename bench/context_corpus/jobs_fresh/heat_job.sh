#!/bin/bash
#SBATCH --job-name=heat-run
#SBATCH --mem=60M
#SBATCH --output=%x-%j.out
# The heat loop as an srun step, fifteen minutes; the limit comes from the submission.
env > ".job-env.$SLURM_JOB_ID"
srun ./heat 900
