#!/bin/bash
#SBATCH --job-name=features-np
#SBATCH --time=5
#SBATCH --mem=150M
#SBATCH --output=%x-%j.out
# numpy in the project's venv builds $1 MB of features.
source .venv/bin/activate
env > ".job-env.$SLURM_JOB_ID"
echo "building the feature matrix on $SLURMD_NODENAME"
python3 features_np.py "$1"
