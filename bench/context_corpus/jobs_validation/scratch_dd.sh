#!/bin/bash
#SBATCH --job-name=scratch-dd
#SBATCH --time=5
#SBATCH --output=%x-%j.out
# dd reads one $1 MB block into its buffer: the buffer is the memory.
env > ".job-env.$SLURM_JOB_ID"
echo "staging one ${1} MB block"
dd if=/dev/zero of=/dev/null bs="${1}M" count=1
