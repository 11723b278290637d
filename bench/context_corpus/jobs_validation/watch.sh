#!/bin/bash
#SBATCH --job-name=watch-inbox
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# A shell loop polling for new files once a second; no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
for n in $(seq 1 900); do
    echo "poll $n: $(ls | wc -l) files in the project dir"
    sleep 1
done
