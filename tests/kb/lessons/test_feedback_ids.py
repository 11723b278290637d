"""`feedback` finds a lesson by the short id every other command takes (issue 34, item 3),
in every store of the stack, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from hpcmem.kb.errors import InputError, NotFound
from hpcmem.kb.lessons.evidence import feedback
from hpcmem.kb.lessons.write import LessonDraft, record_lesson
from hpcmem.kb.signatures.fingerprint import fingerprint
from hpcmem.kb.store.models import Lesson
from hpcmem.kb.store.stack import StoreStack

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")


@pytest.fixture
def stack(store_factory) -> StoreStack:
    st = StoreStack(user=store_factory("user", "user"), labs=[store_factory("vision", "lab")])
    for store in st.all():
        store.open()
    return st


def lesson(store, fix: str, scope: str = "user") -> str:
    sig = fingerprint(OOM)
    return record_lesson(store, LessonDraft(fingerprint=sig.fingerprint, template=sig.template, category=sig.category,
                                            cause="the job needed more memory", fix=fix, source="agent",
                                            author="alice", scope=scope, scope_name="vision" if scope == "lab" else None),
                         actor="alice")["lesson_id"]


def test_feedback_takes_an_8_character_prefix_in_any_store(stack):
    mine = lesson(stack.user, "--mem=600M")
    shared = lesson(stack.labs[0], "--mem=1G", scope="lab")
    fed = feedback(stack, mine[:8], worked=True, actor="alice", job_id="9")
    assert (fed["lesson_id"], fed["store"], fed["confirmations"]) == (mine, "user", 1)
    fed = feedback(stack, shared[:8].upper(), worked=False, actor="alice")
    assert (fed["lesson_id"], fed["store"], fed["contradictions"]) == (shared, "vision", 1)
    with pytest.raises(InputError, match="at least 8 characters"):
        feedback(stack, mine[:7], worked=True, actor="alice")
    with pytest.raises(NotFound, match="no lesson with id"):
        feedback(stack, "0123abcd", worked=True, actor="alice")


def test_a_prefix_of_two_lessons_is_ambiguous_and_scope_decides(stack):
    mine, shared = lesson(stack.user, "--mem=600M"), lesson(stack.labs[0], "--mem=1G", scope="lab")
    twin = "abcdef12" + mine[8:]
    for store, old in ((stack.user, mine), (stack.labs[0], shared)):  # two stores, one first block
        with store.transaction() as session:
            session.execute(update(Lesson).where(Lesson.id == old).values(id=twin if store is stack.user
                                                                           else "abcdef12" + shared[8:]))
    with pytest.raises(InputError, match=r"'abcdef12' is ambiguous: 2 lessons match \(.* in user, .* in lab:vision\)"):
        feedback(stack, "abcdef12", worked=True, actor="alice")
    fed = feedback(stack, "abcdef12", worked=True, actor="alice", scope="lab:vision")
    assert fed["lesson_id"] == "abcdef12" + shared[8:] and fed["confirmations"] == 1
