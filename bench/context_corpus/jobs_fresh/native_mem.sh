#!/bin/bash
#SBATCH --job-name=assemble
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# The memory request comes from the submission; the assembler holds $1 MB.
env > ".job-env.$SLURM_JOB_ID"
echo "assemble: start on $(hostname)"
./membench "$1"
