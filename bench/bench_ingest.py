"""sacct ingestion into SQLite, against a plain csv.reader pass over the same file.

    .venv/bin/python bench/bench_ingest.py [--rows 1000000] [--seed 7] [--repeat 3] [--learn]
                                           [--write docs/benchmarks.md]

Two dump shapes from bench/gen_sacct.py, each against its own csv.reader pass:

- short: the field list of a real Slurm 22.05 `sacct --parsable2` dump, no extern steps
  (about 184 bytes a row, a third of the rows allocations), the shape of issue 14's report;
- full: hpcmem's own `--live` field list (SACCT_FIELDS, about 278 bytes a row).

Every measurement runs in a child process of its own, so its peak RSS (ru_maxrss) belongs
to that phase alone. Baseline and ingest alternate ``--repeat`` times per shape; the table
gives medians, the ratio is median ingest / median baseline of the same run, and the range
of the per-pair ratios is printed with it (the machine's CPUs may be shared). ``--learn``
also times ``learn_from_history`` on the filled store, as `hpcmem ingest sacct` runs it by
default. Issue 14's targets: ingest <= 8x the csv pass, peak RSS <= 500 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
from hpcmem.kb.store import Store
from hpcmem.ingest.sacct_ingest import ingest_sacct
store = Store("sqlite:///" + sys.argv[2]).open()
t = time.perf_counter()
with open(sys.argv[1], encoding="utf-8") as fh:
    summary = ingest_sacct(store, fh, cluster="bench", tz=dt.timezone.utc)
result = {"seconds": time.perf_counter() - t, "rows": summary.rows_read, "jobs": summary.jobs,
          "failures": summary.failures, "signatures": summary.signatures_new,
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if sys.argv[3] == "learn":
    from hpcmem.kb.learn import learn_from_history
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


def run_child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(data: Path, repeat: int, learn: bool) -> dict:
    bases, ours = [], []
    for i in range(repeat):
        bases.append(run_child(BASELINE, str(data)))
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o700)
            db = Path(tmp) / "bench.db"
            learning = learn and i == 0
            ours.append(run_child(HPCMEM, str(data), str(db), "learn" if learning else "-"))
            if not learning or i == repeat - 1:  # the store as the ingest left it, if any run shows it
                db_mb = db.stat().st_size / 1e6
    reader_s = run_child(READER, str(data))["seconds"]
    base_s = statistics.median(b["seconds"] for b in bases)
    ours_s = statistics.median(o["seconds"] for o in ours)
    ratios = [o["seconds"] / b["seconds"] for b, o in zip(bases, ours)]
    return {"base": bases[0], "ours": ours[0], "base_s": base_s, "ours_s": ours_s,
            "ratio": ours_s / base_s, "ratios": ratios, "db_mb": db_mb, "reader_s": reader_s,
            "peak_rss_mb": max(o["peak_rss_mb"] for o in ours)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="baseline/ingest pairs per shape")
    parser.add_argument("--learn", action="store_true", help="also time learn_from_history afterwards")
    parser.add_argument("--write", help="update the '## sacct ingest' section of this markdown file")
    args = parser.parse_args()

    from gen_sacct import cached_input

    load_before = os.getloadavg()[0]
    results = {}
    for shape in SHAPES:
        data = cached_input(args.rows, args.seed, shape)
        results[shape] = {"data": data, "mb": data.stat().st_size / 1e6, **measure(data, args.repeat, args.learn)}
        print(shape, json.dumps({k: v for k, v in results[shape].items() if k != "data"}, default=str), file=sys.stderr)
    load_after = os.getloadavg()[0]

    lines = [
        "## sacct ingest",
        "",
        f"Inputs: {args.rows:,} generated rows per shape (`bench/gen_sacct.py --profile SHAPE`, seed {args.seed}), "
        "each against a plain `csv.reader` pass over the same file (no conversion, no storage). "
        "hpcmem: `ingest_sacct` into a new SQLite store (parse, merge steps, fingerprint, redact, write). "
        f"Every phase in its own child process; baseline and ingest alternated {args.repeat} times per shape, "
        "medians shown; peak RSS is the largest ru_maxrss of the ingest processes. "
        f"2 shared CPUs, load average {load_before:.1f} before and {load_after:.1f} after the run.",
        "",
        "| shape | rows | MB | jobs | failures | csv.reader (s) | hpcmem (s) | hpcmem / csv | per-pair ratios | rows/s | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for shape, r in results.items():
        ours = r["ours"]
        lines.append(
            f"| {shape}: {SHAPES[shape]} | {r['base']['rows'] - 1:,} | {r['mb']:.0f} | {ours['jobs']:,} | "
            f"{ours['failures']:,} | {r['base_s']:.2f} | {r['ours_s']:.2f} | **{r['ratio']:.1f}x** | "
            f"{min(r['ratios']):.1f}-{max(r['ratios']):.1f}x | {ours['rows'] / r['ours_s']:,.0f} | {r['peak_rss_mb']:.0f} |"
        )
    lines.append("")
    parse = ", ".join(f"{shape} {r['reader_s']:.1f} s ({r['reader_s'] / r['base_s']:.1f}x the csv pass)"
                      for shape, r in results.items())
    lines += [f"Of the ingest, reading alone (`SacctReader` over the file: split, merge steps, convert values; "
              f"one run) takes {parse}; the rest is building and redacting rows, fingerprinting failure "
              "messages and SQLite's inserts with their index updates.", ""]
    if args.learn:
        learn = ", ".join(f"{shape} {r['ours']['learn_seconds']:.1f} s (peak RSS {r['ours']['learn_peak_rss_mb']:.0f} MiB)"
                          for shape, r in results.items())
        lines += [f"`hpcmem ingest sacct` then runs `learn_from_history` (`--no-learn` skips it): {learn} "
                  "on the stores above, not included in the ingest times.", ""]
    sizes = ", ".join(f"{shape} {r['db_mb']:.0f} MB" for shape, r in results.items())
    lines += [
        f"Store size after the ingest: {sizes}. "
        "Targets (issue 14): <= 8x the csv pass, peak RSS <= 500 MiB.",
        "",
        f"Reproduce: `.venv/bin/python bench/bench_ingest.py --rows {args.rows} --repeat {args.repeat}"
        f"{' --learn' if args.learn else ''} --write docs/benchmarks.md`",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.write:
        from markdown_section import write_section

        write_section(Path(args.write), "## sacct ingest", report)


if __name__ == "__main__":
    main()
