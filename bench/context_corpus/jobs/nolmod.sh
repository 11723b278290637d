#!/bin/bash
#SBATCH --job-name=nolmod
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# A batch shell is not a login shell: without Lmod's init, `module` is not defined.
set -e
env > ".job-env.$SLURM_JOB_ID"
module load "$1"
make all
