#!/bin/bash
#SBATCH --job-name=anneal
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# No --time: the limit is the partition's or the QOS's.
env > ".job-env.$SLURM_JOB_ID"
for i in $(seq 1 600); do
    echo "annealing sweep $i"
    sleep 1
done
