"""Wall time of the hot commands as a new user meets them, against a bare Python process.

    .venv/bin/python bench/bench_startup.py [--runs 21] [--write docs/benchmarks.md]

Every case is a fresh process, as an agent runs it; the cases alternate run by run so
machine noise falls on all of them alike. The baseline is the floor any Python tool
pays: a bare ``python -c`` that opens the same SQLite store with ``sqlite3`` and runs
one query (the lesson lookup by fingerprint). Targets (issue 14): known-template
``recall --json`` <= 7x the baseline, ``record --json`` <= 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
HPCMEM = str(Path(sys.executable).with_name("hpcmem"))

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
OOM_AGAIN = OOM.replace("52004", "77130").replace("1 oom-kill", "2 oom-kill")
BASELINE = ("import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1])\n"
            "c.execute('SELECT id, cause, fix FROM lessons WHERE fingerprint = ?', (sys.argv[2],)).fetchall()\n")


def timed(argv: list[str], env: dict[str, str], stdin: str | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv[1:3]} failed: {done.stderr.strip()[-300:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--write", help="update the '## Start-up of the hot commands' section of this file")
    parser.add_argument("--compare-typer", metavar="VERSION", default="0.29.2",
                        help="also time recall with this typer (installed into a temporary directory); '' to skip")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hpcmem-startup-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # .pyc as users have them
    env.update(HPCMEM_HOME=str(home), HPCMEM_ENCODER="onnx")
    subprocess.run([HPCMEM, "record", "--error", OOM, "--cause", "the step used more than --mem",
                    "--fix", "request --mem=32G"], check=True, capture_output=True, env=env)
    fingerprint = json.loads(subprocess.run([HPCMEM, "fingerprint"], input=OOM_AGAIN, capture_output=True,
                                            text=True, check=True, env=env).stdout)["fingerprint"]
    db = str(home / "data" / "user.db")

    cases = {
        "baseline: bare python + sqlite3, one query": lambda i: timed([sys.executable, "-c", BASELINE, db, fingerprint], env),
        "`hpcmem --version`": lambda i: timed([HPCMEM, "--version"], env),
        "`hpcmem fingerprint` (one line on stdin)": lambda i: timed([HPCMEM, "fingerprint"], env, OOM_AGAIN),
        "`hpcmem recall --json`, known template": lambda i: timed([HPCMEM, "recall", OOM_AGAIN, "--json"], env),
        "`hpcmem record --json`, new error": lambda i: timed(
            [HPCMEM, "record", "--error", f"ModuleNotFoundError: No module named 'pkg{i}'", "--cause",
             "the venv was not active", "--fix", "source .venv/bin/activate first", "--json"], env),
    }
    # The options for start-up, measured in the same run: every command module imported
    # (the app as it was built before), and a typer that depends on pydantic.
    full_app = ("import sys\nsys.argv = ['hpcmem', *sys.argv[1:]]\n"
                "from hpcmem.cli.main import build_app\nbuild_app()(prog_name='hpcmem')\n")
    cases["option: recall with every command module imported"] = lambda i: timed(
        [sys.executable, "-c", full_app, "recall", OOM_AGAIN, "--json"], env)
    if args.compare_typer:
        target = home / f"typer-{args.compare_typer}"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        f"typer=={args.compare_typer}"], check=True)
        newer = dict(env, PYTHONPATH=str(target))
        cases[f"option: recall with typer {args.compare_typer} (pydantic)"] = lambda i: timed(
            [HPCMEM, "recall", OOM_AGAIN, "--json"], newer)
    for case in cases.values():  # warm the page cache and write .pyc files
        case(-1)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(args.runs):
        for name, case in cases.items():
            times[name].append(case(i))

    base = statistics.median(times[next(iter(cases))])
    rows = ["| command | median (s) | p90 (s) | × baseline |", "|---|---:|---:|---:|"]
    for name, values in times.items():
        values.sort()
        p50, p90 = statistics.median(values), values[int(0.9 * (len(values) - 1))]
        rows.append(f"| {name} | {p50:.3f} | {p90:.3f} | {p50 / base:.1f} |")
    recall = statistics.median(times["`hpcmem recall --json`, known template"])
    record = statistics.median(times["`hpcmem record --json`, new error"])
    verdict = (f"Known-template recall: {recall / base:.1f}× the baseline (target ≤ 7×); "
               f"record: {record:.2f} s (target ≤ 0.3 s).")
    body = "\n".join([
        "## Start-up of the hot commands", "",
        f"{args.runs} runs per case, alternating, each a fresh process; a store with one lesson "
        f"(a new user's). {os.cpu_count()} CPUs, Python {sys.version.split()[0]}.", "", *rows, "", verdict, "",
        "Reproduce: `.venv/bin/python bench/bench_startup.py --write docs/benchmarks.md`",
    ])
    print(body)
    if args.write:
        from markdown_section import write_section

        write_section(Path(args.write), "## Start-up of the hot commands", body)


if __name__ == "__main__":
    main()
