#!/bin/bash
#SBATCH --job-name=surrogate
#SBATCH --qos=gpu-long
#SBATCH --time=2:00:00
#SBATCH --mem=300M
#SBATCH --output=%x-%j.out
python3 surrogate.py --train
