"""Time SacctReader (parse + merge) against a plain csv.reader pass over the same file.

    .venv/bin/python bench/bench_sacct_parse.py [ROWS] [--file PATH] [--seed 7]

The file is generated with bench/gen_sacct.py into the temp directory, named with a hash of
the generator, so a changed generator never reuses a stale file.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from datetime import timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for gen_sacct

from gen_sacct import cached_input  # noqa: E402

from hpcmem.ingest.sacct import SacctReader  # noqa: E402


def timed(label: str, rows: int, run) -> float:
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    print(f"{label:<34} {seconds:7.2f} s  {rows / seconds:>10,.0f} rows/s   ({result})")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--file", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.file is not None:
        path = args.file
    else:
        path = cached_input(args.rows, args.seed)
    with path.open(encoding="utf-8") as fh:
        rows = sum(1 for _ in fh) - 1
    print(f"{path}: {rows:,} data rows, {path.stat().st_size / 1e6:.0f} MB")

    def csv_pass():
        with path.open(encoding="utf-8", newline="") as fh:
            return f"{sum(1 for _ in csv.reader(fh, delimiter='|', quoting=csv.QUOTE_NONE))} records"

    def sacct_pass():
        with path.open(encoding="utf-8") as fh:
            reader = SacctReader(fh, tz=timezone.utc)
            failures = sum(1 for job in reader if job.is_failure)
        return (
            f"{reader.jobs:,} jobs, {reader.steps:,} steps, {failures:,} failures, "
            f"{reader.issue_count} issues"
        )

    timed("csv.reader (split only)", rows, csv_pass)
    timed("SacctReader (parse + merge)", rows, sacct_pass)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
