#!/bin/bash
#SBATCH --job-name=course-lab
#SBATCH --account=teaching
#SBATCH --partition=debug
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
python3 exercise3.py
