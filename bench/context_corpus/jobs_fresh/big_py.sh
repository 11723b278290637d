#!/bin/bash
#SBATCH --job-name=cluster-embed
#SBATCH --time=4
#SBATCH --mem=800M
#SBATCH --output=%x-%j.out
# Clusters $1 MB of embeddings held in memory.
env > ".job-env.$SLURM_JOB_ID"
echo "cluster-embed: loading embeddings"
python3 grow.py "$1"
