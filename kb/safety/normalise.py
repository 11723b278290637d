"""One normalisation, then one redaction: the text every path stores or hands out.

Redaction rules match text as a terminal shows it. Text that reaches hpcmem often is not:
``wandb_api_key=\\x1b[32m<key>\\x1b[0m`` (a coloured log line) or ``HF_TO\\u200dKEN=<token>``
(a zero-width joiner inside the key name) hide the secret from every rule, and stripping
the codes *after* redaction hands it over in clear. So :func:`scrub` first normalises:

1. escape sequences go whole (:data:`ESCAPES`: CSI colours and cursor moves, OSC titles and
   hyperlinks - their visible text stays -, DCS/SOS/PM/APC strings, 8-bit C1 forms, other
   two- and three-byte escapes);
2. ``\\r\\n``, a bare ``\\r``, U+2028 and U+2029 become ``\\n`` (a bare ``\\r`` would hide a line
   in a terminal; as a newline both stay visible);
3. other control characters but tab and newline (C0, DEL, C1), zero-width, bidi and other
   invisible characters and Unicode tag characters are removed (:data:`INVISIBLE`);
4. URL %-escapes inside an assignment's value (``API_KEY=ab%2Bcd%3D``, ``?token=...``) are
   decoded when, and only when, the redactor finds more secrets in the decoded assignment
   than in the escaped one: an ordinary escaped value (a path, a query) stays as it was
   written. (Today's rules read common escaped values themselves; this step catches an
   escape they do not read, whatever the rules.) Only characters that cannot end a value
   are decoded (letters, digits and ``+/=_-.~:!@*$``), so decoding never splits a value and
   half of a secret cannot escape its redaction;

then redacts with :func:`hpcmem.kb.safety.redact.redact`. Steps 1-3 are the ones
``kb.safety.lint.sanitize_text`` applies to lesson text (a test holds them equal), so what
the lesson gate sanitises afterwards no longer changes what redaction saw.

Both steps are idempotent and so is their composition: scrubbing scrubbed text returns
it unchanged (the same object) and counts zero, which is what makes ``hpcmem db scrub``'s
second run change nothing. Text with none of the characters any step looks for (most
text: one search of a character class) is returned as it is before redaction runs.

Fingerprints are computed from this text too, by one function
(``kb/signatures/fingerprint.signature_text``: normalised, carriage returns kept, then
redacted): record, recall, feedback and ingest all use it, so a failure carrying terminal codes
or a secret finds the lesson recorded from its clean text.
"""

from __future__ import annotations

import re
from typing import Any

from hpcmem.kb.safety.redact import Redacted, redact, redact_text

__all__ = ["ESCAPES", "INVISIBLE", "normalise", "scrub", "scrub_text", "scrub_value"]

# The same sequences and characters as kb/safety/lint.py's _ESCAPES and _INVISIBLE
# (tests/kb/safety/test_normalise_then_redact.py checks normalise against sanitize_text).
ESCAPES = (
    r"\x1b\[[0-?]*[ -/]*[@-~]"                    # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: titles, OSC 8 hyperlinks (text stays)
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"      # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"                            # other two/three-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"                      # 8-bit CSI
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x9c\x1b]*(?:\x07|\x9c|\x1b\\)?"  # 8-bit OSC/DCS/SOS/PM/APC
)
_INVISIBLE_CHARS = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\U000e0000-\U000e007f"
)
INVISIBLE = "[" + _INVISIBLE_CHARS + "]"

_ESCAPES = re.compile(ESCAPES)
# Without 8-bit (C1) controls every escape starts with ESC, and a pattern that starts with
# that literal is found as fast as str.find.
_ESC = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                  r"|[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?|[ -/]*[0-~])")
_C1 = re.compile("[\x80-\x9f]")
_INVISIBLE = re.compile(INVISIBLE)
_ASCII_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
# Anything a step acts on: a control, C1 or invisible character (escape sequences start
# with one), a line separator, or a percent sign. Clean text costs one search of this class.
_SUSPECT = re.compile("[" + _INVISIBLE_CHARS + "\u2028\u2029%]")

_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
# What may be decoded: characters that cannot end a value (see the module docstring).
_DECODABLE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=_-.~:!@*$")
# Where a value ends (as the redactor's assignment values do), and where an escaped value
# starts: after the separator, which is itself never escaped.
_VALUE_END = frozenset(" \t\n\"',;&}])?#<>(){[")
_VALUE_START = _VALUE_END | frozenset("=:")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_KEY_SPAN = 64  # as the redactor reads a key name backwards


def _decoded(value: str) -> str:
    def one(m: re.Match[str]) -> str:
        char = chr(int(m.group(1), 16))
        return char if char in _DECODABLE else m.group(0)

    return _PERCENT.sub(one, value)


def _assignment_prefix(text: str, start: int) -> int | None:
    """Where the key of the assignment whose value starts at ``start`` begins; None when
    the value is not an assignment's (``KEY=``, ``key: ``, ``"key": "``, ``key => ``)."""
    at = start
    if at > 0 and text[at - 1] in "\"'":
        at -= 1
    while at > 0 and text[at - 1] in " \t":
        at -= 1
    if at == 0 or text[at - 1] not in "=:>":
        return None
    at -= 1
    if text[at] == ">" and at > 0 and text[at - 1] == "=":
        at -= 1
    elif text[at] == ">":
        return None
    while at > 0 and text[at - 1] in " \t":
        at -= 1
    if at > 0 and text[at - 1] in "\"'":
        at -= 1
    end_key = at
    while at > 0 and end_key - at < _KEY_SPAN and text[at - 1] in _KEY_CHARS:
        at -= 1
    return at if at < end_key else None


def normalise(text: str, *, keep_cr: bool = False) -> str:
    """``text`` as a terminal shows it, %-escaped secrets decoded (steps 1-4 of the module
    docstring); unchanged text is returned as the same object.

    ``keep_cr`` keeps carriage returns (each ``\\r``-separated part is normalised on its
    own) for callers that resolve progress-bar redraws themselves (a lesson's excerpt)."""
    if not _SUSPECT.search(text):
        return text
    if keep_cr and "\r" in text:
        parts = [normalise(part) for part in text.split("\r")]
        joined = "\r".join(parts)
        return text if joined == text else joined
    out = text
    # As lint's _visible: escape sequences, then line breaks, then single characters.
    # Escapes start with ESC unless the text has 8-bit (C1) controls, which are invisible
    # characters too: text with none of those (nearly all) costs one search of the class.
    if "\x1b" in out:
        out = _ESC.sub("", out)
    if "\r" in out:
        out = out.replace("\r\n", "\n").replace("\r", "\n")
    if "\u2028" in out or "\u2029" in out:
        out = out.replace("\u2028", "\n").replace("\u2029", "\n")
    if out.isascii():
        if _ASCII_CONTROL.search(out):
            out = _ASCII_CONTROL.sub("", out)
    else:
        found = _INVISIBLE.search(out)
        if found is not None and _C1.search(out, found.start()):
            # 8-bit escapes: start again from the text with the slower, complete pattern
            out = _ESCAPES.sub("", text)
            if "\r" in out:
                out = out.replace("\r\n", "\n").replace("\r", "\n")
            out = out.replace("\u2028", "\n").replace("\u2029", "\n")
            out = _INVISIBLE.sub("", out)
        elif found is not None:
            out = _INVISIBLE.sub("", out)
    if "%" in out:
        out = _decode_escaped(out)
    return text if out == text else out


def _decode_escaped(text: str) -> str:
    pieces: list[str] = []
    done = 0  # text[:done] is in pieces
    scanned = 0  # no escape before this needs looking at
    for m in _PERCENT.finditer(text):
        if m.start() < scanned:
            continue  # inside a value already looked at
        start = m.start()
        while start > 0 and text[start - 1] not in _VALUE_START:
            start -= 1
        end = m.end()
        while end < len(text) and text[end] not in _VALUE_END:
            end += 1
        scanned = end
        if start < done:
            continue
        key_at = _assignment_prefix(text, start)
        if key_at is None:
            continue
        value = text[start:end]
        decoded = _decoded(value)
        if decoded == value:
            continue
        prefix = text[key_at:start]
        if redact(prefix + decoded).count > redact(prefix + value).count:
            pieces.append(text[done:start])
            pieces.append(decoded)
            done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def scrub(text: str) -> Redacted:
    """Normalise ``text``, then redact it: what every path stores or hands out."""
    return redact(normalise(text))


def scrub_text(text: str) -> str:
    """Same as ``scrub(text).text``; unchanged text comes back as the same object."""
    clean = normalise(text)
    result = redact_text(clean)
    return text if result is clean and clean == text else result


def scrub_value(value: Any) -> tuple[Any, int]:
    """Every string in a JSON-like value (dicts, lists, strings) scrubbed: the new value
    and the number of secrets redacted. Keys are kept; other values are unchanged. The
    value itself comes back when nothing changed."""
    if isinstance(value, str):
        result = scrub(value)
        return (value if result.text == value else result.text), result.count
    if isinstance(value, list):
        items, count = [], 0
        for item in value:
            new, n = scrub_value(item)
            items.append(new)
            count += n
        return (value if all(a is b for a, b in zip(items, value)) else items), count
    if isinstance(value, dict):
        out, count = {}, 0
        for key, item in value.items():
            out[key], n = scrub_value(item)
            count += n
        return (value if all(out[k] is v for k, v in value.items()) else out), count
    return value, 0
