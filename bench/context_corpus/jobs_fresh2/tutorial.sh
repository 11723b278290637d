#!/bin/bash
#SBATCH --job-name=tutorial
#SBATCH -A teaching
#SBATCH -t 1
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
python3 tutorial_step.py
