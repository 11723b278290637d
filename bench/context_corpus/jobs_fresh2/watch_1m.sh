#!/bin/bash
#SBATCH --job-name=watch-sensors
#SBATCH --time=0-00:01
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# Watches the sensor directory every second for fifteen minutes.
env > ".job-env.$SLURM_JOB_ID"
for n in $(seq 1 900); do
    echo "watch-sensors: sweep $n, $(ls -1 | wc -l) files"
    sleep 1
done
