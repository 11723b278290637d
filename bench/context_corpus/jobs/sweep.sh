#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --cpus-per-task=2
#SBATCH --mem-per-cpu=1500M
#SBATCH --time=30
#SBATCH --output=%x-%j.out
srun ./param_sweep --threads "$SLURM_CPUS_PER_TASK"
