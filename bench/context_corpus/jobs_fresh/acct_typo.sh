#!/bin/bash
#SBATCH --job-name=denoise
#SBATCH --account=imagign
#SBATCH --time=15
#SBATCH --mem=200M
#SBATCH --output=%x-%j.out
python3 denoise.py --in raw/ --out clean/
