#!/bin/bash
#SBATCH --job-name=features-step
#SBATCH --time=2
#SBATCH --output=%x-%j.out
# The same numpy build, as an srun step; the memory request comes from the submission.
source .venv/bin/activate
env > ".job-env.$SLURM_JOB_ID"
srun python3 features_np.py "$1"
