#!/bin/bash
#SBATCH --job-name=mdrun
#SBATCH --cpus-per-task=16
#SBATCH --mem=800M
#SBATCH --time=60
#SBATCH --output=%x-%j.out
srun gmx mdrun -ntomp "$SLURM_CPUS_PER_TASK" -deffnm npt
