#!/bin/bash
#SBATCH --job-name=heat-long
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# No --time: the limit is the submission's, the QOS's or the partition's.
env > ".job-env.$SLURM_JOB_ID"
./heat 900
