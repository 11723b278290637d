#!/bin/bash
#SBATCH --job-name=reduce-states
#SBATCH --mem=250M
#SBATCH --ntasks=1
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# State reduction in a native program holding $1 MB.
env > ".job-env.$SLURM_JOB_ID"
./membench "$1"
