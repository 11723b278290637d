#!/bin/bash
#SBATCH --job-name=calib
#SBATCH --account=research
#SBATCH --time=20
#SBATCH --mem=200M
#SBATCH --output=%x-%j.out
./calibrate --frames 400
