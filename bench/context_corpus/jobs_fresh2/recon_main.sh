#!/bin/bash
#SBATCH --job-name=tomo-recon
#SBATCH --account=research
#SBATCH --partition=main
#SBATCH --time=20
#SBATCH --mem=300M
#SBATCH --output=%x-%j.out
./tomo --slices 512
