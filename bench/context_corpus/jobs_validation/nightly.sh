#!/bin/bash
#SBATCH --job-name=nightly
#SBATCH --partition=debug
#SBATCH --time=0-01:00:00
#SBATCH --mem=200M
#SBATCH --output=%x-%j.out
./nightly_checks
