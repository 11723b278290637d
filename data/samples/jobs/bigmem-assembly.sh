#!/bin/bash
#SBATCH --job-name=assembly
#SBATCH --partition=bigmem
#SBATCH --nodes=1
#SBATCH --cpus-per-task=32
#SBATCH --mem=900G
#SBATCH --time=3-00:00:00
#SBATCH --qos=long

module load spades/3.15.5
spades.py -t $SLURM_CPUS_PER_TASK -m 880 -1 R1.fq.gz -2 R2.fq.gz -o out/
