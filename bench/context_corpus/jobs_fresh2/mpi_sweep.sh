#!/bin/bash
#SBATCH --job-name=param-sweep
#SBATCH --nodes=1
#SBATCH --ntasks=8
#SBATCH --mem=400M
#SBATCH --time=30
#SBATCH --output=%x-%j.out
srun ./sweep --grid 64
