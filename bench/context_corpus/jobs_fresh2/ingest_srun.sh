#!/bin/bash
#SBATCH --job-name=ingest
#SBATCH --time=2
#SBATCH --output=%x-%j.out
# Ingests one corpus shard of $1 MB in an srun step.
env > ".job-env.$SLURM_JOB_ID"
echo "ingest: shard start"
srun python3 grow.py "$1"
