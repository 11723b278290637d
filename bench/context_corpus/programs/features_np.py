"""Build a feature matrix block by block with numpy: every block is filled (np.full), so it is
resident at once, and the pauses let Slurm's 1 s accounting samples see the growth."""
import sys
import time

import numpy as np

target_mb = int(sys.argv[1])
block_mb = 25
blocks = []
for n in range(1, target_mb // block_mb + 1):
    blocks.append(np.full(block_mb * 2**20 // 8, float(n)))
    print(f"features: {n} blocks, {n * block_mb} MB in memory", flush=True)
    time.sleep(0.2)
print(f"features: matrix of {sum(b.size for b in blocks)} values ready", flush=True)
