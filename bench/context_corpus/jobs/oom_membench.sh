#!/bin/bash
#SBATCH --job-name=membench
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# A native program touches $1 MB.
env > ".job-env.$SLURM_JOB_ID"
./membench "$1"
