"""The plain-SQL reader and writer name columns by hand (to stay clear of the ORM at
start-up); these tests tie those lists to kb/store/models.py."""

from __future__ import annotations


import pytest
from sqlalchemy import JSON

from hpcmem.kb.store import reader
from hpcmem.kb.store.models import Lesson, Occurrence, Signature
from hpcmem.kb.store.column_types import UTCDateTime

# Signature columns recall never reads row by row: vectors are read by kb/recall/embed.py.
SIGNATURE_VECTOR_COLUMNS = {"embedding", "embedding_model", "embedding_hash"}


def columns(model) -> set[str]:
    return {c.name for c in model.__table__.columns}


def test_lesson_columns_are_every_column_of_the_model():
    assert set(reader.LESSON_COLUMNS) == columns(Lesson)
    assert len(reader.LESSON_COLUMNS) == len(set(reader.LESSON_COLUMNS))


def test_signature_columns_are_the_model_without_its_vectors():
    assert set(reader.SIGNATURE_COLUMNS) == columns(Signature) - SIGNATURE_VECTOR_COLUMNS


def test_occurrence_columns_exist_in_the_model():
    assert set(reader.OCCURRENCE_COLUMNS) <= columns(Occurrence)


@pytest.mark.parametrize("model, listed", [(Lesson, reader.LESSON_COLUMNS), (Signature, reader.SIGNATURE_COLUMNS)])
def test_json_and_time_conversions_cover_the_models_types(model, listed):
    table = model.__table__
    json_cols = {c.name for c in table.columns if c.name in listed and isinstance(c.type, JSON)}
    time_cols = {c.name for c in table.columns if c.name in listed and isinstance(c.type, UTCDateTime)}
    assert time_cols and (json_cols or model is Signature)  # the checks below are not vacuous
    assert json_cols <= set(reader._JSON_COLUMNS)
    assert time_cols <= set(reader._TIME_COLUMNS)
