#!/bin/bash
#SBATCH --job-name=wide-scan
#SBATCH --cpus-per-task=2
#SBATCH --time=8
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# Scans on both CPUs of the node for fifteen minutes.
env > ".job-env.$SLURM_JOB_ID"
for n in $(seq 1 900); do
    echo "wide-scan: block $n scanned"
    sleep 1
done
