#!/bin/bash
#SBATCH --job-name=omp-solve
#SBATCH --cpus-per-task=4
#SBATCH --mem=200M
#SBATCH --time=20
#SBATCH --output=%x-%j.out
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
./solver
