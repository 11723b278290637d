"""What one `hpcmem epilog` costs a node, and what a user's recall pays for draining.

    .venv/bin/python bench/bench_epilog.py [--runs 40] [--slurm-conf /path/slurm.conf --job ID] [--write docs/benchmarks.md]

Every epilog run is a fresh process started the way slurmd starts the wrapper's
command: an environment without PATH (a recorded Slurm 22.05 Epilog environment,
data/samples/epilog/), `python -I -m hpcmem.ingest.epilog`, as the user running the
bench (root on the reference machine, like slurmd's Epilog). Wall time is measured
around the whole process: interpreter start-up, imports, scontrol, the spool write.

scontrol: with --slurm-conf/--job the real scontrol asks a running slurmctld (e.g. the
test harness's cluster) about a real job. Without them a stand-in script prints the
recorded `scontrol show job -o` line, so the fork/exec of a child process is still paid
but slurmctld's answer time is not; the report says which was used.

Cases: a job that completed (the common case: nothing is spooled), a failed job (its
log is scanned and one event written with fsync), the same completed job through the
`hpcmem epilog` console script (which dispatches before the CLI's imports), and an empty
interpreter.
Target: under 100 ms for the common case on the 2-core reference machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLES = REPO / "data" / "samples"
sys.path.insert(0, str(HERE))

HPCMEM = str(Path(sys.executable).with_name("hpcmem"))  # the console script, as a site installs it

DRAIN = """
import json, sys, time
t0 = time.perf_counter()
from hpcmem.ingest.spool import drain_user_events
t1 = time.perf_counter()
from hpcmem.kb.store.database import Store
store = Store("sqlite:///" + sys.argv[2])  # builds no engine: SQLAlchemy is imported only if needed
if sys.argv[3] == "open":
    store.open()  # the user's store exists already when recall runs
t2 = time.perf_counter()
summary = drain_user_events(store, sys.argv[1], "alice", 5.0)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "drain": t3 - t2, "ingested": summary.ingested,
                  "sqlalchemy_loaded": "sqlalchemy" in sys.modules}))
"""


def parse_env(path: Path) -> dict[str, str]:
    sys.path.insert(0, str(REPO.parent))
    from hpcmem.ingest.epilog import parse_env_file

    return parse_env_file(path.read_text())


def timed(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if done.returncode != 0 or "Traceback" in done.stderr:
            raise SystemExit(f"{argv} failed: {done.stderr}")
    return times


def stats(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(ordered) * 1000, 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--slurm-conf", help="a running cluster's slurm.conf (real scontrol)")
    parser.add_argument("--job", help="with --slurm-conf: a job id slurmctld still knows")
    parser.add_argument("--write", type=Path, help="replace the '## Epilog cost' section of this markdown file")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hpcmem-bench-epilog-"))
    try:
        results = run(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=1))
    if args.write:
        from markdown_section import write_section

        write_section(args.write, "## Epilog cost", render(results))


def run(work: Path, args: argparse.Namespace) -> dict:
    python = sys.executable
    epilog = SAMPLES / "epilog"
    spool = work / "spool"
    uid, gid = str(os.getuid()), str(os.getgid())
    ok_env = dict(parse_env(epilog / "2.epilog.env"), SLURM_JOB_UID=uid, SLURM_JOB_GID=gid)
    fail_env = dict(parse_env(epilog / "3.epilog.env"), SLURM_JOB_UID=uid, SLURM_JOB_GID=gid)

    # the failed job's logs, where its recorded StdOut/StdErr say (rewritten into our work dir)
    jobs = work / "jobs"
    jobs.mkdir()
    for name in ("fail-3.err", "fail-3.out"):
        shutil.copy(SAMPLES / "logs" / name, jobs / name)
    if args.slurm_conf:
        scontrol_mode = f"real scontrol against a running slurmctld (job {args.job})"
        owner = subprocess.run(["scontrol", "show", "job", "-o", args.job], capture_output=True, text=True,
                               env=dict(os.environ, SLURM_CONF=args.slurm_conf), check=True).stdout
        job_uid = owner.split("UserId=", 1)[1].split("(", 1)[1].split(")", 1)[0]  # UserId=alice(1001)
        for env in (ok_env, fail_env):
            env.update(SLURM_CONF=args.slurm_conf, SLURM_JOB_ID=args.job, SLURM_JOB_UID=job_uid)
        fail_env["SLURM_JOB_EXIT_CODE2"] = "3:0"  # the same job, as if it had failed
        ok_args: list[str] = []
        fail_args: list[str] = []
    else:
        scontrol_mode = "stand-in scontrol (a script printing the recorded line): process spawn counted, slurmctld's answer not"
        ok_args = ["--scontrol", str(_stand_in(work, epilog / "2.epilog.scontrol", jobs))]
        fail_args = ["--scontrol", str(_stand_in(work, epilog / "3.epilog.scontrol", jobs))]

    light = [python, "-I", "-m", "hpcmem.ingest.epilog", "--spool", str(spool)]
    cases = {
        "python -I -c pass (interpreter only)": timed([python, "-I", "-c", "pass"], {}, args.runs),
        "completed job (common case: nothing spooled)": timed(light + ok_args, ok_env, args.runs),
        "failed job (log scanned, event written + fsync)": timed(light + fail_args, fail_env, args.runs),
        "completed job via `hpcmem epilog` (console script)": timed(
            [HPCMEM, "epilog", "--spool", str(spool), *ok_args], ok_env, args.runs),
    }
    results = {"scontrol": scontrol_mode, "runs": args.runs, "cases": {k: stats(v) for k, v in cases.items()}}

    # what `hpcmem recall` pays at its start: nothing pending, then one pending event
    store = work / "store.db"
    pending = subprocess.run([python, "-I", "-c", DRAIN, str(work / "empty-spool"), str(store), "lazy"],
                             capture_output=True, text=True, check=True)
    shutil.rmtree(spool)
    subprocess.run(light + fail_args, env=fail_env, check=True)
    one = subprocess.run([python, "-I", "-c", DRAIN, str(spool), str(store), "open"], capture_output=True, text=True,
                         check=True)
    results["recall_drain"] = {"nothing_pending": json.loads(pending.stdout), "one_pending": json.loads(one.stdout)}
    results["machine"] = f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, uid {os.getuid()}"
    return results


def _stand_in(work: Path, recorded: Path, jobs: Path) -> Path:
    line = work / (recorded.name + ".txt")
    line.write_text(recorded.read_text().replace("/home/alice/jobs", str(jobs)))
    script = work / ("scontrol-" + recorded.stem)
    script.write_text(f"#!/bin/sh\nexec cat {line}\n")
    script.chmod(0o755)
    return script


def render(results: dict) -> str:
    lines = [
        "## Epilog cost",
        "",
        "`bench/bench_epilog.py`: wall time of one epilog process, started as slurmd starts the",
        "site wrapper's command (no PATH, a recorded Slurm 22.05 Epilog environment,",
        "`python -I -m hpcmem.ingest.epilog`). " + f"{results['runs']} runs per case; {results['machine']}.",
        f"scontrol: {results['scontrol']}.",
        "",
        "| case | median | p90 | max |",
        "| --- | ---: | ---: | ---: |",
    ]
    for case, s in results["cases"].items():
        lines.append(f"| {case} | {s['median_ms']} ms | {s['p90_ms']} ms | {s['max_ms']} ms |")
    empty, one = results["recall_drain"]["nothing_pending"], results["recall_drain"]["one_pending"]
    lines += [
        "",
        "Target: the common case (a completed job) under 100 ms. The `hpcmem` console script hands",
        "`epilog` to the same entry point before importing the CLI framework (typer, pydantic,",
        "rich), so both documented entries cost about the same. A failed job's event is written",
        "twice, each time with fsync: first from the environment alone, then enriched with scontrol's",
        "answer and the log; the first write is what survives a hung controller.",
        "",
        f"`drain_user_events` at the start of `hpcmem recall`: nothing pending costs one `scandir`, "
        f"{empty['drain'] * 1e6:.0f} µs, and loads no SQLAlchemy (loaded: {empty['sqlalchemy_loaded']}); "
        f"with one pending event the drain itself takes {one['drain'] * 1000:.0f} ms on a store already "
        "open (the recorder and models are imported, the event validated, one transaction written, the file moved).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
