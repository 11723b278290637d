#!/bin/bash
#SBATCH --job-name=report
#SBATCH --account=teaching
#SBATCH --time=10
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
python3 make_report.py
