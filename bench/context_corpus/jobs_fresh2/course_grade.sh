#!/bin/bash
#SBATCH --job-name=grade-hw3
#SBATCH --account=teaching
#SBATCH --partition=debug
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
bash grade.sh hw3/
