"""Revalidation against the site's limits (issue 27): a lesson whose fix the site would now
refuse - its job resubmitted with the fix's sbatch options - expires, with the limit named,
and comes back when the site does. The site is the sample cluster `lab`
(data/samples/env/cluster-2026-12); its later states change one file each."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcmem.ingest.environment import build_snapshot
from hpcmem.kb.environment.history import save_snapshot
from hpcmem.kb.environment.revalidate import revalidate
from hpcmem.kb.lessons.write import Condition, LessonDraft, record_lesson
from hpcmem.kb.signatures.fingerprint import fingerprint
from hpcmem.kb.store.models import Lesson
from tests.conftest import SAMPLES

DEC = SAMPLES / "env" / "cluster-2026-12"
OOM = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.batch. Some of your processes may have been killed"


def take(store, **changed: str):
    """A snapshot of the sample site, with some of its files' texts replaced."""
    texts = {name: (DEC / f).read_text() for name, f in (
        ("modules", "module-t-avail.txt"), ("partitions", "scontrol-show-partition-oneliner.txt"),
        ("nodes", "scontrol-show-node-oneliner.txt"), ("qos", "sacctmgr-show-qos.txt"),
        ("assoc", "sacctmgr-show-assoc.txt"), ("users", "sacctmgr-show-user.txt"))}
    texts.update(changed)
    env, _ = build_snapshot(texts["modules"], texts["partitions"], live=False, previous=None, allow_empty=True,
                            nodes_text=texts["nodes"], qos_text=texts["qos"], assoc_text=texts["assoc"],
                            users_text=texts["users"])
    return save_snapshot(store, env, cluster="lab", source="test")[0]


def lesson(store, actions: list[dict], job_context: dict, author: str = "alice", fix: str = "the fix") -> str:
    sig = fingerprint(OOM)
    draft = LessonDraft(fingerprint=sig.fingerprint, template=sig.template, category=sig.category, cause="c",
                        fix=fix, source="human", author=author, conditions=[Condition("cluster", "lab")],
                        actions=actions, job_context=job_context)
    return record_lesson(store, draft, actor=author)["lesson_id"]


def status(store, lesson_id: str) -> tuple[str, str | None]:
    with store.session() as s:
        row = s.get(Lesson, lesson_id)
        return row.status, row.status_reason


def sbatch(option: str, to: str) -> dict:
    return {"type": "sbatch", "option": option, "to": to}


@pytest.fixture
def store(store_factory):
    store = store_factory().open()
    take(store)
    return store


def test_a_fix_the_sites_nodes_no_longer_take_expires_and_returns_with_them(store):
    big = lesson(store, [sbatch("--mem", "900G")], {"partition": "bigmem", "qos": "long", "mem_mb": 512000.0})
    small = lesson(store, [sbatch("--mem", "64G")], {"partition": "cpu", "mem_mb": 32768.0})
    assert revalidate(store, take(store)).changes == []  # the site as the lessons were written
    # the bigmem nodes are swapped for 512G ones: 900G fits no node of the partition any more
    shrunk = (DEC / "scontrol-show-node-oneliner.txt").read_text().replace("RealMemory=2060000", "RealMemory=524288")
    report = revalidate(store, take(store, nodes=shrunk))
    assert [c.lesson_id for c in report.changes] == [big]
    state, reason = status(store, big)
    assert state == "expired" and reason.startswith("the site would refuse the fix now: --mem=900G per node: "
                                                    "the largest node of partition bigmem has 508288M")
    assert status(store, small)[0] == "candidate"
    revalidate(store, take(store))  # the big nodes are back
    assert status(store, big)[0] == "candidate"


def test_a_longer_time_than_the_qos_now_allows_expires(store):
    longer = lesson(store, [sbatch("--time", "3-00:00:00")], {"partition": "bigmem", "qos": "long"})
    qos = (DEC / "sacctmgr-show-qos.txt").read_text()
    long_line = next(line for line in qos.splitlines() if line.startswith("long|"))
    cut = qos.replace(long_line, long_line.replace("7-00:00:00", "2-00:00:00"))
    assert cut != qos
    revalidate(store, take(store, qos=cut))
    state, reason = status(store, longer)
    assert state == "expired" and "QOS long's MaxWall 2-00:00:00" in reason


def test_per_user_limits_are_judged_for_an_author_the_site_knows_only(store):
    # dmitri may not use QOS long; a lesson telling him to is refused for him, not for alice
    his = lesson(store, [sbatch("--qos", "long")], {"partition": "cpu"}, author="dmitri")
    hers = lesson(store, [sbatch("--qos", "long")], {"partition": "cpu"}, author="alice")
    stranger = lesson(store, [sbatch("--qos", "long")], {"partition": "cpu"}, author="nobody-known")
    revalidate(store, take(store))
    assert status(store, his)[0] == "expired" and "QOS long" in status(store, his)[1]
    assert status(store, hers)[0] == "candidate"
    assert status(store, stranger)[0] == "candidate"  # whose associations are unknown: not judged


def test_fixes_without_sbatch_options_and_snapshots_without_site_limits_are_left_alone(store):
    module_fix = lesson(store, [{"type": "module", "op": "load", "name": "gcc/13.2.0"}], {"partition": "cpu"})
    big = lesson(store, [sbatch("--mem", "900G")], {"partition": "cpu"})  # never fitted cpu's nodes
    partitions_only, _ = build_snapshot((DEC / "module-t-avail.txt").read_text(),
                                        (DEC / "scontrol-show-partition-oneliner.txt").read_text(),
                                        live=False, previous=None)
    revalidate(store, save_snapshot(store, partitions_only, cluster="lab", source="partitions only")[0])
    assert status(store, big)[0] == "candidate"  # no nodes known: nothing to say
    revalidate(store, take(store))
    assert status(store, module_fix)[0] == "candidate"
    assert status(store, big)[0] == "expired"
