#!/bin/bash
#SBATCH --job-name=debug-run
#SBATCH --partition=debug
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# On the debug partition without --time of its own.
env > ".job-env.$SLURM_JOB_ID"
for n in $(seq 1 900); do
    echo "debug-run: check $n passed"
    sleep 1
done
