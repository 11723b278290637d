"""The one text boundary: whatever comes in (argv, stdin, files, JSON) becomes text that can
be encoded, stored in PostgreSQL and printed.

Python hands undecodable argv and file bytes over as lone surrogates (``surrogateescape``),
and JSON can spell one (``"\\ud800"``); either makes ``str.encode`` raise far from where it
came in - in the database driver, or when printing - and a crash there reads as "no lesson"
to an agent. Log text with a stray Latin-1 byte is ordinary on clusters, so it is repaired,
not refused: each undecodable byte and each lone surrogate becomes U+FFFD.
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# surrogateescape's range: one undecodable byte each (0x80-0xFF as U+DC80-U+DCFF)
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]+")


def as_text(value: str | bytes) -> str:
    """``value`` as text every encoder accepts; valid text comes back unchanged (same object)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if not _LONE_SURROGATE.search(value):
        return value
    # Bytes smuggled in by surrogateescape are decoded together, so a valid multi-byte
    # sequence split across them is not lost; any other surrogate is replaced.
    value = _ESCAPED_BYTE.sub(
        lambda m: m.group().encode("utf-8", "surrogateescape").decode("utf-8", "replace"), value)
    return _LONE_SURROGATE.sub("\ufffd", value)
