#!/bin/bash
#SBATCH --job-name=finetune-llm
#SBATCH --gpus=8
#SBATCH --mem=1500M
#SBATCH --time=6:00:00
#SBATCH --output=%x-%j.out
python3 finetune.py --model base-7b --epochs 3
