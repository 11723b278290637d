#!/bin/bash
#SBATCH --job-name=fft-bench
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Uses whatever modules were loaded when it was submitted.
env > ".job-env.$SLURM_JOB_ID"
echo "fft benchmark on $SLURMD_NODENAME"
./fft_bench
