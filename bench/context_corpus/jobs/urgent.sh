#!/bin/bash
#SBATCH --job-name=urgent
#SBATCH --qos=urgent
#SBATCH --cpus-per-task=2
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# Needs the whole node: it preempts (cancels) whatever QOS normal job holds it.
sleep 3
