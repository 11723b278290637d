#!/bin/bash
#SBATCH --job-name=teach-ex
#SBATCH --account=teaching
#SBATCH -q short
#SBATCH -t 1
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
bash grade.sh submissions/
