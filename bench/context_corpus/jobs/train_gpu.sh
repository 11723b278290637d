#!/bin/bash
#SBATCH --job-name=train
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=1
#SBATCH --mem=500M
#SBATCH --time=30
#SBATCH --output=%x-%j.out
srun python3 train.py --epochs 10
