#!/bin/bash
#SBATCH --job-name=relax-long
#SBATCH --mem=80M
#SBATCH --output=%x-%j.out
# A fifteen-minute relaxation; the time limit comes from the submission.
env > ".job-env.$SLURM_JOB_ID"
python3 simulate.py 900
