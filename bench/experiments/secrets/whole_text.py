"""The project's bench method (bench_logscan.py --redact-only): one 20 MB string, 4 KiB
chunks, line by line; today's redact.py against the proposal, same process."""
import sys, time
sys.path.insert(0, '.'); sys.path.insert(0, 'proto')
import measure as M, proposal as P, candidates as C
text = M.mixed_text(20.0)
size = len(text.encode()) / 1e6
today = C.Current(); today.load()
cands = {"today redact.py": today.redact}
for gate in ("trie", "pyahocorasick", "ahocorasick_rs"):
    f = P.Fused("f", gate); f.load(); cands[f"proposal fused({gate})"] = f.redact
lines = text.split("\n")
t = time.perf_counter(); text.split("\n"); base = size / (time.perf_counter() - t)
print(f"baseline split: {base:.0f} MB/s on {size:.1f} MB")
for name, fn in cands.items():
    t = time.perf_counter(); fn(text); whole = size / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(0, len(text), 4096): fn(text[i:i + 4096])
    chunks = size / (time.perf_counter() - t)
    t = time.perf_counter()
    for l in lines: fn(l)
    per_line = size / (time.perf_counter() - t)
    print(f"{name:32s} whole {whole:6.1f}  chunks {chunks:6.1f}  per line {per_line:6.1f} MB/s")
