#!/bin/bash
#SBATCH --job-name=hamiltonian
#SBATCH --cpus-per-task=1
#SBATCH --mem=700M
#SBATCH --time=4
#SBATCH --output=%x-%j.out
# Builds the Hamiltonian: $1 MB of planes on one CPU.
env > ".job-env.$SLURM_JOB_ID"
echo "hamiltonian: assembling"
./stencil "$1"
