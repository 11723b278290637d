"""`hpcmem fingerprint`: the signature of each message read from stdin, as JSONL."""

from __future__ import annotations

import sys

import typer

from hpcmem.cli._output import emit_jsonl


def fingerprint(
    block: bool = typer.Option(False, "--block", help="Treat the whole input as one message (a traceback, a log excerpt)."),
) -> None:
    """Print {"fingerprint", "template", "category"} per message (one message per line by default)."""
    from hpcmem.cli._state import STATE
    from hpcmem.kb.signatures.fingerprint import fingerprint as fingerprint_of
    from hpcmem.kb.signatures.fingerprint import signature_of_block, signature_text

    STATE.config  # reads signatures.rules_file: the site's rules count too
    data = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    messages = [data] if block else [line for line in data.splitlines() if line.strip()]
    for message in messages:
        message = signature_text(message)  # as record and recall do; no secret reaches the template we print
        sig = signature_of_block(message) if block else fingerprint_of(message)
        emit_jsonl({"fingerprint": sig.fingerprint, "template": sig.template, "category": sig.category})
    sys.stdout.flush()

