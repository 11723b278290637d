"""A training script that dies the way real ones do: an exception deep in data loading.

It prints the traceback itself and exits 3, so the job's exit code is distinctive.
"""

import sys
import traceback


def read_sample(index):
    shard = {"sample_0": [0.1, 0.2]}
    return shard[f"sample_{index + 1}"]


def train(epochs):
    for epoch in range(epochs):
        print(f"epoch {epoch} starting", flush=True)
        read_sample(epoch)


if __name__ == "__main__":
    try:
        train(epochs=2)
    except Exception:
        traceback.print_exc()
        sys.exit(3)
