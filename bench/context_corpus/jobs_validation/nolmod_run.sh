#!/bin/bash
#SBATCH --job-name=nolmod-run
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# No Lmod init and no set -e: the module line fails and the program runs anyway.
env > ".job-env.$SLURM_JOB_ID"
module load "$@"
./dgemm_bench
