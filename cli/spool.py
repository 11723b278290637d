"""`hpcmem ingest spool`: store the events the epilog spooled, exactly once."""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE

EXIT_DEFERRED = 1  # some events stay pending (store locked, budget spent): run it again
EXIT_BUSY = 3  # another drain held some user's spool: its events are left to that drain


def ingest_spool(
    spool: List[str] = typer.Option([], "--spool", help="Spool directory (repeatable; default: spool.dir / HPCMEM_SPOOL)."),
    user: List[str] = typer.Option([], "--user", help="Only this user's events (repeatable; default: every user)."),
    scope: str = typer.Option("user", "--scope", help="Store to write: user, lab:NAME or cluster."),
    retry_for: float = typer.Option(60.0, "--retry-for", min=0, help="Seconds to keep retrying while another writer holds the store locked."),
    budget: Optional[float] = typer.Option(None, "--budget", min=0, help="Stop after this many seconds; the rest stays pending."),
    learn: bool = typer.Option(True, "--learn/--no-learn", help="Afterwards, learn fixes from failed jobs and their successful resubmissions."),
    json_: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Drain the epilog spool into a store: new events are ingested, malformed ones quarantined.

    Exit 0: everything pending was handled; 1: some events stay pending (see "deferred");
    2: the spool cannot be read (one line says which directory and why); 3: another drain
    held some user's spool ("busy"), so its events were left to that drain. Safe to run
    from cron or a systemd timer while epilogs keep writing.
    """
    from hpcmem.ingest.spool import drain_spool

    dirs = list(spool) or [STATE.config.get("spool.dir")]
    store = STATE.stack.by_scope(scope).open()
    summary = drain_spool(store, dirs, users=list(user) or None, budget_s=budget, retry_for_s=retry_for)
    if learn:
        from hpcmem.ingest.learning import learn_after_ingest

        learn_after_ingest(store, summary)
    if scope != "user" and (summary.ingested or summary.learned):
        from hpcmem.cli.lessons import embed_in_shared

        embed_in_shared(scope)  # lessons learned into a shared store: its readers never embed them
    data = summary.as_dict()
    if json_:
        emit_json(data)
    else:
        _print(data)
    if summary.deferred:
        sys.stderr.write(f"Warning: {summary.deferred} event(s) left pending; run `hpcmem ingest spool` again\n")
        raise typer.Exit(EXIT_DEFERRED)
    if summary.busy:
        sys.stderr.write(f"Warning: {summary.busy} user spool(s) held by another drain; their events are left to it\n")
        raise typer.Exit(EXIT_BUSY)


def _print(data: dict) -> None:
    stdout.print(f"spool {data['source']}: {data['ingested']} ingested, {data['duplicates']} duplicate(s), "
                 f"{data['quarantined']} quarantined, {data['deferred']} left pending "
                 f"({data['jobs']} job(s), {data['failures']} failure(s), {data['seconds']} s)")
    for label in ("unreadable", "busy", "retries", "recovered", "stale_removed"):
        if data[label]:
            stdout.print(f"  {label.replace('_', ' ')}: {data[label]}")
    learned = data.get("learned")
    if learned:
        stdout.print(f"learned from resubmissions: {learned['lessons_created']} new lesson(s), "
                     f"{learned['lessons_confirmed']} confirmed")
    for issue in data["issues"][:20]:
        stdout.print(f"  {issue['path']}: {issue['reason']}")
