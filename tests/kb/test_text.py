"""The text boundary (kb/text.py): every input becomes text any encoder accepts."""

from __future__ import annotations

from hpcmem.kb.text import as_text


def test_valid_text_comes_back_as_the_same_object():
    text = "slurmstepd: error: Detected 1 oom-kill event(s) — ünïcode stays"
    assert as_text(text) is text


def test_bytes_smuggled_in_by_surrogateescape_are_decoded_and_repaired():
    raw = b"libcudart.so.11.0: \xff\xfe cannot open \xe2\x9c\x93"
    escaped = raw.decode("utf-8", "surrogateescape")
    assert as_text(escaped) == "libcudart.so.11.0: \ufffd\ufffd cannot open \u2713"
    assert as_text(raw) == as_text(escaped)


def test_a_lone_surrogate_becomes_a_replacement_character():
    assert as_text("bad \ud800 header \udfff") == "bad \ufffd header \ufffd"


def test_the_result_always_encodes():
    for value in ("\udc80\ud800x", "\ud83d", b"\x80\x80", "plain"):
        as_text(value).encode("utf-8")  # never raises
