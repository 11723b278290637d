#!/bin/bash
#SBATCH --job-name=ocean-grid
#SBATCH -N 1
#SBATCH --mem=200M
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# The ocean grid: $1 MB of planes on one node.
env > ".job-env.$SLURM_JOB_ID"
./stencil "$1"
