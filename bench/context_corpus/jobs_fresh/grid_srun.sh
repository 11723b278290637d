#!/bin/bash
#SBATCH --job-name=grid
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# One srun step of the grid solver, $1 MB of planes.
env > ".job-env.$SLURM_JOB_ID"
srun ./stencil "$1"
