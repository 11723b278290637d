#!/bin/bash
#SBATCH --job-name=longfit
#SBATCH --qos=short
#SBATCH --time=30
#SBATCH --mem=200M
#SBATCH --output=%x-%j.out
python3 fit.py --chains 4
