#!/bin/bash
#SBATCH -J lammps-melt
#SBATCH -p cpu
#SBATCH -N 2
#SBATCH --ntasks-per-node=32
#SBATCH -n 64
#SBATCH --mem-per-cpu=2000M
#SBATCH -t 1-00:00:00      # one day
#SBATCH -A physics

ml gcc/12.2.0 openmpi/4.1.5
ml lammps/2023.08

cd "$SLURM_SUBMIT_DIR"
mpirun -np $SLURM_NTASKS lmp -in in.melt
