"""`hpcmem ingest sacct | logs`: read failures from the outside world into the user store."""

from __future__ import annotations

import datetime
import stat
import sys
from pathlib import Path
from typing import List, Optional

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE

app = typer.Typer(help="Mine Slurm accounting and job logs into occurrences and signatures.", no_args_is_help=True)


def _target_store(scope: str):
    return STATE.stack.by_scope(scope).open()


@app.command("sacct")
def ingest_sacct(
    source: Optional[str] = typer.Argument(None, help="sacct --parsable2 output file or pipe (<(sacct ...)), or - for stdin."),
    live: bool = typer.Option(False, "--live", help="Run sacct here (needs sacct on PATH)."),
    since: Optional[str] = typer.Option(None, "--since", help="With --live: sacct --starttime (e.g. now-1days, 2026-11-01)."),
    all_users: bool = typer.Option(False, "--all-users", help="With --live: every user's jobs (sacct --allusers)."),
    format_: Optional[str] = typer.Option(None, "--format", help="Field list of headerless input, as given to sacct --format."),
    delimiter: str = typer.Option("|", "--delimiter", help="Field separator, as given to sacct --delimiter (e.g. '^|^')."),
    tz: Optional[str] = typer.Option(None, "--tz", help="Time zone the dump's times are in (e.g. America/New_York); default: this machine's."),
    logs: bool = typer.Option(False, "--logs", help="Also scan each failed job's StdOut/StdErr file when sacct gives its path."),
    learn: bool = typer.Option(True, "--learn/--no-learn", help="Afterwards, learn fixes from failed jobs and their successful resubmissions."),
    scope: str = typer.Option("user", "--scope", help="Store to write: user, lab:NAME or cluster."),
    json_: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Ingest sacct output: failures become occurrences, all jobs are kept in compact form."""
    from hpcmem.ingest.sacct_ingest import ingest_sacct as run
    from hpcmem.kb.errors import InputError

    if live == (source is not None):
        raise InputError("give either a FILE (or - for stdin) or --live")
    if (since or all_users) and not live:
        raise InputError("--since and --all-users only apply with --live")
    fields = [f.strip() for f in format_.split(",") if f.strip()] if format_ else None
    zone = _zone(tz)
    cluster = STATE.config.get("cluster.name")
    store = _target_store(scope)

    from hpcmem.cli._progress import progress_bar

    if live:
        from hpcmem.ingest.sacct import run_live_sacct, sacct_version

        lines = run_live_sacct(since=since, all_users=all_users, slurm_version=sacct_version())
        with progress_bar("sacct --live", None) as update:
            summary = run(store, lines, cluster=cluster, source="sacct --live", on_progress=update,
                          scan_logs=logs, tz=datetime.timezone.utc)
    elif source == "-":
        with progress_bar("stdin", None) as update:
            summary = run(store, sys.stdin, cluster=cluster, fields=fields, source="stdin", on_progress=update,
                          scan_logs=logs, tz=zone, delimiter=delimiter)
    else:
        path = Path(source)
        try:
            info = path.stat()
        except FileNotFoundError:
            raise InputError(f"{source}: no such file") from None
        except OSError as exc:
            raise InputError(f"cannot read {source}: {exc.strerror}") from None
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{source} is a directory, not a sacct dump")
        # A pipe (`<(sacct ...)`, /dev/stdin) has no size: it is read as a stream.
        size = info.st_size if stat.S_ISREG(info.st_mode) else None
        # A path: the library reads it, a large file with parsing spread over the CPUs.
        with progress_bar(path.name, size, unit="B") as update:
            summary = run(store, path, cluster=cluster, fields=fields, source=str(path), on_bytes=update,
                          scan_logs=logs, tz=zone, delimiter=delimiter)
    if learn:
        from hpcmem.ingest.learning import learn_after_ingest

        learn_after_ingest(store, summary)
    _report(summary, json_)


@app.command("logs")
def ingest_logs(
    paths: List[str] = typer.Argument(..., help="Job log files or directories (slurm-%j.out, %x-%j.err ...)."),
    job: Optional[str] = typer.Option(None, "--job", help="Job id the logs belong to (default: from the file name)."),
    scope: str = typer.Option("user", "--scope", help="Store to write: user, lab:NAME or cluster."),
    json_: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Extract the failure excerpt of each job log and link it to its job."""
    from hpcmem.ingest.logs import ingest_logs as run

    store = _target_store(scope)
    summary = run(store, paths, cluster=STATE.config.get("cluster.name"), job_id=job)
    _report(summary, json_)


def _zone(name: str | None):
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from hpcmem.kb.errors import InputError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"unknown time zone '{name}' (use an IANA name such as Europe/Berlin or UTC)") from None


def _report(summary, json_: bool) -> None:
    data = summary.as_dict()
    if json_:
        emit_json(data)
        return
    from rich.table import Table

    table = Table(title=f"ingested {data['source']}", show_header=False)
    data = dict(data)
    labels = [
        ("rows_read", "rows read"), ("files", "files"), ("jobs", "jobs"), ("failures", "failures"),
        ("occurrences_new", "new occurrences"), ("occurrences_updated", "updated occurrences"),
        ("signatures_new", "new signatures"), ("signatures_known", "known signatures"),
        ("redactions", "secrets redacted"), ("logs_scanned", "logs scanned"), ("skipped", "skipped lines"), ("issue_count", "lines with problems"),
        ("seconds", "seconds"),
    ]
    learned = data.pop("learned", None)
    for key, label in labels:
        if key in data:
            table.add_row(label, f"{data[key]:,}" if isinstance(data[key], int) else str(data[key]))
    stdout.print(table)
    if learned:
        stdout.print(f"learned from resubmissions: {learned['lessons_created']} new lesson(s), "
                     f"{learned['lessons_confirmed']} confirmed")
    for issue in data.get("issues", [])[:20]:
        where = f"line {issue['line']}" if "line" in issue else issue.get("path", "")
        stdout.print(f"  {where}: {issue['reason']}")
    shown = len(data.get("issues", [])[:20])
    total = data.get("issue_count", data.get("skipped", 0))
    if total > shown:
        stdout.print(f"  ... and {total - shown} more")


# `ingest spool` lives in its own module (the spool's operator commands); same group.
from hpcmem.cli.spool import ingest_spool  # noqa: E402

app.command("spool")(ingest_spool)
