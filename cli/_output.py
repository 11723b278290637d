"""Output helpers: results on stdout (JSON or rich), everything else on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any



class _LazyConsole:
    """A rich Console made on first use: `recall --json` and `record --json` print no
    rich output and should not pay for importing rich (about 15 ms)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


# Markup and emoji codes are off: job names, logs and lessons are user data, and text
# like "[red]" or ":cd:" in them must print as it is.
stdout = _LazyConsole(soft_wrap=True, markup=False, emoji=False, highlight=False)
stderr = _LazyConsole(stderr=True, soft_wrap=True, markup=False, emoji=False, highlight=False)


def styled(markup: str):
    """Rich Text from hpcmem's own markup (never from user data)."""
    from rich.text import Text

    return Text.from_markup(markup, emoji=False)


def _default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def emit_json(data: Any) -> None:
    """One JSON document on stdout and nothing else."""
    sys.stdout.write(json.dumps(data, default=_default, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def emit_jsonl(record: Any) -> None:
    sys.stdout.write(json.dumps(record, default=_default, ensure_ascii=False) + "\n")


def info(message: str) -> None:
    stderr.print(message, highlight=False)


def warn(message: str) -> None:
    from rich.text import Text

    stderr.print(Text("Warning: ", style="yellow") + Text(message))
