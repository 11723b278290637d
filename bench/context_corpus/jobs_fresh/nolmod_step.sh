#!/bin/bash
#SBATCH --job-name=fft-step-nolmod
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# The module tree is added and the modules loaded, without Lmod's init.
env > ".job-env.$SLURM_JOB_ID"
module use "$HPCMEM_LAB_MODULES"
module load "$@"
srun ./fft_bench
