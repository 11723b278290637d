#!/bin/bash
#SBATCH --job-name=qc
#SBATCH --qos=short
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# Quality control under QOS short, no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
./heat 900
