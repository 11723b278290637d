#!/bin/bash
#SBATCH --job-name=train-vit
#SBATCH --gres=gpu:3
#SBATCH --mem=1G
#SBATCH --time=2:00:00
#SBATCH --output=%x-%j.out
python3 train_vit.py --epochs 40
