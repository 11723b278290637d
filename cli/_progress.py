"""A rich progress bar on stderr, shown only on a terminal (never pollutes logs or --json)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from hpcmem.cli._output import stderr


@contextmanager
def progress_bar(description: str, total: int | None, unit: str = "rows") -> Iterator["callable"]:
    """Yield ``update(completed)``; the rate column shows units per second."""
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn() if total else MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
    ]
    progress = Progress(*columns, console=stderr, transient=True, disable=not stderr.is_terminal)
    with progress:
        task = progress.add_task(description, total=total, rate="")

        def update(completed: int) -> None:
            elapsed = progress.tasks[0].elapsed or 0
            rate = f"{completed / elapsed:,.0f} {unit}/s" if elapsed > 0 else ""
            progress.update(task, completed=completed, rate=rate)

        yield update
