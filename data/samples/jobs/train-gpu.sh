#!/bin/bash
#SBATCH --job-name=train-resnet
#SBATCH --partition=gpu
#SBATCH --gres=gpu:a100:2
#SBATCH --cpus-per-task=16
#SBATCH --mem=64G
#SBATCH --time=12:00:00
#SBATCH --account=research
#SBATCH --output=%x-%j.out

module purge
module load gcc/12.2.0 cuda/12.4
source "$HOME/venvs/torch/bin/activate"

export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
srun torchrun --standalone --nproc_per_node=2 train.py --epochs 90 --batch-size 256
