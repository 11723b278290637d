#!/bin/bash
#SBATCH --job-name=md-equil
#SBATCH --time=1
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# A shell loop that writes a checkpoint line every second, for ten minutes.
env > ".job-env.$SLURM_JOB_ID"
for i in $(seq 1 600); do
    echo "equilibration step $i"
    sleep 1
done
