"""Message shapes: a bulk ingest fingerprints each shape of a sacct-implied failure message
once (kb/jobs/write.py RowPreparer), which is right only if every message of one shape has
the same signature. These tests check that claim on every failed job of the sample dumps,
with other job ids and end times put in, and that a redacted message is never answered
from the shape cache."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from pathlib import Path

import pytest

from hpcmem.ingest.failure_message import failure_message
from hpcmem.ingest.sacct import SacctReader
from hpcmem.ingest.sacct_ingest import failure_row
from hpcmem.kb.jobs.write import RowPreparer
from hpcmem.kb.signatures.fingerprint import signature_of_block

SACCT = Path(__file__).resolve().parents[2] / "data" / "samples" / "sacct"
UTC = dt.timezone.utc
GHP = "gh" + "p_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5b"  # fake, assembled (secret scanners)


def _failed_jobs() -> list:
    jobs = []
    for path in sorted(SACCT.glob("*.psv")):
        if path.name in ("malformed.psv", "legacy-20.11-noheader.psv"):  # need fields given
            continue
        with open(path, encoding="utf-8") as fh:
            jobs += [job for job in SacctReader(fh, tz=UTC) if job.is_failure]
    return jobs


FAILED = _failed_jobs()


def _other_digits(text: str, rng: random.Random) -> str:
    return "".join(str(rng.randrange(10)) if c.isdigit() else c for c in text)


def test_the_samples_cover_every_kind_of_message():
    kinds = {failure_message(job, from_sacct=True).split(" ")[0] for job in FAILED}
    assert len(FAILED) >= 30
    assert {"slurmstepd:", "Job", "srun:"} <= kinds


@pytest.mark.parametrize("seed", range(5))
def test_messages_of_one_shape_have_one_signature(seed):
    rng = random.Random(seed)
    for job in FAILED:
        message = failure_message(job, from_sacct=True)
        shape = failure_message(job, from_sacct=True, shape=True)
        # another job of the same shape: other id digits (same layout), another end time
        end = None if job.end is None else dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(
            seconds=rng.randrange(400 * 86400))
        other = dataclasses.replace(job, job_id=_other_digits(job.job_id, rng), end=end)
        assert failure_message(other, from_sacct=True, shape=True) == shape
        assert signature_of_block(failure_message(other, from_sacct=True)) == signature_of_block(message), message


def test_the_shape_keeps_what_tells_failures_apart():
    """Node, state, step and exit status stay in the shape: only id and time are fixed."""
    shapes = {failure_message(job, from_sacct=True, shape=True) for job in FAILED}
    fingerprints = {signature_of_block(failure_message(job, from_sacct=True)).fingerprint for job in FAILED}
    assert len(shapes) >= len(fingerprints) > 1
    for job in FAILED:
        shape = failure_message(job, from_sacct=True, shape=True)
        if job.nodelist and " ON " in shape:
            assert f" ON {job.nodelist} " in shape


def test_the_preparer_fingerprints_each_message_right_whatever_it_saw_before():
    prepare = RowPreparer("sqlite")
    for job in FAILED + FAILED[::-1]:
        row = failure_row(job, "testcl")
        expected = signature_of_block(row["message"])
        _, prepared, signature, _ = prepare.failure(row)
        assert signature == expected
        assert "message_shape" not in prepared  # never stored, never sent to the writer


def test_a_redacted_message_is_fingerprinted_as_redacted_not_by_its_shape():
    checked = 0
    for job in FAILED:
        prepare = RowPreparer("sqlite")
        clean = failure_row(job, "testcl")
        secret = dict(clean, message=clean["message"] + f" GH_TOKEN={GHP}")
        _, _, clean_signature, _ = prepare.failure(dict(clean))
        _, stored, secret_signature, _ = prepare.failure(secret)  # same shape as the clean one
        assert GHP not in stored["message"]
        assert secret_signature == signature_of_block(stored["message"])
        checked += secret_signature != clean_signature  # a shape hit would have given the clean one
    assert checked >= 10
