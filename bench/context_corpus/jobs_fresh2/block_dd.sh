#!/bin/bash
#SBATCH --job-name=frame-block
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# Reads one $1 MB frame block at once (dd's buffer is the memory).
env > ".job-env.$SLURM_JOB_ID"
echo "frame-block: reading ${1} MB"
dd if=/dev/zero of=/dev/null bs="${1}M" count=1
