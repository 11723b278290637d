#!/bin/bash
#SBATCH --job-name=stencil
#SBATCH --time=5
#SBATCH --mem=300M
#SBATCH --output=%x-%j.out
# A C grid solver that holds $1 MB.
env > ".job-env.$SLURM_JOB_ID"
./stencil "$1"
