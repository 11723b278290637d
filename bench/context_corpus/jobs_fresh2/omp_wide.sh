#!/bin/bash
#SBATCH --job-name=omp-wide
#SBATCH --cpus-per-task=2
#SBATCH --mem=200M
#SBATCH --time=20
#SBATCH --output=%x-%j.out
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
srun ./transport --steps 1000
