#!/bin/bash
#SBATCH --job-name=sleeper
#SBATCH --time=5
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# Runs until the test drops its time limit to 0 (SlurmLab.force_timeout).
echo "sleeping"
sleep 600
