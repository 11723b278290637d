#!/bin/bash
#SBATCH --job-name=variant-call
#SBATCH --mem=64G
#SBATCH --time=12:00:00
#SBATCH --output=%x-%j.out
./caller --bam sample.bam --ref ref.fa
