#!/bin/bash
#SBATCH --job-name=scratch-pipe
#SBATCH --time=5
#SBATCH --output=%x-%j.out
# tail -c on a pipe keeps the last $1 MB in memory (no file, no tmpfs).
env > ".job-env.$SLURM_JOB_ID"
echo "keeping the last ${1} MB of the stream"
head -c "${1}M" /dev/zero | tail -c "${1}M" > /dev/null
