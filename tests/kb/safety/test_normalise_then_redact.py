"""One normalisation, then one redaction (issue 32, build item 2): escape sequences, controls,
zero-width characters and %-escapes cannot hide a secret from the rules, and what is not a
secret comes through as it was.

The tricks and fakes are in tests/kb/safety/fakes.py (made at test time, never literals)."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from hpcmem.kb.safety.lint import sanitize_text
from hpcmem.kb.safety.normalise import normalise, scrub, scrub_text, scrub_value
from hpcmem.kb.safety.redact import redact_text
from tests.kb.safety.fakes import ALNUM, leaked, run, tricks

TRICKS = tricks()


@pytest.mark.parametrize(("name", "text", "secret"), TRICKS, ids=[t[0] for t in TRICKS])
def test_each_trick_hides_the_secret_from_redaction_alone_but_not_from_scrub(name, text, secret):
    if "%" not in text:  # (today's rules read %-escapes themselves)
        # What the lesson gate did before: redact, then strip the codes - the secret comes out whole.
        assert leaked(secret, sanitize_text(redact_text(text), sys.maxsize)), name
    result = scrub(text)
    assert not leaked(secret, result.text), (name, result.text)
    assert result.count >= 1 and "[REDACTED:" in result.text
    assert scrub_text(text) == result.text


@pytest.mark.parametrize(("name", "text", "secret"), TRICKS, ids=[t[0] for t in TRICKS])
def test_tricks_inside_lines_of_a_log_are_caught_and_the_lines_kept(name, text, secret):
    log = f"step 40 loss=0.12\nTraceback (most recent call last):\nRuntimeError: login failed: {text}\ndone\n"
    clean = scrub_text(log)
    assert not leaked(secret, clean), name
    assert clean.startswith("step 40 loss=0.12\nTraceback") and clean.endswith("\ndone\n")


def test_scrubbing_twice_changes_nothing_and_counts_zero():
    for _name, text, _secret in TRICKS:
        once = scrub_text(text)
        again = scrub(once)
        assert (again.text, again.count) == (once, 0)
        assert scrub_text(once) is once


ORDINARY = [
    "sbatch --export=URL=http://data.example/a%2Fb%20c run.sh",  # an escaped path: not a secret
    "progress  45%|#####     | 9/20 [00:03<00:04, 2.5it/s]",
    "wget 'https://mirror.example/pkg?name=numpy%3D%3D1.26&arch=x86_64'",
    "sort_by=name%20asc&page=2 title=Loss%3A%20train",
    "srun: error: cn042: task 3: Segmentation fault (core dumped)",
    "OMPI_MCA_btl=^openib  UCX_TLS=rc,sm,self",
    "module load cuda/12.4 gcc/13.2\texport OMP_NUM_THREADS=8",
    "naïve Unicode stays: µs, Å, 日本語",
]


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_text_comes_back_as_the_same_object(line):
    assert normalise(line) is line
    assert scrub_text(line) is line


def test_percent_escapes_are_decoded_only_where_they_hide_a_secret(monkeypatch):
    from hpcmem.kb.safety import normalise as module
    from hpcmem.kb.safety.redact import Redacted, redact

    value = run(ALNUM, 48, start=3, step=31 + 6)
    hidden = f"DATASET_API_KEY={value[:16]}%2B{value[16:32]}%3D{value[32:]}"
    url = f"curl 'https://api.example/v1?path=a%2Fb&token={value[:20]}%2F{value[20:]}'"
    # Today's rules read %-escaped values themselves: nothing needs decoding, nothing is.
    assert normalise(hidden) is hidden
    assert scrub_text(url) == "curl 'https://api.example/v1?path=a%2Fb&token=[REDACTED:secret_assignment]'"
    # With rules that cannot read them (as before), the value is decoded, and only that value:
    # the rest of the URL stays escaped as written.
    monkeypatch.setattr(module, "redact", lambda text: Redacted(text, 0, ()) if "%" in text else redact(text))
    assert normalise(hidden) == f"DATASET_API_KEY={value[:16]}+{value[16:32]}={value[32:]}"
    assert normalise(url) == f"curl 'https://api.example/v1?path=a%2Fb&token={value[:20]}/{value[20:]}'"
    # an escape that would end the value (%20, %22, %26 ...) is never decoded: no half of a
    # secret can be left outside its redaction
    spaced = f"api_key={value[:20]}%20{value[20:]}"
    assert normalise(spaced) is spaced
    for line in ORDINARY:
        assert normalise(line) is line


def test_normalisation_is_the_lesson_gates_sanitising_before_redaction():
    # The same sequences and characters as lint's sanitize_text (before NFC and the cap).
    samples = [
        "\x1b]0;owned-title\x07\x1b]8;;http://evil.example/x\x07click\x1b]8;;\x07 \x1b[31merror\x1b[0m\x00\x07\x7f",
        "a\rb\r\nc\u2028d\u2029e\x1b(B\x1bPdcs\x1b\\f\x9b2Jg\x9d8;;x\x9ch\x85i",
        "su\u200bdo \u202eevil\u202c \ufeffx\U000e0041\u00ad\u061c\u180e\u2060\u2066y",
        "x\x1b\u200b[31my\t\n",
    ]
    for sample in samples:
        assert unicodedata.normalize("NFC", normalise(sample)) == sanitize_text(sample, sys.maxsize), repr(sample)
        assert normalise(normalise(sample)) == normalise(sample)


def test_keep_cr_keeps_redraws_for_the_excerpt():
    assert normalise("loss 1.0\r\x1b[2Kloss 0.5\rRuntimeError: x\x1b[0m", keep_cr=True) == \
        "loss 1.0\rloss 0.5\rRuntimeError: x"
    assert normalise("a\rb") == "a\nb"


def test_json_values_are_scrubbed_string_by_string():
    _name, text, secret = TRICKS[0]
    value = {"fix": text, "actions": [{"type": "command", "run": text}, 3, None], "n": 1.5, "ok": True}
    clean, count = scrub_value(value)
    assert count == 2 and not leaked(secret, repr(clean))
    assert clean["n"] == 1.5 and clean["ok"] is True and clean["actions"][1:] == [3, None]
    untouched = {"fix": "module load cuda/12.4", "actions": []}
    assert scrub_value(untouched) == (untouched, 0) and scrub_value(untouched)[0] is untouched
