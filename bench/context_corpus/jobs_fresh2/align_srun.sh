#!/bin/bash
#SBATCH --job-name=contact-trace
#SBATCH --nodes=1
#SBATCH --mem=350M
#SBATCH --time=3
#SBATCH --output=%x-%j.out
# Contact tracing graph in a native srun step holding $1 MB.
env > ".job-env.$SLURM_JOB_ID"
srun ./membench "$1"
