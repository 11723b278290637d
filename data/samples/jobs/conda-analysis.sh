#!/bin/bash
#SBATCH --job-name analysis
#SBATCH --partition cpu
#SBATCH --cpus-per-task 4
#SBATCH --mem 16G
#SBATCH --time 02:30:00
set -euo pipefail

module load miniforge3/24.3.0
conda activate genomics-2024

python -u scripts/count_kmers.py \
    --input data/reads.fastq.gz \
    --k 31
