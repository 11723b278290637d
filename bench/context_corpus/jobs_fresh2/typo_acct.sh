#!/bin/bash
#SBATCH --job-name=gait
#SBATCH --account=reserach
#SBATCH --time=10
#SBATCH --mem=150M
#SBATCH --output=%x-%j.out
python3 gait_fit.py trials/
