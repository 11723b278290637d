#!/bin/bash
#SBATCH --job-name=prep
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# The agent-loop test's first script (test_agent_loop.py): it holds about 400 MB at its
# peak, so 100M and 256M run out of memory and 512M is enough. The bytes are written, so
# they count against the cgroup's limit at once; the pace lets Slurm's 1 s accounting
# samples see the growth (MaxRSS).
echo "preparing: growing to 400 MB"
python3 -c '
import time
held = []
for step in range(1, 21):
    held.append(b"\x07" * (20 * 1024 * 1024))
    print(f"holding {step * 20} MB", flush=True)
    time.sleep(0.1)
print("prepared", flush=True)
'
