"""Render the result tables (markdown) from results.json: venv/bin/python make_tables.py > tables.md"""
import json
from pathlib import Path

HERE = Path(__file__).parent
R = json.loads((HERE / "results.json").read_text())
ORDER = [l for l in (HERE / "all_candidates.txt").read_text().strip().split(",")]


def frac(v):
    return f"{v[0]}/{v[1]}" if v else "-"


def pct(a, b):
    return f"{100 * a / b:.1f} %" if b else "-"


print("### Coverage: rule shapes caught in every placement\n")
print("| candidate | self-identifying | service-named | context forms | **gitleaks total** | HPC forms | ANSI/zero-width | credsweeper shapes (independent) | not idempotent | items with collateral loss |")
print("|---|---|---|---|---|---|---|---|---|---|")
gl = R.get("gitleaks-8.30.1-binary")
rows = [(n, R[n]) for n in ORDER if n in R]
if gl:
    rows.insert(0, ("gitleaks 8.30.1 binary (the anchor)", {"coverage": {"shapes": gl["shapes"]}}))
for name, r in rows:
    s = r["coverage"]["shapes"]
    tot = [sum(s.get(k, [0, 0])[i] for k in ("self_identifying", "service_named", "context_form")) for i in (0, 1)]
    cs = r.get("coverage_fakes_cs", {}).get("shapes", {}).get("credsweeper_shape")
    c = r["coverage"]
    coll = c.get("collateral_chars", {})
    print(f"| {name} | {frac(s.get('self_identifying'))} | {frac(s.get('service_named'))} | "
          f"{frac(s.get('context_form'))} | **{tot[0]}/{tot[1]} ({pct(*tot)})** | {frac(s.get('hpc_form'))} | "
          f"{frac(s.get('ansi'))} | {frac(cs)} | {c.get('not_idempotent', '-')} | "
          f"{coll.get('items_with_any', '-')}{'' if not coll else ' (max ' + str(coll.get('max')) + ' chars)'} |")

print("\n### False positives: ordinary lines altered\n")
print("| candidate | all (per 1,000) | the nine of issue 32 | hpc (42) | data/corpus (5,313) | samples (865) | Loghub (16,000) |")
print("|---|---|---|---|---|---|---|")
for name, r in rows:
    if name.startswith("gitleaks 8.30.1"):
        a = gl["fp_altered"]
    else:
        a = r["fp"]["altered"]
    n = sum(v[0] for v in a.values())
    d = sum(v[1] for v in a.values())
    print(f"| {name} | {n} / {d} = **{1000 * n / d:.2f}** | {frac(a.get('nine'))} | {frac(a.get('hpc'))} | "
          f"{frac(a.get('corpus'))} | {frac(a.get('samples'))} | {frac(a.get('loghub'))} |")

print("\n### Speed on mixed job-log text (same process, 2 cores, Python 3.11)\n")
print("| candidate | text MB | 4 KiB chunks MB/s | per line MB/s | baseline split MB/s | baseline / chunks | load in process (s) |")
print("|---|---|---|---|---|---|---|")
for name, r in rows:
    if name.startswith("gitleaks 8.30.1"):
        print(f"| {name} | 20 | {gl['stdin_20mb_mb_s']} (`gitleaks stdin`, one process, incl. start) | - | - | - | "
              f"{gl['one_invocation_s_median']} per invocation |")
        continue
    sp = r.get("speed")
    if not sp:
        continue
    print(f"| {name} | {sp['mb']} | **{sp['chunks4k_mb_s']}** | {sp.get('per_line_mb_s', '-')} | "
          f"{sp['baseline_split_mb_s']} | {sp['ratio_baseline_over_chunks']} | {r['load_s_in_process']} |")

if "_startup" in R:
    print("\n### Start-up in a fresh process (median of 9)\n")
    print("| what | seconds | added to a bare interpreter |")
    print("|---|---|---|")
    base = R["_startup"]["bare python"]
    for k, v in R["_startup"].items():
        print(f"| {k} | {v:.3f} | +{v - base:.3f} |")
