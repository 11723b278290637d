#!/bin/bash
#SBATCH --job-name=assemble
#SBATCH --mem=8G
#SBATCH --time=120
#SBATCH --output=%x-%j.out
./assembler --reads reads.fq --out contigs.fa
