"""Wall time of `hpcmem check` on a saved snapshot, against a bare Python process start.

    .venv/bin/python bench/bench_check.py [--runs 21] [--write docs/benchmarks.md]

Agents run `check` before every submission (issue 27), so its cost is a process start. Every
case is a fresh process, alternating run by run so machine noise falls on all alike. The
baseline is a bare ``python -c pass`` of the same interpreter. Target: `hpcmem check` on a
saved snapshot <= 5x the baseline. The snapshot is the sample site of
``data/samples/env/cluster-2026-12`` (partitions, nodes, QOS, associations), stored with
`hpcmem env snapshot`; the request is one of the sample job scripts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_startup import timed  # noqa: E402 - one fresh process, timed; exit 0/1 only
HPCMEM = str(Path(sys.executable).with_name("hpcmem"))
SITE = ROOT / "data" / "samples" / "env" / "cluster-2026-12"
SCRIPT = ROOT / "data" / "samples" / "jobs" / "train-gpu.sh"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--write", help="update the '## Start-up of hpcmem check' section of this file")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hpcmem-check-bench-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # .pyc as users have them
    env.update(HPCMEM_HOME=str(home), HPCMEM_CLUSTER="lab")
    subprocess.run([HPCMEM, "env", "snapshot", "--modules", str(SITE / "module-t-avail.txt"),
                    "--partitions", str(SITE / "scontrol-show-partition-oneliner.txt"),
                    "--nodes", str(SITE / "scontrol-show-node-oneliner.txt"),
                    "--qos", str(SITE / "sacctmgr-show-qos.txt"), "--assoc", str(SITE / "sacctmgr-show-assoc.txt"),
                    "--users", str(SITE / "sacctmgr-show-user.txt")], check=True, capture_output=True, env=env)
    user = os.environ.get("HPCMEM_BENCH_USER", "alice")
    user_args = ["--user", user] if user else []
    cases = {
        "baseline: bare `python -c pass`": lambda: timed([sys.executable, "-c", "pass"], env),
        "`hpcmem check SCRIPT --json`, saved snapshot": lambda: timed(
            [HPCMEM, "check", str(SCRIPT), "--json", *user_args], env),
        "`hpcmem check --sbatch-args ...`, saved snapshot": lambda: timed(
            [HPCMEM, "check", "--sbatch-args", "--mem=512G -p cpu -t 3-00:00:00", *user_args], env),
    }
    for case in cases.values():  # warm the page cache and write .pyc files
        case()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, case in cases.items():
            times[name].append(case())

    base = statistics.median(times[next(iter(cases))])
    rows = ["| command | median (s) | p90 (s) | × baseline |", "|---|---:|---:|---:|"]
    for name, values in times.items():
        values.sort()
        p50, p90 = statistics.median(values), values[int(0.9 * (len(values) - 1))]
        rows.append(f"| {name} | {p50:.3f} | {p90:.3f} | {p50 / base:.1f} |")
    worst = max(statistics.median(v) for k, v in times.items() if k.startswith("`hpcmem check"))
    body = "\n".join([
        "## Start-up of hpcmem check", "",
        f"{args.runs} runs per case, alternating, each a fresh process; the sample site's snapshot in a "
        f"new user's store. {os.cpu_count()} CPUs, Python {sys.version.split()[0]}.", "", *rows, "",
        f"`hpcmem check`: {worst / base:.1f}× a bare Python start (target ≤ 5×).", "",
        "Reproduce: `.venv/bin/python bench/bench_check.py --write docs/benchmarks.md`",
    ])
    print(body)
    if args.write:
        from markdown_section import write_section

        write_section(Path(args.write), "## Start-up of hpcmem check", body)


if __name__ == "__main__":
    main()
