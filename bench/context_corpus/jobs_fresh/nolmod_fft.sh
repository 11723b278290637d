#!/bin/bash
#SBATCH --job-name=spectra-nolmod
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Lmod is never initialised here and nothing stops at an error.
env > ".job-env.$SLURM_JOB_ID"
module load "$@"
./solver
