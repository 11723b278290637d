#!/bin/bash
#SBATCH --job-name=lab-debug
#SBATCH -p debug
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
python3 exercise5.py
