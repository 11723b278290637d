"""Replace one '## ' section of a markdown file (docs/benchmarks.md), leaving the rest alone."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, heading: str, body: str) -> None:
    """Replace the section that starts with ``heading`` by ``body`` (which starts with it
    too), up to the next '## ' heading; append it when the file has no such section."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n\n"
    start = text.find(heading + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + body
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + body.rstrip("\n") + "\n" + ("\n" + text[end + 1:] if end >= 0 else "")
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
