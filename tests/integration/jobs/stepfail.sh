#!/bin/bash
#SBATCH --job-name=stepfail
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# The srun step fails (exit 3) but the script carries on and exits 0: the job ends
# COMPLETED, only DerivedExitCode and the step row show the failure.
srun --mem=100M python3 train.py
echo "srun exit code $?"
exit 0
