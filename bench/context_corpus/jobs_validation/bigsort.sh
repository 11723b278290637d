#!/bin/bash
#SBATCH --job-name=bigsort
#SBATCH --mem=3G
#SBATCH --time=30
#SBATCH --output=%x-%j.out
sort -S 2G --parallel=1 peptides.tsv > peptides.sorted.tsv
