#!/bin/bash
#SBATCH --job-name=canopy
#SBATCH --cpus-per-task=2
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# Canopy model on two CPUs; the memory per CPU comes from the submission.
env > ".job-env.$SLURM_JOB_ID"
./stencil "$1"
