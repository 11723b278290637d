#!/bin/bash
#SBATCH --job-name=nvcc-build
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
set -e
env > ".job-env.$SLURM_JOB_ID"
module load cuda/12.4
nvcc -O3 -o saxpy saxpy.cu
