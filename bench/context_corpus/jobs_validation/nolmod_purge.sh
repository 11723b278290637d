#!/bin/bash
#SBATCH --job-name=clean-env
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# A clean module environment first; Lmod is never initialised in this batch shell.
set -e
env > ".job-env.$SLURM_JOB_ID"
module purge
module load "$@"
./configure --prefix="$HOME/opt"
