#!/bin/bash
#SBATCH --job-name=shard
#SBATCH --nodes=1
#SBATCH --time=2
#SBATCH --output=%x-%j.out
# Loads one shard of $1 MB in an srun step.
env > ".job-env.$SLURM_JOB_ID"
echo "shard: loading"
srun python3 grow.py "$1"
