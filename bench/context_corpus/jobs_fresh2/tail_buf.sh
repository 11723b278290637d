#!/bin/bash
#SBATCH --job-name=case-window
#SBATCH --mem=160M
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# Keeps the last $1 MB of the case stream in memory (tail -c on a pipe).
env > ".job-env.$SLURM_JOB_ID"
echo "case-window: buffering ${1} MB"
head -c "${1}M" /dev/zero | tail -c "${1}M" > /dev/null
