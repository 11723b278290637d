#!/bin/bash
#SBATCH --job-name=heat
#SBATCH --time=00:01:00
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# Fifteen minutes of iterations; the limit is the one above unless the submission overrides it.
env > ".job-env.$SLURM_JOB_ID"
./heat 900
