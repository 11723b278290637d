#!/bin/bash
#SBATCH --job-name=segment-gpu
#SBATCH --gpus-per-node=rtx4090:1
#SBATCH --mem=500M
#SBATCH --time=1:00:00
#SBATCH --output=%x-%j.out
python3 segment.py --tiles tiles/
