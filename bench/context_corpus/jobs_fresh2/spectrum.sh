#!/bin/bash
#SBATCH --job-name=spectrum
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# $@: modules to load, if any; the solver runs whatever happened.
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
if [ $# -gt 0 ]; then module load "$@"; fi
env > ".job-env.$SLURM_JOB_ID"
echo "spectrum: transforming"
./solver
