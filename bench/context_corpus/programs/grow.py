"""Hold N MB, written (not lazily zero-filled) 10 MB at a time, slowly enough for Slurm's
1 s accounting samples to see the growth before a memory limit kills it."""
import sys
import time

target = int(sys.argv[1])
held = []
for step in range(1, target // 10 + 1):
    held.append(b"\x07" * (10 * 1024 * 1024))
    print(f"step {step}: holding {step * 10} MB", flush=True)
    time.sleep(0.15)
print(f"done: {target} MB", flush=True)
