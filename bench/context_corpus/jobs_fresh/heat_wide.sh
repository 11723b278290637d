#!/bin/bash
#SBATCH --job-name=heat-wide
#SBATCH --cpus-per-task=2
#SBATCH --time=5
#SBATCH --mem=60M
#SBATCH --output=%x-%j.out
# Holds both CPUs of the node for its heat loop.
env > ".job-env.$SLURM_JOB_ID"
./heat 900
