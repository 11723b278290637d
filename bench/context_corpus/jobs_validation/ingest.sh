#!/bin/bash
#SBATCH --job-name=ingest
#SBATCH --qos=premium
#SBATCH --mem=200M
#SBATCH --time=20
#SBATCH --output=%x-%j.out
python3 ingest.py --source s3://bucket/raw
