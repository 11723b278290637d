#!/bin/bash
#SBATCH --job-name=recon
#SBATCH -A research
#SBATCH --time=10
#SBATCH --mem=300M
#SBATCH --output=%x-%j.out
./reconstruct --slices 256
