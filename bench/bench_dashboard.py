"""The web console's trends dashboard over 10^6 occurrences: target <= 1 s per page.

    .venv/bin/python bench/bench_dashboard.py [--occurrences 1000000] [--runs 5] [--write docs/benchmarks.md]

A lab store (SQLite, migrated by ``Store.open``) is filled with synthetic failures through
its own schema (column names checked against the model): 2,000 signatures in 10
categories with a long-tailed frequency, 3,000 users in 20 Slurm accounts, end times over
a year, and lessons on every third signature. Then, on a warm store:

- baseline: ``SELECT count(*) FROM occurrences`` and a one-column ``GROUP BY signature_id``
  (what any full aggregate costs);
- ``kb.jobs.trends.store_trends``: every figure the dashboard shows, in the library;
- the page: ``GET /trends`` through a real uvicorn server and HTTP client, SVG included.

It also times the bulk insert with the indexes of migration 0005 against the indexes of
0004, because the two covering indexes are paid for at ingest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.cookiejar
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CATEGORIES = ("host_oom", "gpu_oom", "timeout", "module_missing", "python_import", "node_fail", "disk_quota",
              "mpi", "cuda_runtime", "segfault")
NOW = dt.datetime(2027, 1, 10, tzinfo=dt.timezone.utc)
FMT = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy's SQLite DateTime stores values
OCC_COLUMNS = ("signature_id", "cluster", "job_id", "user_name", "account", "state", "source", "end_time",
               "observed_at")
NEW_INDEXES = ("ix_occurrences_end_time_signature_id", "ix_occurrences_signature_id_user_name_end_time_account")


def occurrence_rows(n: int, signatures: int, seed: int = 1):
    rng = random.Random(seed)
    users = [f"u{i:04d}" for i in range(3000)]
    start = (NOW - dt.timedelta(days=365)).replace(tzinfo=None)
    for j in range(n):
        i = rng.randrange(len(users))
        sig = int(rng.paretovariate(1.2)) % signatures + 1
        when = (start + dt.timedelta(seconds=rng.randrange(365 * 86400))).strftime(FMT)
        yield (sig, "della", str(10_000_000 + j), users[i], f"lab{i % 20:02d}", "FAILED", "sacct", when, when)


def build_store(path: Path, n: int, *, signatures: int = 2000, old_indexes: bool = False) -> float:
    """Fill a fresh lab store; returns the seconds spent inserting occurrences."""
    from hpcmem.kb.store.models import Occurrence
    from hpcmem.kb.store.database import Store

    missing = set(OCC_COLUMNS) - set(Occurrence.__table__.c.keys())
    assert not missing, f"model has no column {missing}"
    Store(f"sqlite:///{path}", name="vision", scope="lab").open().dispose()
    con = sqlite3.connect(path)
    if old_indexes:  # the occurrence indexes as migration 0004 left them
        for name in NEW_INDEXES:
            con.execute(f"DROP INDEX {name}")
        con.execute("CREATE INDEX ix_occurrences_end_time ON occurrences (end_time)")
    stamp = NOW.strftime(FMT)
    con.executemany("INSERT INTO signatures (id, fingerprint, category, template, first_seen, last_seen, count) "
                    "VALUES (?, ?, ?, ?, ?, ?, 0)",
                    [(i + 1, f"{i:016x}", CATEGORIES[i % len(CATEGORIES)], f"error template number {i} <n>", stamp,
                      stamp) for i in range(signatures)])
    rng = random.Random(2)
    con.executemany(
        "INSERT INTO lessons (id, signature_id, fingerprint, scope, scope_name, cause, fix, actions, status, "
        "confidence, confirmations, contradictions, source, safety_flags, created_at, updated_at, previous_status) "
        "VALUES (?, ?, ?, 'lab', 'vision', 'cause', 'fix', '[]', ?, 0.5, 0, 0, 'human', '[]', ?, ?, ?)",
        [(str(uuid.uuid4()), i + 1, f"{i:016x}", status,
          (NOW - dt.timedelta(days=rng.randrange(365))).strftime(FMT), stamp,
          "validated" if status in ("stale", "expired") and i % 2 else None)
         for i in range(0, signatures, 3)
         for status in [rng.choice(("candidate", "validated", "validated", "stale", "expired", "rejected"))]])
    con.commit()
    sql = f"INSERT INTO occurrences ({', '.join(OCC_COLUMNS)}) VALUES ({', '.join('?' * len(OCC_COLUMNS))})"
    rows = occurrence_rows(n, signatures)
    spent = 0.0
    while True:
        chunk = [r for _, r in zip(range(50_000), rows)]
        if not chunk:
            break
        t0 = time.perf_counter()
        con.executemany(sql, chunk)
        con.commit()
        spent += time.perf_counter() - t0
    con.execute("ANALYZE")
    con.commit()
    con.close()
    return spent


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def serve_in_thread(app):
    import uvicorn

    from hpcmem.cli.web.server import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--occurrences", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-index-cost", action="store_true", help="Do not time the insert with 0004's indexes.")
    parser.add_argument("--write", type=Path, help="Write the results into this markdown file (docs/benchmarks.md).")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hpcmem-bench-dashboard-"))
    os.environ.update(HPCMEM_HOME=str(tmp / "home"), HPCMEM_DISABLE_LOCAL_CONFIG="1")
    (tmp / "home").mkdir(mode=0o700)
    lab_path = tmp / "lab" / "vision.db"
    lab_path.parent.mkdir()
    insert_new = build_store(lab_path, args.occurrences)
    insert_old = None
    if not args.skip_index_cost:
        old = tmp / "old" / "vision.db"
        old.parent.mkdir()
        insert_old = build_store(old, args.occurrences, old_indexes=True)
        old.unlink()

    from sqlalchemy import text

    from hpcmem.cli.web.app import Console, create_app
    from hpcmem.kb.config import load_config
    from hpcmem.kb.store.stack import StoreStack
    from hpcmem.kb.store.database import Store
    from hpcmem.kb.jobs.trends import store_trends

    lab = Store(f"sqlite:///{lab_path}", name="vision", scope="lab").open()
    user = Store(f"sqlite:///{tmp / 'user' / 'user.db'}").open()
    with lab.engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM occurrences")).scalar()
        base_count = timed(lambda: conn.execute(text("SELECT count(*) FROM occurrences")).scalar(), args.runs)
        base_group = timed(lambda: conn.execute(
            text("SELECT signature_id, count(*) FROM occurrences GROUP BY signature_id")).all(), args.runs)
    library = timed(lambda: store_trends(lab), args.runs)

    console = Console(stack=StoreStack(user=user, labs=[lab]), config=load_config(), actor="bench")
    server, thread, port = serve_in_thread(create_app(console))
    jar = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    jar.open(f"http://127.0.0.1:{port}/?token={console.token}").read()
    page_url = f"http://127.0.0.1:{port}/trends?store=lab:vision"
    sizes = []

    def fetch():
        body = jar.open(page_url, timeout=60).read()
        assert b"<svg" in body
        sizes.append(len(body))

    cold = timed(fetch, 1)[0]

    def fetch_uncached():
        console.trends_cache.clear()  # as if the store had just changed
        fetch()

    page = timed(fetch_uncached, args.runs)
    cached = timed(fetch, args.runs)
    server.should_exit = True
    thread.join(timeout=10)

    def ms(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 1000:.1f} ms (max {max(xs) * 1000:.1f})"

    load = os.getloadavg()[0]  # the reference machine is shared: say how busy it was
    lines = [
        f"occurrences: {count:,}; page size {sizes[-1] / 1024:.0f} KiB; {args.runs} warm runs (median, max); "
        f"load average {load:.1f} on {os.cpu_count()} CPUs",
        f"baseline SELECT count(*):                 {ms(base_count)}",
        f"baseline GROUP BY signature_id:           {ms(base_group)}",
        f"kb.jobs.trends.store_trends (library):          {ms(library)}",
        f"GET /trends, first request after start:    {cold * 1000:.0f} ms",
        f"GET /trends through uvicorn, recomputed:   {ms(page)}",
        f"GET /trends, store unchanged (cached):     {ms(cached)}",
        f"bulk insert of the occurrences, 0005 indexes: {insert_new:.1f} s",
    ]
    if insert_old is not None:
        lines.append(f"bulk insert of the occurrences, 0004 indexes: {insert_old:.1f} s")
    print("\n".join(lines))
    if args.write:
        from markdown_section import write_section

        verdict = "meets" if statistics.median(page) <= 1.0 and max(page) <= 1.0 else "MISSES"
        body = (
            "## Web console dashboard\n\n"
            "`.venv/bin/python bench/bench_dashboard.py --write docs/benchmarks.md` (SQLite lab store, "
            f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}). Synthetic store: 2,000 signatures, 3,000 "
            "users in 20 accounts, a year of end times, lessons on every third signature. The dashboard "
            "aggregates in SQL (kb/jobs/trends.py) over the covering indexes of migration 0005.\n\n"
            "```\n" + "\n".join(lines) + "\n```\n\n"
            f"Recomputed, the page {verdict} the 1 s target at this size and load (the reference machine is "
            "shared; the load average is in the first line). The console keeps a store's figures until "
            "the store changes (a few-ms version query: occurrence, lesson, alias and audit counts and "
            "maxima), so only the first view after a change pays the aggregate. The two covering indexes "
            "cost ingest time: compare the two bulk-insert lines (raw executemany, 50,000 rows per "
            "transaction).\n"
        )
        write_section(args.write, "## Web console dashboard", body)


if __name__ == "__main__":
    main()
