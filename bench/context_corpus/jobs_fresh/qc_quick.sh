#!/bin/bash
#SBATCH --job-name=qc-quick
#SBATCH -q short
#SBATCH --mem=60M
#SBATCH --output=%x-%j.out
# Quality control under QOS short; no --time of its own.
env > ".job-env.$SLURM_JOB_ID"
./heat 900
