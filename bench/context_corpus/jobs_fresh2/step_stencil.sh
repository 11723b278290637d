#!/bin/bash
#SBATCH --job-name=lattice
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# The lattice solver as one srun step; $1 MB of planes.
env > ".job-env.$SLURM_JOB_ID"
echo "lattice: launching step"
srun ./stencil "$1"
