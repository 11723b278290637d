"""`hpcmem record`: save what caused a failure and what fixed it."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import List, Optional

import typer

from hpcmem.cli._job_context import SBATCH_ARGS_HELP, SCRIPT_HELP, job_context
from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE


def record(
    error: Optional[str] = typer.Option(None, "--error", help="The error message (one line or a whole excerpt)."),
    error_file: Optional[Path] = typer.Option(None, "--error-file", help="Read the error from a file (- for stdin)."),
    job: Optional[str] = typer.Option(None, "--job", help="A stored failure's job id; its context is used."),
    cause: str = typer.Option(..., "--cause", help="What caused the failure."),
    fix: str = typer.Option(..., "--fix", help="What fixed it."),
    action: List[str] = typer.Option([], "--action", help="Structured fix, repeatable: --mem=32G, '--time 4:00:00->12:00:00', 'module swap cuda/11.8 cuda/12.4', 'export X=1', 'run: CMD'."),
    scope: str = typer.Option("user", "--scope", help="Store to write: user, lab:NAME or cluster."),
    partition: Optional[str] = typer.Option(None, "--partition", help="Partition the lesson applies to."),
    module: List[str] = typer.Option([], "--module", help="Module NAME/VERSION the lesson depends on (repeatable)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster the lesson applies to (default: configured cluster)."),
    context: Optional[str] = typer.Option(None, "--context", help="What the job was doing."),
    script: Optional[Path] = typer.Option(None, "--script", help=SCRIPT_HELP),
    sbatch_args: Optional[str] = typer.Option(None, "--sbatch-args", help=SBATCH_ARGS_HELP),
    source: Optional[str] = typer.Option(None, "--source", help="agent or human (default: agent unless stdin is a terminal)."),
    valid_until: Optional[str] = typer.Option(None, "--valid-until", help="Date (YYYY-MM-DD, later than today) on which the lesson expires, at 00:00 UTC."),
    json_: bool = typer.Option(False, "--json", help="Print the new lesson as JSON."),
) -> None:
    """Record a lesson (context / cause / fix) for an error, in your store or a shared one."""
    from hpcmem.kb.errors import InputError
    from hpcmem.kb.lessons.from_error import record as run

    if sum(x is not None for x in (error, error_file)) > 1:
        raise InputError("give only one of --error and --error-file")
    text = error
    if error_file is not None:
        text = _read_error_file(error_file)
    chosen_source = source or ("human" if sys.stdin.isatty() else "agent")
    if chosen_source not in ("agent", "human"):
        raise InputError("--source must be agent or human (curated lessons come from review)")
    if job is not None:
        from hpcmem.cli.recall import drain_my_events

        drain_my_events(job)  # as the MCP tool: a job the epilog just spooled is known
    lesson = run(
        STATE.stack, cause=cause, fix=fix, author=getpass.getuser(), source=chosen_source, error_text=text,
        job_id=job, actions=action, scope=scope, partition=partition, modules=module,
        cluster=cluster or (STATE.config.get("cluster.name") if not job else None), context=context,
        valid_until=_date(valid_until), job_context=job_context(script, sbatch_args),
    )
    if scope != "user":
        from hpcmem.cli.lessons import embed_in_shared

        embed_in_shared(scope)
    if json_:
        emit_json(lesson)
        return
    stdout.print(f"recorded lesson {lesson['lesson_id']} ({lesson['category']}, {lesson['status']}) "
                 f"in the {scope} store")
    for flag in lesson["safety_flags"]:
        stdout.print(f"  warning [{flag['severity']}] {flag['code']}: {flag['message']}")


def _read_error_file(path: Path) -> str:
    from hpcmem.kb.errors import InputError

    if str(path) == "-":
        return sys.stdin.read()
    try:
        with open(path, "rb") as fh:
            return fh.read(1_000_000).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read --error-file {path}: {exc.strerror}") from None


def _date(value: str | None):
    if value is None:
        return None
    import datetime as dt

    from hpcmem.kb.errors import InputError

    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise InputError(f"--valid-until expects YYYY-MM-DD, got '{value}'") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
