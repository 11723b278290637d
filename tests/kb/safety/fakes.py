"""Fake secrets made at test time, and the tricks that hide them from a redactor (issue 32).

No token-shaped literal is written in the source: each fake is a deterministic run over an
alphabet (so a failing assertion names the same value every time), and the tests search
for every 16-character window of it, so a secret that comes out in pieces is found too.
"""

from __future__ import annotations

import string

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
WINDOW = 16


def run(alphabet: str, length: int, *, start: int = 0, step: int = 7) -> str:
    """``length`` characters of ``alphabet``, every ``step``-th (coprime with its size).
    Runs with different steps share no two consecutive characters' distance, so no piece
    of one is a piece of another."""
    return "".join(alphabet[(start + i * step) % len(alphabet)] for i in range(length))


# Steps coprime with 62 (the alphanumeric alphabet): one per trick, so every secret is its own.
STEPS = (3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25)


def windows(secret: str) -> list[str]:
    return [secret[i:i + WINDOW] for i in range(len(secret) - WINDOW + 1)]


def leaked(secret: str, *blobs: str | bytes) -> list[str]:
    """The pieces of ``secret`` found in any of ``blobs`` (text or raw bytes)."""
    found = []
    for piece in windows(secret):
        raw = piece.encode()
        if any((raw if isinstance(blob, bytes) else piece) in blob for blob in blobs):
            found.append(piece)
    return found


def tricks(offset: int = 0) -> list[tuple[str, str, str]]:
    """(name, text, secret): a fake secret on an assignment, hidden by codes or invisible
    characters from a redactor that reads the raw text (the last, a %-escaped value, is
    read by today's rules themselves). Each trick has a secret of its own; ``offset``
    shifts the runs, for a second set."""
    def value(i: int, length: int = 40) -> str:
        return run(ALNUM, length, start=offset * 11 + i, step=STEPS[i])

    v = [value(i) for i in range(6)]
    hex_value = run(HEX, 40, start=offset, step=5)
    long_value = value(6, length=48)
    return [
        ("colour codes around the value", f"wandb_api_key=\x1b[32m{hex_value}\x1b[0m", hex_value),
        ("colour code inside the value", f"export WANDB_API_KEY={v[0][:20]}\x1b[1m{v[0][20:]}\x1b[0m", v[0]),
        ("ESC sequence splitting the value", f"GITHUB_TOKEN={v[1][:20]}\x1b(B{v[1][20:]}", v[1]),
        ("colour code splitting the key name", f"GITLAB_TO\x1b[1mKEN={v[2]}\x1b[0m", v[2]),
        ("zero-width joiner inside the key name", f"GITHUB_TO\u200dKEN={v[3]}", v[3]),
        ("zero-width space inside the value", f"api_key={v[4][:20]}\u200b{v[4][20:]}", v[4]),
        ("OSC title before the value", f"token=\x1b]0;build\x07{v[5]}", v[5]),
        ("%-escaped value", f"SERVICE_API_KEY={long_value[:16]}%2B{long_value[16:32]}%2F{long_value[32:]}",
         long_value),
    ]
