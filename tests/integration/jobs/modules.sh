#!/bin/bash
#SBATCH --job-name=modules
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Batch shells are not login shells: load Lmod's bash init ourselves, then point
# MODULEPATH at the lab's tree (both paths come from the submitting environment).
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
module load gcc cuda
echo "LOADEDMODULES=$LOADEDMODULES"
echo "HPCMEM_GCC_VERSION=$HPCMEM_GCC_VERSION"
echo "HPCMEM_CUDA_VERSION=$HPCMEM_CUDA_VERSION"
module -t list 2>&1
echo "done on $SLURMD_NODENAME"
