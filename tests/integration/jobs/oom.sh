#!/bin/bash
#SBATCH --job-name=oom
#SBATCH --time=2
#SBATCH --mem=50M
#SBATCH --output=%x-%j.out
# Grows to ~300 MB under a 50 MB limit. The bytes are written (not a lazily
# zero-filled buffer), so they count against the memory limit at once. The pace
# lets Slurm's 1 s accounting samples see the growth before the kill (MaxRSS).
echo "growing to 300 MB"
python3 -c '
import time
held = []
for step in range(1, 31):
    held.append(b"\x07" * (10 * 1024 * 1024))
    print(f"holding {step * 10} MB", flush=True)
    time.sleep(0.4)
'
