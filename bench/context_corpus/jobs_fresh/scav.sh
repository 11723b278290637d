#!/bin/bash
#SBATCH --job-name=backfill
#SBATCH --qos=scavenger
#SBATCH --time=30
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
./membench 50
