#!/bin/bash
#SBATCH --job-name=segv
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# The last command dies of SIGSEGV: bash exits 139 (128+11), the job's exit code.
echo "reading a null pointer"
python3 -c 'import ctypes; ctypes.string_at(0)'
