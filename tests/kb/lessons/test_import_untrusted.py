"""Import takes a file's trust as claims, on both backends (issue 33, defect 3), and with
the real PostgreSQL lab roles: a member's import lands as candidates, only a lead keeps status."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from hpcmem.kb.errors import InputError, PermissionDenied
from hpcmem.kb.lessons.curation import list_lessons, show_lesson
from hpcmem.kb.lessons.portable import export_lessons, import_lessons
from hpcmem.kb.lessons.write import INITIAL_CONFIDENCE, LessonDraft, record_lesson
from hpcmem.kb.signatures.fingerprint import fingerprint
from hpcmem.kb.store.stack import StoreStack
from tests.kb.lessons.pg_lab import member_and_lead

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
VARIANT = ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.20 GiB for an array with shape "
           "(20000, 21475) and data type float64")
ID = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"


@pytest.fixture
def stack(store_factory) -> StoreStack:
    st = StoreStack(user=store_factory("user", "user"), labs=[store_factory("vision", "lab")])
    st.labs[0].leads = ("lena",)  # as [stores.labs.vision] leads = ["lena"] configures it
    for store in st.all():
        store.open()
    return st


def exported_line(stack: StoreStack, **changes) -> dict:
    """A real export line of a validated-looking lesson with a known variant, then ``changes``."""
    sig, alias = fingerprint(OOM), fingerprint(VARIANT)
    record_lesson(stack.user, LessonDraft(
        fingerprint=sig.fingerprint, template=sig.template, category=sig.category, cause="over --mem",
        fix="request --mem=64G", source="curated", author="lena", excerpt=sig.template,
        aliases=[{"fingerprint": alias.fingerprint, "template": alias.template, "category": alias.category}]),
        actor="lena")
    line = next(export_lessons(stack, scope="user"))
    return line | {"id": ID, "confirmations": 500, "evidence": [{"kind": "worked", "job_id": "9"}]} | changes


def write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_fingerprints_are_recomputed_and_claims_audited(stack, tmp_path: Path):
    line = exported_line(stack, fingerprint="0" * 16)
    line["aliases"][0]["fingerprint"] = "1" * 16
    path = write(tmp_path / "l.jsonl", line)
    assert import_lessons(stack, path, scope="lab:vision", actor="bob")["created"] == 1
    lesson = show_lesson(stack, ID)
    assert lesson["fingerprint"] == fingerprint(OOM).fingerprint
    assert [a["fingerprint"] for a in lesson["aliases"]] == [fingerprint(VARIANT).fingerprint]
    assert (lesson["status"], lesson["provenance"]["source"], lesson["provenance"]["author"]) == (
        "candidate", "human", "bob")
    assert (lesson["confidence"], lesson["confirmations"]) == (INITIAL_CONFIDENCE["human"], 0)
    assert [e["kind"] for e in lesson["evidence"]] == ["proposal"]  # the claimed "worked" is not evidence
    claimed = lesson["history"][0]["after"]["claimed"]
    assert (claimed["fingerprint"], claimed["confirmations"], claimed["evidence"][0]["kind"]) == ("0" * 16, 500, "worked")
    # idempotent; a newer copy replaces the candidate's text, never its standing
    assert import_lessons(stack, path, scope="lab:vision", actor="bob")["unchanged"] == 1
    write(path, line | {"fix": "request --mem=96G", "updated_at": dt.datetime.now(dt.timezone.utc).isoformat()})
    assert import_lessons(stack, path, scope="lab:vision", actor="carol")["updated"] == 1
    lesson = show_lesson(stack, ID)
    assert (lesson["fix"], lesson["status"], lesson["provenance"]["source"], lesson["confirmations"]) == (
        "request --mem=96G", "candidate", "human", 0)
    assert lesson["history"][-1]["action"] == "import_update" and lesson["history"][-1]["actor"] == "carol"


def test_a_refusal_while_writing_stores_nothing_of_the_file(stack, tmp_path: Path):
    fine = exported_line(stack)
    flagged = fine | {"id": "2b4e28ba-2fa1-41d2-883f-0016d3cca427", "fix": "chmod -R 777 /scratch/shared/vision"}
    path = write(tmp_path / "l.jsonl", fine, flagged)
    with pytest.raises(InputError, match=r"l\.jsonl:2: refused: .*world_writable"):
        import_lessons(stack, path, scope="lab:vision", actor="lena", keep_status=True)
    assert list_lessons(stack, scope="lab:vision") == []


def test_real_postgresql_roles_member_imports_candidates_only_a_lead_keeps_status(pg_schema, tmp_path: Path):
    with member_and_lead(pg_schema, tmp_path, "imp") as (bob, lena):
        path = write(tmp_path / "l.jsonl", exported_line(bob))
        with pytest.raises(PermissionDenied, match="only lab leads can import lessons with their status"):
            import_lessons(bob, path, scope="lab:vision", actor="bob", keep_status=True)
        assert import_lessons(bob, path, scope="lab:vision", actor="bob")["created"] == 1
        assert show_lesson(bob, ID, "lab:vision")["status"] == "candidate"
        path = write(path, json.loads(path.read_text()) | {"updated_at": dt.datetime.now(dt.timezone.utc).isoformat()})
        assert import_lessons(lena, path, scope="lab:vision", actor="lena", keep_status=True)["updated"] == 1
        kept = show_lesson(lena, ID, "lab:vision")
        assert (kept["status"], kept["provenance"]["source"], kept["confirmations"]) == ("validated", "curated", 500)


def test_keeping_an_imported_status_is_a_leads_move_in_any_lab_store(stack, tmp_path: Path):
    """Issue 34, item 4: keeping "validated" is an approval, so a lab's named leads only."""
    path = write(tmp_path / "l.jsonl", exported_line(stack))
    with pytest.raises(PermissionDenied, match="only lab leads can import lessons with their status in lab store"):
        import_lessons(stack, path, scope="lab:vision", actor="bob", keep_status=True)
    assert list_lessons(stack, scope="lab:vision") == []
    assert import_lessons(stack, path, scope="lab:vision", actor="lena", keep_status=True)["created"] == 1
