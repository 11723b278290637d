"""A long simulation: one step a second, far longer than the jobs' time limits."""
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
for step in range(1, steps + 1):
    print(f"t={step:04d} energy={-1.0 / step:.6f}", flush=True)
    time.sleep(1)
