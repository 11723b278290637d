#!/bin/bash
#SBATCH --job-name=expedite
#SBATCH --qos=urgent
#SBATCH --cpus-per-task=2
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# An urgent job that needs both CPUs: it preempts (cancels) a QOS normal job holding them.
sleep 2
