"""The lexical scan's lesson list (StoreReader.lesson_texts, which replaced
lesson_signatures_in_category): truncated deterministically, newest first."""

from __future__ import annotations

import datetime as dt
import random

from sqlalchemy import update

from hpcmem.kb.lessons.write import LessonDraft, record_lesson
from hpcmem.kb.store.models import Lesson
from hpcmem.kb.store.reader import StoreReader
from hpcmem.kb.signatures.fingerprint import fingerprint


def test_truncated_scan_is_the_newest_lessons_in_a_fixed_order(store_factory):
    store = store_factory().open()
    sig = fingerprint("ModuleNotFoundError: No module named 'torch'")
    ids = [record_lesson(store, LessonDraft(fingerprint=sig.fingerprint, template=sig.template, category=sig.category,
                                            cause="c", fix=f"pip install torch #{n}", source="human"),
                         actor="a")["lesson_id"] for n in range(12)]
    base = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    # Updated times out of insertion order, with ties; two hidden lessons are the newest.
    times = {lesson_id: base + dt.timedelta(hours=n // 2) for n, lesson_id in enumerate(random.Random(1).sample(ids, 12))}
    with store.transaction() as s:
        for lesson_id, when in times.items():
            s.execute(update(Lesson).where(Lesson.id == lesson_id).values(updated_at=when))
        newest = sorted(ids, key=lambda i: times[i])[-2:]
        s.execute(update(Lesson).where(Lesson.id == newest[0]).values(status="rejected"))
        s.execute(update(Lesson).where(Lesson.id == newest[1]).values(status="expired"))
    visible = sorted((i for i in ids if i not in newest), key=lambda i: (-times[i].timestamp(), i))
    reader = StoreReader.open(store)
    try:
        # Most recently changed first (a fresh or just confirmed lesson is the likeliest
        # fix), ties by id: the same five lessons every time, whatever the row order.
        assert [row[0] for row in reader.lesson_texts(5)] == visible[:5]
        assert [row[0] for row in reader.lesson_texts(5)] == visible[:5]
        assert [row[0] for row in reader.lesson_texts(100, include_expired=True)][0] == newest[1]
    finally:
        reader.close()
