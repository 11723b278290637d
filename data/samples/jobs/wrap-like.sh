#!/bin/sh
#SBATCH --time=0:10:00
#SBATCH --mem=500M
# A small preprocessing step; no modules.
echo "preparing on $(hostname)"
python3 prep.py input.csv > prepared.csv
