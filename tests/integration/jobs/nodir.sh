#!/bin/bash
#SBATCH --job-name=nodir
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=no-such-dir/%x-%j.out
# Slurm does not create the directory of --output: the job fails to launch
# (FAILED, reason JobLaunchFailure) and leaves no log at all.
echo "never printed"
