#!/bin/bash
#SBATCH --job-name=align
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=60
#SBATCH --output=%x-%j.out
srun bwa mem -t "$SLURM_CPUS_PER_TASK" ref.fa reads.fq > aligned.sam
