"""Per-call cost on short strings (sacct fields: JobName, WorkDir, SubmitLine, Comment),
the shape of `ingest sacct` (10^6 rows): today's redact_text vs the proposal."""
import csv, statistics, sys, time
from pathlib import Path
sys.path.insert(0, '.'); sys.path.insert(0, 'proto')
import candidates as C, proposal as P
fields = []
for p in sorted((Path(__file__).resolve().parents[3] / 'data' / 'samples' / 'sacct').glob('*.psv')):
    if p.name == 'secrets-in-submitline.psv':
        continue
    rows = list(csv.reader(p.open(), delimiter='|'))
    if not rows or 'JobID' not in rows[0]:
        continue
    hdr = rows[0]
    for r in rows[1:]:
        d = dict(zip(hdr, r))
        for k in ('JobName', 'WorkDir', 'SubmitLine', 'Comment', 'AdminComment', 'SystemComment'):
            if d.get(k):
                fields.append(d[k])
print(len(fields), 'fields, mean', round(statistics.mean(map(len, fields))), 'chars')
today = C.Current(); today.load()
cands = {"today redact.py": today.redact}
for gate in ("trie", "pyahocorasick", "ahocorasick_rs"):
    f = P.Fused('f', gate); f.load(); cands[f"proposal fused({gate})"] = f.redact
cands["noop (call overhead)"] = lambda s: s
reps = 200
for name, fn in cands.items():
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            for s in fields:
                fn(s)
        best = min(best, time.perf_counter() - t)
    print(f"{name:32s} {1e6 * best / (reps * len(fields)):6.2f} us/field  -> {best / (reps * len(fields)) * 4e6:5.1f} s per 10^6 rows x 4 fields")
