"""sacct ingestion into SQLite, next to a plain csv.reader pass over the same file.

    .venv/bin/python bench/bench_ingest.py [--rows 1000000] [--seed 7] [--write docs/benchmarks.md]

Each measurement runs in a child process of its own, so the peak RSS it reports
(ru_maxrss) belongs to that phase alone. Targets on the 2-core reference machine:
1,000,000 rows in <= 60 s with peak RSS <= 500 MB.
"""

from __future__ import annotations

import argparse
import json
import os
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

HPCMEM = r"""
import datetime as dt, json, resource, sys, time
from hpcmem.kb.store import Store
from hpcmem.ingest.sacct_ingest import ingest_sacct
store = Store("sqlite:///" + sys.argv[2]).open()
t = time.perf_counter()
with open(sys.argv[1], encoding="utf-8") as fh:
    summary = ingest_sacct(store, fh, cluster="bench", tz=dt.timezone.utc)
print(json.dumps({"seconds": time.perf_counter() - t, "rows": summary.rows_read, "jobs": summary.jobs,
                  "failures": summary.failures, "signatures": summary.signatures_new,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--write", help="update the '## sacct ingest' section of this markdown file")
    args = parser.parse_args()

    from gen_sacct import cached_input

    data = cached_input(args.rows, args.seed)
    size_mb = data.stat().st_size / 1e6
    base = run_child(BASELINE, str(data))
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        ours = run_child(HPCMEM, str(data), str(Path(tmp) / "bench.db"))
        db_mb = (Path(tmp) / "bench.db").stat().st_size / 1e6

    lines = [
        "## sacct ingest",
        "",
        f"Input: {base['rows']:,} sacct `--parsable2` rows ({size_mb:.0f} MB) from `bench/gen_sacct.py` "
        f"(seed {args.seed}): {ours['jobs']:,} jobs, {ours['failures']:,} failures. "
        "Each phase ran in its own child process; peak RSS is that process's ru_maxrss.",
        "",
        "| phase | seconds | rows/s | peak RSS (MB) |",
        "|---|---:|---:|---:|",
        f"| baseline: `csv.reader` pass, no conversion, no storage | {base['seconds']:.1f} | "
        f"{base['rows'] / base['seconds']:,.0f} | {base['peak_rss_mb']:.0f} |",
        f"| hpcmem: parse, merge steps, fingerprint, redact, write SQLite | {ours['seconds']:.1f} | "
        f"{ours['rows'] / ours['seconds']:,.0f} | {ours['peak_rss_mb']:.0f} |",
        "",
        f"hpcmem / baseline time: {ours['seconds'] / base['seconds']:.1f}x. Store size: {db_mb:.0f} MB. "
        f"Target: 1,000,000 rows in <= 60 s, peak RSS <= 500 MB.",
        "",
        f"Reproduce: `.venv/bin/python bench/bench_ingest.py --rows {args.rows} --write docs/benchmarks.md`",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.write:
        from markdown_section import write_section

        write_section(Path(args.write), "## sacct ingest", report)


if __name__ == "__main__":
    main()
