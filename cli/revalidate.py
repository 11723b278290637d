"""`hpcmem revalidate` and `hpcmem feedback`: keep lessons true as the cluster changes."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Optional

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE
from hpcmem.cli.env import ALLOW_EMPTY_HELP, read_text


def revalidate(
    modules: Optional[Path] = typer.Option(None, "--modules", help="`module -t avail` output or Lmod spider JSON."),
    partitions: Optional[Path] = typer.Option(None, "--partitions", help="`scontrol show partition --oneliner` output."),
    live: bool = typer.Option(False, "--live", help="Take a live snapshot first (Lmod, scontrol)."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help=ALLOW_EMPTY_HELP),
    scope: str = typer.Option("user", "--scope", help="Store whose lessons to check: user, lab:NAME or cluster."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would change; change nothing."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Expire or flag lessons whose modules, partitions or limits changed; restore recovered ones."""
    from hpcmem.ingest.environment import build_snapshot
    from hpcmem.kb.environment.history import latest_snapshot, save_snapshot
    from hpcmem.kb.lessons.evidence import judge_recall_events
    from hpcmem.kb.environment.revalidate import revalidate as run

    store = STATE.stack.by_scope(scope).open()
    cluster = STATE.config.get("cluster.name")
    snapshot = latest_snapshot(store, cluster)
    if live or modules or partitions:
        env, carried = build_snapshot(read_text(modules, "--modules"), read_text(partitions, "--partitions"),
                                      live=live, previous=snapshot, allow_empty=allow_empty,
                                      modules_from=str(modules), partitions_from=str(partitions))
        if dry_run:
            from hpcmem.kb.environment.history import StoredSnapshot
            from hpcmem.kb.store.column_types import utcnow

            snapshot = StoredSnapshot(None, cluster, utcnow(), "dry run", env, env.content_hash())
        else:
            source = "live" if live else ", ".join(str(p) for p in (modules, partitions) if p)
            snapshot, _ = save_snapshot(store, env, cluster=cluster, source=source + (f" ({carried})" if carried else ""))
    evidence = None if dry_run else judge_recall_events(store).as_dict()
    report = run(store, snapshot, dry_run=dry_run, actor=getpass.getuser(),
                 unconfirmed_days=STATE.config.get("revalidate.unconfirmed_days"))
    data = report.as_dict() | {"evidence": evidence}
    if json_:
        emit_json(data)
        return
    where = f"snapshot {snapshot.id}" if snapshot and snapshot.id else "no snapshot" if snapshot is None else "the given files"
    stdout.print(f"checked {data['checked']} lesson(s) against {where}"
                 + (" (dry run: nothing changed)" if dry_run else ""))
    if not report.changes:
        stdout.print("no status changes")
        return
    from rich.table import Table

    table = Table("lesson", "status", "why")
    for c in report.changes:
        table.add_row(c.lesson_id[:8], f"{c.before} -> {c.after}", "\n".join(c.reasons))
    stdout.print(table)


def feedback(
    lesson_id: str = typer.Argument(..., help="The lesson's id: the 8 characters recall shows are enough."),
    worked: bool = typer.Option(False, "--worked", help="Applying the lesson fixed the failure."),
    failed: bool = typer.Option(False, "--failed", help="Applying the lesson did not fix it."),
    job: Optional[str] = typer.Option(None, "--job", help="The job that shows it."),
    note: Optional[str] = typer.Option(None, "--note", help="A short remark kept with the evidence."),
    error: Optional[str] = typer.Option(None, "--error", help="The error the lesson was applied to (- for stdin): "
                                        "with --worked it becomes a known variant of the lesson, with --failed it stops being one."),
    scope: Optional[str] = typer.Option(None, "--scope", help="Store holding the lesson, when its id is in several: "
                                        "user, lab:NAME or cluster."),
    json_: bool = typer.Option(False, "--json", help="Print the updated lesson as JSON."),
) -> None:
    """Tell hpcmem whether a recalled lesson worked; confidence follows the evidence."""
    from hpcmem.kb.errors import InputError
    from hpcmem.kb.lessons.evidence import feedback as run

    if worked == failed:
        raise InputError("give exactly one of --worked and --failed")
    if error == "-":
        import sys

        error = sys.stdin.read()
    lesson = run(STATE.stack, lesson_id, worked=worked, actor=getpass.getuser(), job_id=job, note=note,
                 error_text=error, scope=scope)
    if json_:
        emit_json(lesson)
        return
    stdout.print(f"lesson {lesson['lesson_id'][:8]}: confidence {lesson['confidence']:.2f} "
                 f"({lesson['confirmations']} confirmation(s), {lesson['contradictions']} contradiction(s), "
                 f"{len(lesson['aliases'])} known variant(s))")
