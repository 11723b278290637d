"""Run the sacct parser over every sacct fixture in ../shared/reference/ and check it.

    .venv/bin/python bench/reference_sacct.py [--reference ../shared/reference] [--write docs/benchmarks.md]

The reference fixtures are third-party test data we may read but not copy into the
project, so this conformance check lives beside the benchmarks instead of in tests/.
For each file it reports rows, jobs, failures, issues and the state counts, and it
asserts the facts the fixtures were chosen for (exit status 1 if one does not hold).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from datetime import timezone
from pathlib import Path

from hpcmem.ingest.sacct import SacctReader

XDMOD_FIELDS = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,"
                "elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname").split(",")


def read(lines, **kw):
    reader = SacctReader(lines, tz=timezone.utc, **kw)
    jobs = {job.job_id: job for job in reader}
    return reader, jobs


def check(results: list, name: str, reader, jobs, expectations) -> None:
    failed = []
    for label, ok in expectations:
        try:
            good = bool(ok(jobs))
        except Exception as exc:  # noqa: BLE001 - a broken expectation is a failure to report
            good, label = False, f"{label} ({type(exc).__name__}: {exc})"
        if not good:
            failed.append(label)
    states = Counter(job.failure_state or job.state for job in jobs.values())
    results.append({
        "file": name, "rows": reader.rows_read, "jobs": len(jobs),
        "failures": sum(job.is_failure for job in jobs.values()), "issues": reader.issue_count,
        "states": dict(sorted(states.items())), "checks": len(expectations), "failed": failed,
    })


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=str(Path(__file__).resolve().parents[2] / "shared" / "reference"))
    parser.add_argument("--write")
    args = parser.parse_args()
    ref = Path(args.reference) / "sacct"
    real = Path(args.reference) / "real-slurm"
    results: list[dict] = []

    # xdmod: --parsable2 --noheader, 26 columns
    for name, expect in [
        ("xdmod_shredder_accounting-logs.psv", [
            ("CANCELLED by uid parsed", lambda j: j["4107166"].state == "CANCELLED" and j["4107166"].cancelled_by_uid == 102216),
            ("3-day TIMEOUT elapsed", lambda j: j["4103947"].state == "TIMEOUT" and j["4103947"].elapsed_s == 3 * 86400),
            ("Mc ReqMem per cpu", lambda j: j["4103947"].req_mem_per == "cpu" and j["4103947"].req_mem_mb == 3000),
            ("Mn ReqMem per node", lambda j: j["4107166"].req_mem_per == "node" and j["4107166"].req_mem_mb == 48000),
        ]),
        ("xdmod_shredder_accounting-logs-with-job-arrays.psv", [
            ("array task ids", lambda j: any(job.array_task_id is not None for job in j.values())),
        ]),
        ("xdmod_shredder_non-ended-job-state.psv", [
            ("running/pending not failures", lambda j: not any(job.is_failure for job in j.values() if job.state in ("RUNNING", "PENDING"))),
        ]),
        ("xdmod_shredder_utf8-multibyte-chars.psv", [("utf-8 job name kept", lambda j: any(not job.name.isascii() for job in j.values() if job.name))]),
    ]:
        with open(ref / name, encoding="utf-8") as fh:
            reader, jobs = read(fh, fields=XDMOD_FIELDS)
        check(results, name, reader, jobs, expect)

    # torchx: --parsable2 / --parsable with a header, het jobs
    for name, expect in [
        ("torchx_sacct_parsable2_hetjob_completed.psv", [("het components", lambda j: {"1853+0", "1853+1"} <= set(j))]),
        ("torchx_sacct_parsable2_failed_exit2.psv", [("FAILED 2:0", lambda j: all(job.state == "FAILED" and job.exit_code == 2 for job in j.values()))]),
        ("torchx_sacct_parsable2_running.psv", [("RUNNING, no failure", lambda j: all(job.state == "RUNNING" and not job.is_failure for job in j.values()))]),
        ("torchx_sacct_parsable2_cancelled_by_uid.psv", [("CANCELLED by 2166", lambda j: all(job.cancelled_by_uid == 2166 for job in j.values()))]),
        ("torchx_sacct_parsable_trailing_delim_hetjob_completed.psv", [("trailing | het job", lambda j: set(j) == {"176+0", "176+1", "176+2"})]),
        ("jobstats_sacct_P_X_epoch_times_JS1_admincomment.psv", [("epoch start times", lambda j: all(job.start is None or job.start.year >= 2020 for job in j.values()))]),
    ]:
        with open(ref / name, encoding="utf-8") as fh:
            reader, jobs = read(fh)
        check(results, name, reader, jobs, expect)

    # reportseff: 23 cases of --parsable -n --delimiter=^|^ in one JSON manifest
    manifest = json.loads((ref / "reportseff_sacct_fixtures.json").read_text())
    for case in manifest["cases"]:
        lines = case["raw"].splitlines()
        reader, jobs = read(lines, fields=case["columns"], delimiter=case["delimiter"],
                            trailing_delimiter=case["trailing_delimiter"])
        check(results, f"reportseff {case['case']}", reader, jobs, [
            ("every row read", lambda j, r=reader: r.rows_skipped == 0),
        ])

    # our own cluster's real output
    expect_real = [
        ("job 4 OUT_OF_MEMORY 0:125, MaxRSS on batch", lambda j: (j["4"].state, j["4"].exit_signal, round(j["4"].max_rss_mb, 2)) == ("OUT_OF_MEMORY", 125, 43.03)),
        ("job 5 step failure", lambda j: j["5"].is_failure and j["5"].failed_step == "0" and j["5"].derived_exit_code == 3),
        ("job 6 CANCELLED by 0", lambda j: j["6"].state == "CANCELLED" and j["6"].cancelled_by_uid == 0),
        ("job 1 TIMEOUT 85 s of 60", lambda j: (j["1"].state, j["1"].elapsed_s, j["1"].timelimit_s) == ("TIMEOUT", 85, 60)),
    ]
    with open(real / "sacct" / "sacct-parsable2.txt", encoding="utf-8") as fh:
        reader, jobs = read(fh)
    check(results, "real-slurm sacct-parsable2.txt", reader, jobs, expect_real)

    failed = [r for r in results if r["failed"]]
    lines = [
        "## sacct reference conformance",
        "",
        "Every sacct fixture in `shared/reference/` parsed by `SacctReader` "
        "(`bench/reference_sacct.py`; the fixtures stay outside the project).",
        "",
        "| file | rows | jobs | failures | issues | checks | result |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        verdict = "ok" if not r["failed"] else "FAILED: " + "; ".join(r["failed"])
        lines.append(f"| {r['file']} | {r['rows']} | {r['jobs']} | {r['failures']} | {r['issues']} | {r['checks']} | {verdict} |")
    lines += ["", f"{len(results) - len(failed)} of {len(results)} files pass all their checks.",
              "", "Reproduce: `.venv/bin/python bench/reference_sacct.py --write docs/benchmarks.md`", ""]
    report = "\n".join(lines)
    print(report)
    if args.write:
        from bench_ingest import write_section

        write_section(Path(args.write), "## sacct reference conformance", report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
