#!/bin/bash
#SBATCH --job-name=fail
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err
# The batch script's exit code is python's: 3.
echo "launching training"
python3 train.py
