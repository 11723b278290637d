#!/bin/bash
#SBATCH --job-name=heat-debug
#SBATCH --partition=debug
#SBATCH --mem=60M
#SBATCH --output=%x-%j.out
# The heat loop on debug; no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
./heat 900
