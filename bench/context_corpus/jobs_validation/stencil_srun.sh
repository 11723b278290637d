#!/bin/bash
#SBATCH --job-name=stencil-step
#SBATCH --time=5
#SBATCH --output=%x-%j.out
env > ".job-env.$SLURM_JOB_ID"
srun ./stencil "$1"
