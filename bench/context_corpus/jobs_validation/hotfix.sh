#!/bin/bash
#SBATCH --job-name=hotfix
#SBATCH --qos=urgent
#SBATCH --cpus-per-task=2
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Needs both CPUs now: it preempts (cancels) a QOS normal job holding them.
sleep 3
