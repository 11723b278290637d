"""Which rules of a KeywordPrefiltered candidate cost the time on mixed job-log text."""
import sys, time, collections
sys.path.insert(0, '.')
import candidates as C, measure as M
which = sys.argv[1] if len(sys.argv) > 1 else "gitleaks"
c = C.gitleaks_python() if which == "gitleaks" else C.credsweeper_yaml()
c.load()
text = M.mixed_text(2.0)
cost = collections.Counter(); runs = collections.Counter()
orig = c._piece
def piece(p):
    low = p.lower()
    found = set()
    for m in c.kw_re.finditer(low):
        found |= c.implied.get(m.group(0), {m.group(0)})
    idx = sorted({i for k in found for i in c.by_kw.get(k, ())} | set(c.always))
    for i in idx:
        r = c.rules[i]
        t = time.perf_counter()
        for m in r.regex.finditer(p):
            r.secret_span(m)
        cost[r.id] += time.perf_counter() - t; runs[r.id] += 1
t = time.perf_counter()
i = 0
while i < len(text):
    j = text.rfind("\n", i, i + 4096) + 1 or len(text)
    piece(text[i:j]); i = j
tot = time.perf_counter() - t
t = time.perf_counter()
for m in c.kw_re.finditer(text.lower()): pass
print(f"total {tot:.2f}s for 2 MB; keyword scan alone {time.perf_counter()-t:.2f}s; pieces {i//4096}")
for rid, s in cost.most_common(15):
    print(f"{rid:45s} {s:6.3f}s runs={runs[rid]}")
