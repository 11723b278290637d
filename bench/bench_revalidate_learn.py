"""revalidate and learn on a large SQLite store, next to plain SQL passes over the same rows.

    .venv/bin/python bench/bench_revalidate_learn.py [--lessons 100000] [--jobs 1000000]
        [--snapshots 60] [--baseline-rev REV] [--repeat 2] [--write docs/benchmarks.md]

The store: ``--lessons`` lessons (20% with conditions: cluster, module, partition,
partition limit; 30% inferred, each citing an occurrence), ``--jobs`` job records of 2,000
users over a year (every tenth job fails, most failures are resubmitted with a fix within
hours) with their occurrences, and ``--snapshots`` environment snapshots taken at midnight
(modules appear, disappear and change defaults; a partition limit shrinks). Rows go in with
raw executemany after ``Store.open()`` has migrated the file.

Phases, each in a child process of its own (peak RSS is that child's ru_maxrss), each on a
fresh copy of the store:

- revalidate: the first run against the latest snapshot (``unconfirmed_days`` 180, as
  the CLI's default), then one more snapshot (a module version removed) and a second run;
- learn: the first run (no watermark), then 1,000 new jobs written through the Recorder
  (as an ingest writes them; half the users get a failure and its resubmission) and a
  second run.

Baselines in the same run: a plain sqlite3 pass that reads what a full run must read
(every eligible lesson with its conditions; every job record in the sweep's order) and,
with ``--baseline-rev``, the same phases run by the hpcmem of that git revision (exported
with ``git archive`` to a temporary directory and imported from there; its store is built
by its own migrations). The revalidation outcome of both revisions is compared (a digest
of every status change); the learned lessons too (count, evidence rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

# --------------------------------------------------------------------------- the data

START = (2026, 1, 1)
SPAN_DAYS = 365
USERS = 2000
CLUSTER = "bench"
PARTITIONS = ("cpu", "gpu", "bigmem", "debug", "long", "short", "a100", "v100", "highmem", "io", "viz", "test")


def _dt_text(value) -> str:
    # SQLAlchemy's SQLite DateTime storage format, so range queries compare alike.
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def _snapshots(rng, count: int):
    """(taken_at, modules dict, partitions dict) at midnight, oldest first."""
    import datetime as dt

    modules = {f"mod{i:03d}": [f"{v}.{rng.randint(0, 9)}" for v in range(1, rng.randint(2, 5))] for i in range(300)}
    limits = {name: 7 * 86400 if name == "long" else 2 * 86400 for name in PARTITIONS}
    out = []
    start = dt.datetime(*START)
    for n in range(count):
        taken = start + dt.timedelta(days=n * SPAN_DAYS // count)
        if n:
            for name in rng.sample(sorted(modules), 3):  # new versions appear
                modules[name] = modules[name] + [f"{len(modules[name]) + 1}.{n}"]
            gone = rng.choice(sorted(modules))  # an old version is removed
            if len(modules[gone]) > 1:
                modules[gone] = modules[gone][1:]
            if n % 20 == 0:
                limits["short"] = max(3600, limits["short"] // 2)
        out.append((taken, {name: {"name": name, "versions": list(vs), "default": vs[-1], "marked_default": False}
                            for name, vs in modules.items()},
                    {name: _partition(name, limits[name]) for name in PARTITIONS}))
    return out


def _partition(name: str, max_time: int) -> dict:
    return {"name": name, "state": "UP", "max_time_s": max_time, "default_time_s": 3600,
            "max_mem_per_node_mb": 512000, "max_mem_per_cpu_mb": None, "def_mem_per_cpu_mb": 4000,
            "def_mem_per_node_mb": None, "max_nodes": 16, "total_cpus": 4096, "total_nodes": 64, "tres": {},
            "allow_accounts": None, "deny_accounts": [], "allow_qos": None, "deny_qos": [], "allow_groups": None,
            "qos": None, "is_default": name == "cpu", "raw": {}, "source": "scontrol"}


FAILURES = (  # category, state, template, how the resubmission fixes it
    ("host_oom", "OUT_OF_MEMORY", "oom-kill event in StepId=<JOBID>.batch", "mem"),
    ("time_limit", "TIMEOUT", "CANCELLED AT <TIME> DUE TO TIME LIMIT", "time"),
    ("nonzero_exit", "FAILED", "job exited with code 1", "gres"),
)


def _job(user: int, n: int, name: str, submit, minutes: int, state: str, mem: int, hours: int, gres: str | None):
    import datetime as dt

    failed = state != "COMPLETED"
    end = submit + dt.timedelta(minutes=minutes)
    line = f"sbatch --mem={mem}G --time={hours:02d}:00:00" + (f" --gres={gres}" if gres else "") + f" {name}.sh"
    return {"cluster": CLUSTER, "job_id": f"{user}{n:05d}", "user_name": f"u{user:04d}", "account": "lab",
            "job_name": name, "partition": "cpu", "state": state, "failed": int(failed), "req_mem_mb": mem * 1024.0,
            "req_cpus": 4, "req_gres": gres, "req_time_s": hours * 3600, "constraints": None,
            "max_rss_mb": mem * 1000.0, "elapsed_s": minutes * 60, "work_dir": f"/home/u{user:04d}/p{name[-1]}",
            "submit_line": line, "submit_time": submit, "end_time": end}


def _user_jobs(rng, user: int, count: int, start, span_h: float, first: int = 0):
    """One user's jobs in submit order: every tenth fails, most are resubmitted with a fix."""
    import datetime as dt

    t = start + dt.timedelta(hours=rng.random() * span_h / count)
    n = first
    while n < first + count:
        name = f"job{rng.randint(0, 4)}"
        mem, hours, gres = 8, 4, None
        if rng.random() < 0.1:
            category, state, _template, fix = FAILURES[rng.randrange(3)]
            job = _job(user, n, name, t, rng.randint(5, 240), state, mem, hours, "gpu:v100:1" if fix == "gres" else None)
            yield job, category
            n += 1
            if rng.random() < 0.8 and n < first + count:  # the resubmission, minutes to hours later
                t = job["end_time"] + dt.timedelta(minutes=rng.randint(2, 600))
                if fix == "mem":
                    mem = 16
                elif fix == "time":
                    hours = 8
                else:
                    gres = "gpu:a100:1"
                yield _job(user, n, name, t, rng.randint(5, 240), "COMPLETED", mem, hours, gres), None
                n += 1
        else:
            yield _job(user, n, name, t, rng.randint(5, 600), "COMPLETED", mem, hours, None), None
            n += 1
        t += dt.timedelta(hours=rng.expovariate(count / span_h))


def build_store(db: str, lessons: int, jobs: int, snapshots: int, seed: int) -> dict:
    """Create the store with this code's migrations, then fill it with raw executemany."""
    import datetime as dt
    import random
    import sqlite3
    import uuid

    from hpcmem.kb.store.database import Store

    Store("sqlite:///" + db).open().dispose()
    rng = random.Random(seed)
    start = dt.datetime(*START)
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")

    def insert(table: str, rows: list[dict]) -> None:
        if rows:
            cols = list(rows[0])
            con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                            [tuple(_dt_text(v) if isinstance(v, dt.datetime) else v for v in r.values()) for r in rows])

    # signatures: a few for the jobs' failures, many for lessons
    sigs = [{"fingerprint": f"{i:016x}", "category": FAILURES[i % 3][0] if i < 300 else "python_import_error",
             "template": (FAILURES[i % 3][2] if i < 300 else f"ModuleNotFoundError: No module named 'pkg{i}'") + f" #{i}",
             "first_seen": start, "last_seen": start, "count": 0} for i in range(20000)]
    insert("signatures", sigs)
    history = _snapshots(rng, snapshots)
    insert("env_snapshots", [{"cluster": CLUSTER, "taken_at": taken, "source": "bench", "modules": json.dumps(mods),
                              "partitions": json.dumps(parts), "content_hash": f"{n:064x}"}
                             for n, (taken, mods, parts) in enumerate(history)])
    # job records and their occurrences
    per_user = jobs // USERS
    occurrence_id = job_count = 0
    for user in range(USERS):
        job_rows, occ_rows = [], []
        for job, category in _user_jobs(rng, user, per_user, start, SPAN_DAYS * 24.0):
            job_rows.append(job)
            if category is not None:
                occurrence_id += 1
                sig = 1 + FAILURES.index(next(f for f in FAILURES if f[0] == category)) + 3 * rng.randrange(100)
                occ_rows.append({"signature_id": sig, "cluster": CLUSTER, "job_id": job["job_id"],
                                 "job_name": job["job_name"], "user_name": job["user_name"], "partition": "cpu",
                                 "state": job["state"], "exit_code": 1, "source": "sacct",
                                 "submit_time": job["submit_time"], "end_time": job["end_time"],
                                 "observed_at": job["end_time"]})
        insert("job_records", job_rows)
        job_count += len(job_rows)
        insert("occurrences", occ_rows)
    # occurrences of an older cluster that inferred lessons cite (no job records left)
    old = [{"signature_id": 300 + i % 19000, "cluster": "old", "job_id": str(i), "user_name": "x", "state": "FAILED",
            "source": "sacct", "observed_at": start} for i in range(int(lessons * 0.3))]
    insert("occurrences", old)
    first_old = occurrence_id + 1
    # lessons, 20% with conditions
    lesson_rows, conditions, evidence = [], [], []
    for i in range(lessons):
        lesson_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        sig = 300 + rng.randrange(19700)
        created = start + dt.timedelta(seconds=rng.randrange(SPAN_DAYS * 86400))
        roll = rng.random()
        status, previous = ("rejected", None) if roll < 0.02 else ("stale", None) if roll < 0.04 else (
            "validated", None) if roll < 0.2 else ("candidate", None)
        inferred = i < lessons * 0.3
        lesson_rows.append({
            "id": lesson_id, "signature_id": sig, "fingerprint": sigs[sig - 1]["fingerprint"], "scope": "user",
            "scope_name": "u", "context": "bench", "cause": "cause text", "fix": "fix text", "excerpt": None,
            "actions": json.dumps([{"type": "sbatch", "option": "--mem", "to": f"{8 + i % 64}G"}]),
            "status": status, "previous_status": previous, "status_reason": None, "confidence": 0.5,
            "confirmations": 0, "contradictions": 0, "source": "inferred" if inferred else "agent", "author": "b",
            "safety_flags": "[]", "created_at": created, "updated_at": created,
            "last_confirmed_at": created + dt.timedelta(days=rng.randrange(400)) if rng.random() < 0.5 else None,
            "valid_until": start + dt.timedelta(days=rng.randrange(500)) if rng.random() < 0.01 else None})
        if inferred:
            evidence.append({"lesson_id": lesson_id, "kind": "occurrence", "occurrence_id": first_old + i,
                             "job_id": str(i), "actor": "b", "note": None, "created_at": created})
        if rng.random() < 0.2:
            conditions.append({"lesson_id": lesson_id, "kind": "cluster", "name": CLUSTER, "value": None, "op": None})
            # what was installed when the lesson was written
            taken = max(n for n, h in enumerate(history) if h[0] <= created) if created >= history[0][0] else 0
            mods = history[taken][1]
            name = rng.choice(sorted(mods))
            version = rng.choice(mods[name]["versions"])
            conditions.append({"lesson_id": lesson_id, "kind": "module", "name": f"{name}/{version}",
                               "value": version, "op": None})
            part = rng.choice(PARTITIONS + ("retired",))
            conditions.append({"lesson_id": lesson_id, "kind": "partition", "name": part, "value": None, "op": None})
            if rng.random() < 0.3:
                conditions.append({"lesson_id": lesson_id, "kind": "partition_limit", "name": "short:MaxTime",
                                   "value": str(rng.choice((3600, 86400, 172800))), "op": ">="})
    insert("lessons", lesson_rows)
    insert("lesson_conditions", conditions)
    insert("lesson_evidence", evidence)
    con.commit()
    con.execute("ANALYZE")
    con.close()
    return {"lessons": lessons, "with_conditions": len({c["lesson_id"] for c in conditions}),
            "jobs": job_count, "occurrences": occurrence_id, "snapshots": snapshots}


def new_jobs(count: int, seed: int):
    """``count`` jobs after the year's end, as an ingest would record them."""
    import datetime as dt
    import random

    rng = random.Random(seed + 1)
    start = dt.datetime(*START, tzinfo=dt.timezone.utc) + dt.timedelta(days=SPAN_DAYS + 1)
    per_user = 20
    for user in range(0, USERS, USERS * per_user // count):
        for job, category in _user_jobs(rng, user, per_user, start, 48.0, first=90000):
            for key in ("submit_time", "end_time"):
                job[key] = job[key].replace(tzinfo=dt.timezone.utc)
            job["failed"] = bool(job["failed"])
            failure = None
            if category is not None:
                template = next(f[2] for f in FAILURES if f[0] == category)
                failure = {**{k: job[k] for k in ("cluster", "job_id", "job_name", "user_name", "partition", "state",
                                                  "submit_time", "end_time")},
                           "exit_code": 1, "source": "sacct", "message": template}
            yield job, failure


# --------------------------------------------------------------------------- phases (children)


def _use_code(root: str) -> None:
    """Import hpcmem from ``root`` ('-': the checkout this file is in), whatever is installed."""
    root = str(REPO) if root == "-" else root
    import importlib.util

    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    spec = importlib.util.spec_from_file_location("hpcmem", os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    module = importlib.util.module_from_spec(spec)
    sys.modules["hpcmem"] = module
    spec.loader.exec_module(module)


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase(name: str, db: str, args: argparse.Namespace) -> dict:
    import hashlib

    if name == "build":
        _use_code(args.code)
        return build_store(db, args.lessons, args.jobs, args.snapshots, args.seed)
    if name == "sql_lessons":  # what a full revalidation reads, with nothing else
        import sqlite3

        con = sqlite3.connect(db)
        began = time.perf_counter()
        rows = con.execute("SELECT id, fingerprint, status, previous_status, status_reason, created_at, "
                           "last_confirmed_at, valid_until FROM lessons WHERE status != 'rejected'").fetchall()
        conds = con.execute("SELECT lesson_id, kind, name, value, op FROM lesson_conditions").fetchall()
        snaps = [json.loads(m) for (m,) in con.execute("SELECT modules FROM env_snapshots")]
        return {"seconds": time.perf_counter() - began, "rows": len(rows) + len(conds) + len(snaps),
                "peak_rss_mb": _peak_mb()}
    if name == "sql_jobs":  # what a full learn reads: every job in the sweep's order
        import sqlite3

        con = sqlite3.connect(db)
        began = time.perf_counter()
        n = 0
        for _row in con.execute("SELECT cluster, job_id, user_name, job_name, partition, state, failed, req_mem_mb, "
                                "req_cpus, req_gres, req_time_s, constraints, max_rss_mb, elapsed_s, work_dir, "
                                "submit_line, submit_time, end_time FROM job_records WHERE user_name IS NOT NULL "
                                "AND submit_time IS NOT NULL ORDER BY cluster, user_name, submit_time, id"):
            n += 1
        return {"seconds": time.perf_counter() - began, "rows": n, "peak_rss_mb": _peak_mb()}

    _use_code(args.code)
    import datetime as dt

    from hpcmem.kb.store.database import Store

    store = Store("sqlite:///" + db).open()
    now = dt.datetime(*START, tzinfo=dt.timezone.utc) + dt.timedelta(days=SPAN_DAYS)
    if name in ("revalidate", "revalidate_next"):
        from hpcmem.kb.environment.history import latest_snapshot, save_snapshot
        from hpcmem.kb.environment.snapshot import EnvSnapshot, ModuleInfo
        from hpcmem.kb.environment.revalidate import revalidate

        snapshot = latest_snapshot(store, CLUSTER)
        if name == "revalidate_next":
            env = snapshot.snapshot
            modules = dict(env.modules)
            for module_name in sorted(modules)[::10]:  # a tenth of the modules lose their oldest version
                info = modules[module_name]
                if len(info.versions) > 1:
                    modules[module_name] = ModuleInfo(module_name, info.versions[1:], info.default, False)
            snapshot, _ = save_snapshot(store, EnvSnapshot(modules, env.partitions), cluster=CLUSTER, source="next")
            now += dt.timedelta(hours=1)
        began = time.perf_counter()
        report = revalidate(store, snapshot, unconfirmed_days=180, now=now)
        seconds = time.perf_counter() - began
        digest = hashlib.sha256(json.dumps(sorted((c.lesson_id, c.before, c.after, c.reasons)
                                                  for c in report.changes)).encode()).hexdigest()[:12]
        return {"seconds": seconds, "checked": report.checked, "changed": len(report.changes), "digest": digest,
                "peak_rss_mb": _peak_mb()}
    if name in ("learn", "learn_next"):
        from sqlalchemy import func, select

        from hpcmem.kb.lessons.learn import learn_from_history
        from hpcmem.kb.store.models import Lesson, LessonEvidence

        recorded = 0.0
        if name == "learn_next":
            from hpcmem.kb.jobs.write import Recorder

            began = time.perf_counter()
            recorder = Recorder(store)
            for job, failure in new_jobs(args.new_jobs, args.seed):
                recorder.add(job, failure)
            recorder.close()
            recorded = time.perf_counter() - began
        began = time.perf_counter()
        summary = learn_from_history(store)
        seconds = time.perf_counter() - began
        with store.session() as s:
            lessons = s.scalar(select(func.count()).select_from(Lesson).where(Lesson.source == "inferred"))
            evidence = s.scalar(select(func.count()).select_from(LessonEvidence))
        return {"seconds": seconds, "record_seconds": recorded, "pairs": summary.pairs_found,
                "created": summary.lessons_created, "confirmed": summary.lessons_confirmed,
                "inferred_lessons": lessons, "evidence": evidence, "peak_rss_mb": _peak_mb()}
    raise SystemExit(f"unknown phase {name}")


# --------------------------------------------------------------------------- the parent


def run_child(phase_name: str, db: str, args: argparse.Namespace, code: str = "-") -> dict:
    argv = [sys.executable, __file__, "--child", phase_name, "--db", db, "--code", code,
            "--lessons", str(args.lessons), "--jobs", str(args.jobs), "--snapshots", str(args.snapshots),
            "--new-jobs", str(args.new_jobs), "--seed", str(args.seed)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd="/tmp")
    if out.returncode:
        raise SystemExit(f"{phase_name} ({code}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def export_revision(rev: str, into: Path) -> str:
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return str(into)


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["seconds"])


def measure(code: str, base_db: str, tmp: Path, args: argparse.Namespace, repeat: int) -> dict:
    results: dict[str, list[dict]] = {}
    for _ in range(repeat):
        db = str(tmp / "work.db")
        for phases in (("revalidate", "revalidate_next"), ("learn", "learn_next")):
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(db + suffix):
                    os.remove(db + suffix)
            shutil.copy(base_db, db)
            for name in phases:
                results.setdefault(name, []).append(run_child(name, db, args, code))
                print(f"  {code if code != '-' else 'this checkout'} {name}: {results[name][-1]}", file=sys.stderr)
    return {name: best(runs) for name, runs in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--snapshots", type=int, default=60)
    parser.add_argument("--new-jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each phase; the fastest is reported")
    parser.add_argument("--baseline-rev", help="also measure the hpcmem of this git revision")
    parser.add_argument("--baseline-repeat", type=int, default=1, help="runs of each phase of --baseline-rev")
    parser.add_argument("--write", help="update the '## revalidate and learn at scale' section of this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--code", default="-", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(phase(args.child, args.db, args)))
        return

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.chmod(tmp, 0o700)
        codes = {"this checkout": "-"}
        if args.baseline_rev:
            codes = {args.baseline_rev: export_revision(args.baseline_rev, tmp / "old"), **codes}
        measured, built = {}, {}
        for label, code in codes.items():
            base_db = str(tmp / f"base-{len(built)}.db")
            began = time.perf_counter()
            built[label] = run_child("build", base_db, args, code) | {"seconds": time.perf_counter() - began}
            print(f"built {label}: {built[label]}", file=sys.stderr)
            if label == "this checkout":
                sql = {name: best([run_child(name, base_db, args) for _ in range(args.repeat)])
                       for name in ("sql_lessons", "sql_jobs")}
            measured[label] = measure(code, base_db, tmp, args,
                                      args.repeat if code == "-" else args.baseline_repeat)
            size_mb = os.path.getsize(base_db) / 1e6
    report = render(args, built["this checkout"], size_mb, sql, measured)
    print(report)
    if args.write:
        from markdown_section import write_section

        write_section(Path(args.write), HEADING, report)


HEADING = "## revalidate and learn at scale"
NOTES = (
    "Before (the baseline revision): revalidate loaded every lesson through the ORM and, for each distinct "
    "creation date (365 here), reloaded and JSON-parsed the whole snapshot history; learn read every job "
    "record, occurrence and inferred lesson on every run. Now revalidate reads only the lessons that can "
    "change (with conditions, an expired valid_until, unconfirmed longer than the limit, or a status it set) "
    "as plain rows and parses each snapshot in force once; learn reads the jobs written since its watermark "
    "and, per user, the jobs within the window around them. A first learn run still sweeps every job. "
    "Same outcomes: the digests of all status changes match, and so do the inferred lessons and evidence rows."
)


def render(args, built: dict, size_mb: float, sql: dict, measured: dict) -> str:
    labels = list(measured)
    rows = [
        ("revalidate, first run (latest snapshot)", "revalidate", "sql_lessons"),
        ("revalidate after one new snapshot", "revalidate_next", "sql_lessons"),
        ("learn, first run (no watermark)", "learn", "sql_jobs"),
        (f"learn after {args.new_jobs:,} new jobs", "learn_next", "sql_jobs"),
    ]
    lines = [
        HEADING, "",
        f"Store: {built['lessons']:,} lessons ({built['with_conditions']:,} with conditions), "
        f"{args.jobs:,} job records ({built['occurrences']:,} failures with occurrences), "
        f"{args.snapshots} environment snapshots; SQLite file {size_mb:.0f} MB. Each phase ran in a child "
        f"process on a fresh copy of the store; fastest of {args.repeat} runs"
        + (f" ({args.baseline_repeat} of {args.baseline_rev})" if args.baseline_rev else "")
        + "; peak RSS is the child's ru_maxrss.",
        "",
        "| phase | " + " | ".join(f"{label} s | {label} RSS MB" for label in labels) + " | plain SQL baseline s |",
        "|---|" + "---:|---:|" * len(labels) + "---:|",
    ]
    for title, key, base in rows:
        cells = " | ".join(f"{measured[label][key]['seconds']:.2f} | {measured[label][key]['peak_rss_mb']:.0f}"
                           for label in labels)
        lines.append(f"| {title} | {cells} | {sql[base]['seconds']:.2f} |")
    lines.append("")
    for label in labels:
        m = measured[label]
        lines.append(f"- {label}: revalidate checked {m['revalidate']['checked']:,}, changed "
                     f"{m['revalidate']['changed']:,} (digest {m['revalidate']['digest']}); then changed "
                     f"{m['revalidate_next']['changed']:,} (digest {m['revalidate_next']['digest']}); learn: "
                     f"{m['learn']['pairs']:,} pairs, {m['learn']['inferred_lessons']:,} inferred lessons, "
                     f"{m['learn']['evidence']:,} evidence rows; after the new jobs "
                     f"{m['learn_next']['inferred_lessons']:,} / {m['learn_next']['evidence']:,} "
                     f"(recording them took {m['learn_next']['record_seconds']:.2f} s).")
    lines += ["", "Plain SQL baselines (sqlite3, no hpcmem): all non-rejected lessons, all conditions and the "
              f"snapshots' module JSON ({sql['sql_lessons']['seconds']:.2f} s); every job record in the learn "
              f"sweep's order ({sql['sql_jobs']['seconds']:.2f} s).", "", NOTES, "",
              "Reproduce: `.venv/bin/python bench/bench_revalidate_learn.py "
              + (f"--baseline-rev {args.baseline_rev} " if args.baseline_rev else "")
              + "--write docs/benchmarks.md`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
