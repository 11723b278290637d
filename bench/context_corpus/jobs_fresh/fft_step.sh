#!/bin/bash
#SBATCH --job-name=fft-step
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $@: modules to load, if any (none: the submitting shell's); the benchmark is an srun step.
set -e
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
if [ $# -gt 0 ]; then module load "$@"; fi
env > ".job-env.$SLURM_JOB_ID"
srun ./fft_bench
