"""sacct ingestion into SQLite, against a plain csv.reader pass over the same file.

    .venv/bin/python bench/bench_ingest.py [--rows 1000000] [--seed 7] [--repeat 3] [--learn]
                                           [--single] [--baseline-redactor REV] [--write docs/benchmarks.md]

Two dump shapes from bench/gen_sacct.py, each against its own csv.reader pass:

- short: the field list of a real Slurm 22.05 `sacct --parsable2` dump, no extern steps
  (about 184 bytes a row, a third of the rows allocations), the shape of issue 14's report;
- full: hpcmem's own `--live` field list (SACCT_FIELDS, about 278 bytes a row).

The ingest is `ingest_sacct` given the file's path, as `hpcmem ingest sacct FILE` calls
it: a file this large is read by worker processes (ingest/sacct_parallel.py) while the
calling process writes. ``--single`` also times the one-process path (the open file
handed over as lines, workers=0) in the same run.

Every measurement runs in a child process of its own, so its peak RSS (ru_maxrss) belongs
to that phase alone (the writer's, and separately the largest worker's). Baseline and
ingest alternate ``--repeat`` times per shape; the table gives medians, the ratio is median
ingest / median baseline of the same run, and the range of the per-pair ratios is printed
with it (the machine's CPUs may be shared). ``--learn`` also times ``learn_from_history``
on the filled store, as `hpcmem ingest sacct` runs it by default. Issue 14's targets:
ingest <= 8x the csv pass, peak RSS <= 500 MiB.

``--baseline-redactor REV`` also times, in the same run and alternating with this tree,
this tree with the redactor of an earlier commit: a ``git worktree`` of HEAD whose
kb/safety/redact.py is REV's (the standard-library pattern table before gitleaks' rules,
plus the few names this tree imports from it), put first on PYTHONPATH (workers inherit
it). Issue 32's target: ingest no more than 10 % slower than with the old redactor.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

BASELINE = r"""
import csv, json, resource, sys, time
t = time.perf_counter()
rows = 0
with open(sys.argv[1], newline="", encoding="utf-8") as fh:
    for row in csv.reader(fh, delimiter="|"):
        rows += 1
print(json.dumps({"seconds": time.perf_counter() - t, "rows": rows,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

READER = r"""
import datetime as dt, json, sys, time
from hpcmem.ingest.sacct import SacctReader
t = time.perf_counter()
with open(sys.argv[1], encoding="utf-8") as fh:
    jobs = sum(1 for _ in SacctReader(fh, tz=dt.timezone.utc))
print(json.dumps({"seconds": time.perf_counter() - t, "jobs": jobs}))
"""

HPCMEM = r"""
import datetime as dt, json, resource, sys, time
from pathlib import Path
from hpcmem.kb.store.database import Store
from hpcmem.ingest.sacct_ingest import ingest_sacct
from hpcmem.ingest.sacct_parallel import parallel_workers
store = Store("sqlite:///" + sys.argv[2]).open()
single = sys.argv[4] == "single"
t = time.perf_counter()
if single:
    with open(sys.argv[1], encoding="utf-8") as fh:
        summary = ingest_sacct(store, fh, cluster="bench", tz=dt.timezone.utc)
else:
    summary = ingest_sacct(store, Path(sys.argv[1]), cluster="bench", tz=dt.timezone.utc)
result = {"seconds": time.perf_counter() - t, "rows": summary.rows_read, "jobs": summary.jobs,
          "failures": summary.failures, "signatures": summary.signatures_new,
          "workers": 0 if single else parallel_workers(sys.argv[1]),
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}
if sys.argv[3] == "learn":
    from hpcmem.kb.lessons.learn import learn_from_history
    t = time.perf_counter()
    learned = learn_from_history(store)
    result["learn_seconds"] = time.perf_counter() - t
    result["learn_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""

SHAPES = {
    "short": "real Slurm 22.05 field list (18 fields), no extern steps",
    "full": "hpcmem's `--live` field list (34 fields), extern steps",
}


# What this tree imports from kb/safety/redact.py beyond the old table's own names.
_REDACT_SHIM = """

# --- bench/bench_ingest.py: names this tree imports from the redactor -------------------
DIGEST_KEY = "redaction.rules_digest"
HPC_RULES_VERSION = 0


def rules_digest() -> str:
    return "baseline-redactor"


def status() -> dict:
    return {"digest": rules_digest()}
"""


@contextlib.contextmanager
def baseline_redactor(revision: str):
    """A PYTHONPATH entry under which `hpcmem` is this tree with REV's kb/safety/redact.py."""
    with tempfile.TemporaryDirectory(prefix="hpcmem-bench-redactor-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), "HEAD"], check=True)
        try:
            old = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:kb/safety/redact.py"],
                                 check=True, capture_output=True, text=True).stdout
            (tree / "kb" / "safety" / "redact.py").write_text(old + _REDACT_SHIM, encoding="utf-8")
            (Path(tmp) / "pkg").mkdir()
            (Path(tmp) / "pkg" / "hpcmem").symlink_to(tree)  # the repository root is the hpcmem package
            yield str(Path(tmp) / "pkg")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)


def run_child(code: str, *args: str, pythonpath: str | None = None) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(data: Path, repeat: int, learn: bool, modes: tuple[str, ...], baseline_path: str | None = None) -> dict:
    bases, ours = [], {mode: [] for mode in modes}
    if baseline_path:
        ours["baseline redactor"] = []
    for i in range(repeat):
        bases.append(run_child(BASELINE, str(data)))
        for mode in ours:
            with tempfile.TemporaryDirectory() as tmp:
                os.chmod(tmp, 0o700)
                db = Path(tmp) / "bench.db"
                learning = learn and i == 0 and mode == modes[0]
                how = "path" if mode == "baseline redactor" else mode
                ours[mode].append(run_child(HPCMEM, str(data), str(db), "learn" if learning else "-", how,
                                            pythonpath=baseline_path if mode == "baseline redactor" else None))
                if mode == modes[0] and (not learning or i == repeat - 1):  # the store as the ingest left it
                    db_mb = db.stat().st_size / 1e6
    reader_s = run_child(READER, str(data))["seconds"]
    base_s = statistics.median(b["seconds"] for b in bases)
    result = {"base": bases[0], "base_s": base_s, "db_mb": db_mb, "reader_s": reader_s, "modes": {}}
    for mode, runs in ours.items():
        ours_s = statistics.median(o["seconds"] for o in runs)
        result["modes"][mode] = {
            "ours": runs[0], "ours_s": ours_s, "ratio": ours_s / base_s,
            "ratios": [o["seconds"] / b["seconds"] for b, o in zip(bases, runs)],
            "peak_rss_mb": max(o["peak_rss_mb"] for o in runs), "runs": runs,
            "worker_peak_rss_mb": max(o["worker_peak_rss_mb"] for o in runs)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="baseline/ingest pairs per shape")
    parser.add_argument("--learn", action="store_true", help="also time learn_from_history afterwards")
    parser.add_argument("--single", action="store_true", help="also time the one-process path in the same run")
    parser.add_argument("--write", help="update the '## sacct ingest' section of this markdown file")
    parser.add_argument("--baseline-redactor", metavar="REV",
                        help="also time this tree with kb/safety/redact.py as of REV (same run, alternating)")
    args = parser.parse_args()
    modes = ("path", "single") if args.single else ("path",)

    from gen_sacct import cached_input

    load_before = os.getloadavg()[0]
    results = {}
    with contextlib.ExitStack() as stack:
        baseline_path = stack.enter_context(baseline_redactor(args.baseline_redactor)) if args.baseline_redactor else None
        for shape in SHAPES:
            data = cached_input(args.rows, args.seed, shape)
            results[shape] = {"data": data, "mb": data.stat().st_size / 1e6,
                              **measure(data, args.repeat, args.learn, modes, baseline_path)}
            print(shape, json.dumps({k: v for k, v in results[shape].items() if k != "data"}, default=str),
                  file=sys.stderr)
    load_after = os.getloadavg()[0]

    lines = [
        "## sacct ingest",
        "",
        f"Inputs: {args.rows:,} generated rows per shape (`bench/gen_sacct.py --profile SHAPE`, seed {args.seed}), "
        "each against a plain `csv.reader` pass over the same file (no conversion, no storage). "
        "hpcmem: `ingest_sacct` of the file's path into a new SQLite store (parse, merge steps, fingerprint, "
        "redact, write), as `hpcmem ingest sacct FILE` runs it: files of 20 MB and more are read by worker processes "
        "(`ingest/sacct_parallel.py`, min(CPUs, 2) workers, ~4 MiB parts cut before allocation rows) while the "
        "calling process writes, in file order, the same batches as one process"
        + (" (\"1 process\": the same ingest with the open file handed over as lines, no workers, timed in the "
           "same run)" if args.single else "") + ". "
        f"Every phase in its own child process; baseline and ingest alternated {args.repeat} times per shape, "
        "medians shown; peak RSS is the largest ru_maxrss of the writing process and, after the slash, of one "
        f"worker. 2 shared CPUs, load average {load_before:.1f} before and {load_after:.1f} after the run.",
        "",
        "| shape | rows | MB | jobs | failures | csv.reader (s) | hpcmem | hpcmem (s) | hpcmem / csv | per-pair ratios | rows/s | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for shape, r in results.items():
        for mode, m in r["modes"].items():
            ours = m["ours"]
            how = ("1 process" if mode == "single" else f"{ours['workers']} workers + writer" if ours["workers"]
                   else "1 process (path)")
            if mode == "baseline redactor":
                how += f", redactor of {args.baseline_redactor}"
            rss = f"{m['peak_rss_mb']:.0f}" + (f" / {m['worker_peak_rss_mb']:.0f}" if ours["workers"] else "")
            lines.append(
                f"| {shape}: {SHAPES[shape]} | {r['base']['rows'] - 1:,} | {r['mb']:.0f} | {ours['jobs']:,} | "
                f"{ours['failures']:,} | {r['base_s']:.2f} | {how} | {m['ours_s']:.2f} | **{m['ratio']:.1f}x** | "
                f"{min(m['ratios']):.1f}-{max(m['ratios']):.1f}x | {ours['rows'] / m['ours_s']:,.0f} | {rss} |"
            )
    lines.append("")
    if args.baseline_redactor:
        ratios = []
        for shape, r in results.items():
            this, old = r["modes"]["path"]["ours_s"], r["modes"]["baseline redactor"]["ours_s"]
            pairs = [a["seconds"] / b["seconds"] for a, b in zip(r["modes"]["path"]["runs"],
                                                                  r["modes"]["baseline redactor"]["runs"])]
            ratios.append(f"{shape} {this:.2f} s / {old:.2f} s = **{this / old:.3f}** "
                          f"(per-pair {min(pairs):.3f}-{max(pairs):.3f})")
        lines += ["This tree's redactor against the redactor of "
                  f"{args.baseline_redactor} (same tree otherwise; medians, same run): " + "; ".join(ratios)
                  + ". Target (issue 32): <= 1.10.", ""]
    parse = ", ".join(f"{shape} {r['reader_s']:.1f} s ({r['reader_s'] / r['base_s']:.1f}x the csv pass)"
                      for shape, r in results.items())
    lines += [f"Reading alone (`SacctReader` over the file in one process: split, merge steps, convert values; "
              f"one run) takes {parse}; the rest of one process's work is building and redacting rows, "
              "fingerprinting failure messages (once per message shape: a sacct-implied message differs from the next of its kind only in job id and time, which normalization masks) and SQLite's inserts with their index updates. With workers, "
              "the writer unpickles the prepared rows and writes them; the workers do the rest.", ""]
    if args.learn:
        learn = ", ".join(f"{shape} {r['modes']['path']['ours']['learn_seconds']:.1f} s "
                          f"(peak RSS {r['modes']['path']['ours']['learn_peak_rss_mb']:.0f} MiB)"
                          for shape, r in results.items())
        lines += [f"`hpcmem ingest sacct` then runs `learn_from_history` (`--no-learn` skips it): {learn} "
                  "on the stores above, not included in the ingest times.", ""]
    sizes = ", ".join(f"{shape} {r['db_mb']:.0f} MB" for shape, r in results.items())
    lines += [
        f"Store size after the ingest: {sizes}. "
        "Targets (issue 14): <= 8x the csv pass, peak RSS <= 500 MiB.",
        "",
        f"Reproduce: `.venv/bin/python bench/bench_ingest.py --rows {args.rows} --repeat {args.repeat}"
        f"{' --learn' if args.learn else ''}{' --single' if args.single else ''}"
        f"{' --baseline-redactor ' + args.baseline_redactor if args.baseline_redactor else ''} --write docs/benchmarks.md`",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.write:
        from markdown_section import write_section

        write_section(Path(args.write), "## sacct ingest", report)


if __name__ == "__main__":
    main()
