#!/bin/bash
#SBATCH --partition=gpu
#SBATCH --gpus=1
#SBATCH --mem=32G
#SBATCH --time=04:00:00
# The default CUDA is too new for this build; swap it for the one the code was built with.
module load cuda
module swap cuda cuda/11.8
export LD_LIBRARY_PATH=$CUDA_HOME/lib64:$LD_LIBRARY_PATH
./bin/simulate --steps 100000
