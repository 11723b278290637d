#!/bin/bash
#SBATCH --job-name=train-ddp
#SBATCH --gres=gpu:3
#SBATCH --mem=1G
#SBATCH --time=120
#SBATCH --output=%x-%j.out
srun torchrun --nproc_per_node=3 train_ddp.py
