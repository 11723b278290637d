#!/bin/bash
#SBATCH --job-name=bigjoin
#SBATCH --ntasks-per-node=1
#SBATCH --mem=12G
#SBATCH --time=1:00:00
#SBATCH --output=%x-%j.out
python3 merge_tables.py --left reads.parquet --right samples.parquet
