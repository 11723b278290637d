#!/bin/bash
#SBATCH --job-name=pack
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# The memory request comes from the submission; the packer holds $1 MB.
env > ".job-env.$SLURM_JOB_ID"
echo "pack: start on $(hostname) with $SLURM_CPUS_PER_TASK cpus"
./membench "$1"
