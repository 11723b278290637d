"""Lmod's version order, shared by the Lmod readers in ingest and the revalidator.

Numbers compare as numbers (9 < 10); pre-release words (``rc``, ``beta``, ``dbg``) sort
before the release and patch levels (``-1``, ``p2``) after it, as Lmod sorts them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator


# Words Lmod rewrites before comparing: pre-releases sort before the release,
# patch levels ("-", "p") after it, "dev" before everything.
_WORD_REPLACEMENTS = {
    "pre": "c",
    "preview": "c",
    "rc": "c",
    "dev": "@",
    "p": "zfinal-",
    "-": "zfinal-",
}
_ZERO = "000000000"
_PATCH = "*zfinal-"
_END = "*zfinal"
_DIGITS = re.compile(r"[0-9]+")
_LETTERS = re.compile(r"[a-z]+")


def _version_pieces(version: str) -> Iterator[str]:
    text = version.lower()
    end = len(text)
    pos = 0
    while True:
        if pos < end and text[pos] == ".":
            pos += 1
            if pos == 1:  # a leading dot (hidden version such as ".2.0") counts as 0
                yield _ZERO
                continue
        if pos > end:
            return
        if pos == end:
            pos += 1
            yield _END
            continue
        if match := _DIGITS.match(text, pos):
            pos = match.end()
            digits = match.group()
            yield digits if len(digits) >= 9 else digits.zfill(9)
        elif text[pos] == "/":
            pos += 1
            yield "/"
        elif match := _LETTERS.match(text, pos):
            pos = match.end()
            yield "*" + _WORD_REPLACEMENTS.get(match.group(), match.group())
        elif text.startswith("-p", pos):
            pos += 2
            yield _PATCH
        else:
            char = text[pos]
            pos += 1
            yield "*" + _WORD_REPLACEMENTS.get(char, char)


def lmod_version_key(version: str) -> str:
    """Lmod's canonical form of a version; comparing these strings orders versions as
    Lmod does. Equals the ``pV`` field of spider output, e.g. '12.2.0' ->
    '000000012.000000002.*zfinal' (trailing zeros dropped, so 2.4 == 2.4.0)."""
    parts: list[str] = []
    for piece in _version_pieces(version):
        if piece.startswith("*"):
            if piece != _END:  # a "-" before a pre-release word is dropped
                while parts and parts[-1] == _PATCH:
                    parts.pop()
            while parts and parts[-1] == _ZERO:  # trailing zeros of a number run
                parts.pop()
            if piece == _END:  # "3.2-0" and "3.2p0" equal "3.2"
                while parts and parts[-1] == _PATCH:
                    parts.pop()
        parts.append(piece)
    return ".".join(parts).replace("./.", "/")


def _order(version: str) -> tuple[str, str]:
    # The raw text breaks ties such as 2.4 / 2.4.0 so the order is always the same.
    return lmod_version_key(version), version


def sort_versions(versions: Iterable[str]) -> tuple[str, ...]:
    """Distinct versions, lowest first in Lmod's order (gcc 9.3.0 < 10.1.0)."""
    return tuple(sorted(set(versions), key=_order))
