"""`hpcmem learn`: turn failed jobs and the resubmissions that fixed them into lessons."""

from __future__ import annotations

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE


def learn(
    window_hours: float = typer.Option(48.0, "--window-hours", min=0.1, help="How long after a failure a successful resubmission still counts."),
    scope: str = typer.Option("user", "--scope", help="Store to learn in: user, lab:NAME or cluster."),
    full: bool = typer.Option(False, "--full", help="Read every job again, not only those written since the last run."),
    json_: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Pair failed jobs with later successful resubmissions and record what changed."""
    from hpcmem.kb.lessons.learn import learn_from_history

    store = STATE.stack.by_scope(scope).open()
    summary = learn_from_history(store, window_hours=window_hours, full=full)
    if json_:
        emit_json(summary.as_dict())
        return
    data = summary.as_dict()
    read = f"{data['jobs_read']:,} job(s) read since the last run" if data["mode"] == "incremental" else "every job read"
    stdout.print(f"pairs found: {data['pairs_found']}, lessons created: {data['lessons_created']}, "
                 f"confirmed: {data['lessons_confirmed']}, transient: {data['transient']} ({read})")
