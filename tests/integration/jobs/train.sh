#!/bin/bash
#SBATCH --job-name=train
#SBATCH --time=2
#SBATCH --mem=768M
#SBATCH --output=%x-%j.out
# The agent-loop test's second script: it asks more memory than prep.sh's fix gives
# (768M against 512M) and still runs out, holding up to 1200 MB.
echo "training: growing to 1200 MB"
python3 -c '
import time
held = []
for step in range(1, 31):
    held.append(b"\x07" * (40 * 1024 * 1024))
    print(f"holding {step * 40} MB", flush=True)
    time.sleep(0.1)
print("trained", flush=True)
'
