"""Speed of each stage of the proposal on the mixed job-log text (4 KiB chunks), same process."""
import sys, time
sys.path.insert(0, '.'); sys.path.insert(0, 'proto')
import measure as M, proposal as P, load as L, candidates as C
text = M.mixed_text(float(sys.argv[1]) if len(sys.argv) > 1 else 8.0)
size = len(text.encode()) / 1e6
chunks = []; i = 0
while i < len(text):
    j = text.rfind("\n", i, i + 4096) + 1 or len(text); chunks.append(text[i:j]); i = j
def rate(fn, rep=3):
    best = 1e9
    for _ in range(rep):
        t = time.perf_counter()
        for c in chunks: fn(c)
        best = min(best, time.perf_counter() - t)
    return size / best
base = rate(lambda c: c.split("\n"))
today = C.Current(); today.load()
hpc = L.load("redact_hpc").redact_text
res = {"baseline split": base, "normalise": rate(P.normalise), "today redact.py": rate(today.redact),
       "hpc layer (proto)": rate(hpc)}
for gate in ("trie", "pyahocorasick", "ahocorasick_rs"):
    g = P.GitleaksLayer(gate); g.load()
    res[f"gitleaks layer, {gate} gate"] = rate(g.redact)
    p = P.Proposal("p", gate); p.load()
    res[f"PROPOSAL total, {gate} gate"] = rate(p.redact)
for k, v in res.items():
    print(f"{k:40s} {v:8.1f} MB/s   baseline/this = {base / v:6.1f}")
for gate in ("trie", "pyahocorasick", "ahocorasick_rs"):
    f = P.Fused("f", gate); f.load()
    v = rate(f.redact)
    print(f"{'PROPOSAL fused, ' + gate:40s} {v:8.1f} MB/s   baseline/this = {base / v:6.1f}")
