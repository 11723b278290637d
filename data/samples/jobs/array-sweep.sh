#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-49%10
#SBATCH -c 2
#SBATCH --mem=4G
#SBATCH --time=30
#SBATCH --output=logs/%A_%a.out

module load python/3.11.7
srun python sweep.py --seed "$SLURM_ARRAY_TASK_ID"
