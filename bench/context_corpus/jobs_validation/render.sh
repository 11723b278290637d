#!/bin/bash
#SBATCH --job-name=render
#SBATCH --gres=gpu:rtx6000:1
#SBATCH --mem=1G
#SBATCH --time=45
#SBATCH --output=%x-%j.out
./render_frames --scene city.blend
