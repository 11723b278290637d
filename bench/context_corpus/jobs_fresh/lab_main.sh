#!/bin/bash
#SBATCH --job-name=segment
#SBATCH --partition=main
#SBATCH --time=30
#SBATCH --mem=400M
#SBATCH --output=%x-%j.out
python3 segment.py volumes/
