#!/bin/bash
#SBATCH --job-name=mesh
#SBATCH --time=3
#SBATCH --mem=450M
#SBATCH --output=%x-%j.out
# Mesh refinement in a native program that touches $1 MB.
env > ".job-env.$SLURM_JOB_ID"
./membench "$1"
