"""Fingerprints now come from ``signature_text`` (normalised, then redacted), where the previous
release fingerprinted the redacted raw text (issue 32). A store that release wrote holds other
fingerprints for error texts with escape, control or zero-width characters: the rules digest
says so (FINGERPRINT_VERSION and the redaction's files are part of it), recall warns, and
``refingerprint`` - which fingerprints stored texts the same way - brings exact matches back.
SQLite and PostgreSQL (store_factory)."""

from __future__ import annotations

import sys

import pytest
from sqlalchemy import select

from hpcmem.kb.lessons import from_error
from hpcmem.kb.lessons.from_error import record
from hpcmem.kb.safety.lint import sanitize_text
from hpcmem.kb.safety.redact import redact_text
from hpcmem.kb.signatures import fingerprint as signatures
from hpcmem.kb.signatures import rules_digest
from hpcmem.kb.store.models import LessonAlias, StoreMeta
from hpcmem.kb.store.refingerprint import refingerprint
from hpcmem.kb.store.stack import StoreStack
from tests.kb.safety.fakes import tricks
from tests.kb.store.test_refingerprint import exact_ids, recall

TRICKS = tricks(offset=7)
WORDS = ("wandb", "github", "gitlab", "registry", "mirror", "vault", "artifact", "service")
RAW = [f"RuntimeError: {WORDS[i]} login failed: {text}" for i, (_n, text, _s) in enumerate(TRICKS)]
SHOWN = [sanitize_text(line, sys.maxsize) for line in RAW]
PLAIN = "OSError: [Errno 28] No space left on device: '/scratch/run7/ckpt.pt'"  # nothing to normalise


@pytest.fixture
def stack(store_factory) -> StoreStack:
    st = StoreStack(user=store_factory("user", "user"))
    st.user.open()
    yield st
    st.dispose()
    rules_digest._warned = False


def previous_release_digest(monkeypatch: pytest.MonkeyPatch) -> str:
    """The digest the previous release computed: FINGERPRINT_VERSION 2, no redaction files."""
    with monkeypatch.context() as m:
        m.setattr(signatures, "FINGERPRINT_VERSION", 2)
        m.setattr(rules_digest, "redaction_files", lambda: [])
        return rules_digest.rules_digest(None)


def test_the_digest_covers_the_version_and_the_redaction(monkeypatch, tmp_path):
    assert rules_digest.current_digest() != previous_release_digest(monkeypatch)
    files = rules_digest.redaction_files()
    assert [p.rsplit("/", 1)[-1] for p in files[:2]] == ["normalise.py", "redact.py"]
    changed = tmp_path / "redact.py"
    changed.write_bytes(open(files[1], "rb").read() + b"\n# a rule added\n")
    monkeypatch.setattr(rules_digest, "redaction_files", lambda: [files[0], str(changed), *files[2:]])
    assert rules_digest.rules_digest(None) != rules_digest.current_digest()


def test_a_store_the_previous_release_wrote_is_refingerprinted_to_what_recall_computes(stack, monkeypatch):
    with monkeypatch.context() as m:  # record as the previous release did: the redacted raw text
        m.setattr(from_error, "signature_text", redact_text)
        old = [record(stack, cause=f"c{i}", fix=f"fix {w}", author="ann", source="human", error_text=raw)
               for i, (w, raw) in enumerate(zip(WORDS, RAW))]
        plain = record(stack, cause="disk full", fix="clean /scratch", author="ann", source="human", error_text=PLAIN)
    with stack.user.transaction() as session:
        session.get(StoreMeta, rules_digest.DIGEST_KEY).value = previous_release_digest(monkeypatch)
    differ = [i for i, raw in enumerate(RAW)
              if signatures.fingerprint(signatures.signature_text(raw)).fingerprint != old[i]["fingerprint"]]
    assert differ == [i for i, (name, _t, _s) in enumerate(TRICKS) if not name.startswith("%")]

    result, warning = recall(stack, RAW[differ[0]])
    assert exact_ids(result) == [] and "hpcmem db refingerprint" in warning  # missed, and said so
    assert exact_ids(recall(stack, PLAIN)[0]) == [plain["lesson_id"]]  # unaffected

    report = refingerprint(stack.user)
    assert (report.lessons, report.lessons_changed) == (len(RAW) + 1, len(differ))
    assert report.digest == rules_digest.current_digest()
    rules_digest._warned = False
    for i in range(len(RAW)):
        for text in (RAW[i], SHOWN[i]):
            result, warning = recall(stack, text)
            assert exact_ids(result) == [old[i]["lesson_id"]] and warning == "", (i, text)
    assert exact_ids(recall(stack, PLAIN)[0]) == [plain["lesson_id"]]
    with stack.user.session() as session:  # the old fingerprints stay as aliases (an older raw text may compute them)
        kept = {a.fingerprint for a in session.scalars(select(LessonAlias).where(LessonAlias.source == "refingerprint"))}
    assert kept == {old[i]["fingerprint"] for i in differ}
    assert not refingerprint(stack.user).changed
