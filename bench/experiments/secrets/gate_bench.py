"""Speed of the keyword gate alone on mixed job-log text (4 KiB pieces)."""
import sys, time
sys.path.insert(0, '.')
import candidates as C, measure as M
c = C.gitleaks_python(); c.load()
kws = sorted({k for r in c.rules for k in r.keywords})
text = M.mixed_text(4.0)
size = len(text.encode()) / 1e6
pieces = []
i = 0
while i < len(text):
    j = text.rfind("\n", i, i + 4096) + 1 or len(text); pieces.append(text[i:j]); i = j
def bench(name, fn):
    t = time.perf_counter(); n = 0
    for p in pieces: n += len(fn(p))
    dt = time.perf_counter() - t
    print(f"{name:40s} {size/dt:8.1f} MB/s  hits={n}")
bench("split only", lambda p: p.split("\n")[:0])
bench("lower only", lambda p: p.lower()[:0])
rx = c.kw_re
bench("trie regex finditer (lowered)", lambda p: {m.group(0) for m in rx.finditer(p.lower())})
import re
rxi = re.compile(C.literal_trie(kws), re.IGNORECASE)
bench("trie regex finditer (IGNORECASE)", lambda p: {m.group(0) for m in rxi.finditer(p)})
bench("'in' per keyword (lowered)", lambda p: (lambda l: [k for k in kws if k in l])(p.lower()))
import ahocorasick
A = ahocorasick.Automaton()
for k in kws: A.add_word(k, k)
A.make_automaton()
bench(f"pyahocorasick {ahocorasick.__version__ if hasattr(ahocorasick,'__version__') else ''} iter (lowered)", lambda p: {v for _, v in A.iter(p.lower())})
import ahocorasick_rs
R = ahocorasick_rs.AhoCorasick(kws)
bench("ahocorasick_rs overlapping (lowered)", lambda p: set(R.find_matches_as_strings(p.lower(), overlapping=True)))
