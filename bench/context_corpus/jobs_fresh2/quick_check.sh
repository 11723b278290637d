#!/bin/bash
#SBATCH --job-name=quick-check
#SBATCH --qos=short
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# A check loop under QOS short; no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
for n in $(seq 1 900); do
    echo "quick-check: round $n ok"
    sleep 1
done
