#!/bin/bash
#SBATCH --job-name=poll-queue
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# Polls a queue directory every second for fifteen minutes; no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
for n in $(seq 1 900); do
    echo "poll-queue: pass $n, $(ls -1 | wc -l) entries"
    sleep 1
done
