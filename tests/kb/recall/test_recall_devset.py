"""The recall dev set (data/samples/recall-dev) is well-formed, and recall gets its obvious cases right.

The full quality figures come from bench/bench_recall_quality.py; here only what must
always hold, without the model: an "ids" query (same failure, other ids/paths/nodes) is an
exact fingerprint hit on its own lesson, and some unknown failures that resemble a recorded
lesson are abstained on.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from hpcmem.kb.config import load_config
from hpcmem.kb.recall.recaller import Recaller, RecallQuery
from hpcmem.kb.lessons.from_error import record
from hpcmem.kb.safety.redact import redact_text
from hpcmem.kb.signatures.fingerprint import fingerprint, load_rules
from hpcmem.kb.store.stack import StoreStack

DEVSET = Path(__file__).resolve().parents[3] / "data" / "samples" / "recall-dev"
PAIR_FIELDS = {"id", "class", "split", "variant", "record_error", "query_error", "cause", "fix"}
UNKNOWN_FIELDS = {"id", "near_class", "split", "query_error"}


def read_jsonl(name: str) -> list[dict]:
    lines = (DEVSET / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


PAIRS = read_jsonl("pairs.jsonl")
UNKNOWN = read_jsonl("unknown.jsonl")
IDS_PAIRS = [p for p in PAIRS if p["variant"] == "ids"]
# Unknown failures that look like a recorded lesson (same wording, same family) but need
# another fix; the exact and lexical stages must not hand out the look-alike's lesson.
HARD_NEGATIVES = [
    "cuda_oom-torch",                       # GPU memory; only host-memory lessons exist
    "node_failure",                         # the time-limit line with another verdict
    "preempted",
    "python_exception-keyerror-local-rank",  # KeyError lesson is for SLURM_ARRAY_TASK_ID
    "nccl_error-remote-error",              # NCCL lessons are "unhandled system error" / "invalid usage"
    "jvm_out_of_memory-metaspace",          # the JVM lesson is "Java heap space"
    "cuda_arch_mismatch-nvcc-compute90",    # nvcc too old, not a missing kernel image
]


# ----------------------------------------------------------------------------- the files


def test_every_line_has_exactly_the_documented_fields():
    for p in PAIRS:
        assert set(p) == PAIR_FIELDS, p.get("id")
        assert all(isinstance(p[k], str) and p[k].strip() for k in PAIR_FIELDS), p["id"]
        assert p["variant"] in ("ids", "wording", "noise"), p["id"]
        assert p["record_error"] != p["query_error"], f"{p['id']}: the query must be another instance"
    for u in UNKNOWN:
        assert set(u) == UNKNOWN_FIELDS, u.get("id")
        assert all(isinstance(u[k], str) and u[k].strip() for k in UNKNOWN_FIELDS), u["id"]


def test_ids_are_unique_across_both_files():
    ids = [x["id"] for x in PAIRS + UNKNOWN]
    assert [i for i, n in Counter(ids).items() if n > 1] == []


def test_size_and_coverage():
    classes = Counter(p["class"] for p in PAIRS)
    assert len(classes) >= 30
    assert len(UNKNOWN) >= 40
    assert max(classes.values()) <= 4
    # several different Python modules, as separate lessons
    assert classes["python_import_error"] >= 3
    variants = Counter(p["variant"] for p in PAIRS)
    assert variants["wording"] >= 0.25 * len(PAIRS)


def test_classes_are_hpcmem_categories():
    known = {rule.category for rule in load_rules()}
    assert {p["class"] for p in PAIRS} <= known
    assert {u["near_class"] for u in UNKNOWN} <= known


@pytest.mark.parametrize("items", [PAIRS, UNKNOWN], ids=["pairs", "unknown"])
def test_splits_are_balanced_and_alternate(items):
    splits = [x["split"] for x in items]
    assert set(splits) == {"dev", "test"}
    assert splits == ["dev" if i % 2 == 0 else "test" for i in range(len(items))]


def test_every_class_with_several_lessons_is_in_both_splits():
    by_class: dict[str, set[str]] = {}
    for p in PAIRS:
        by_class.setdefault(p["class"], set()).add(p["split"])
    several = {c for c, n in Counter(p["class"] for p in PAIRS).items() if n > 1}
    assert {c for c in several if by_class[c] != {"dev", "test"}} == set()


@pytest.mark.parametrize("pair", PAIRS, ids=[p["id"] for p in PAIRS])
def test_both_texts_are_categorised_as_their_class(pair):
    assert fingerprint(redact_text(pair["record_error"])).category == pair["class"]
    assert fingerprint(redact_text(pair["query_error"])).category == pair["class"]


def test_recorded_errors_are_distinct_failures():
    """Two lessons on one fingerprint could not be told apart by any recall."""
    prints = Counter(fingerprint(redact_text(p["record_error"])).fingerprint for p in PAIRS)
    assert [fp for fp, n in prints.items() if n > 1] == []


# ----------------------------------------------------------------------------- recall, no model


@pytest.fixture(scope="module")
def devset_recaller(tmp_path_factory: pytest.TempPathFactory):
    """A user store holding one lesson per pair; recall without the model (exact + lexical)."""
    home = tmp_path_factory.mktemp("recall-devset")
    config = load_config(environ={"HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1"})
    stack = StoreStack.from_config(config)
    lesson_of = {}
    for p in PAIRS:
        lesson = record(stack, cause=p["cause"], fix=p["fix"], author="devset", source="human",
                        error_text=p["record_error"])
        lesson_of[p["id"]] = lesson["lesson_id"]
    recaller = Recaller(stack, config, allow_model=False)
    yield recaller, lesson_of
    recaller.close()
    stack.dispose()


def stored_matches(result: dict) -> list[dict]:
    return [m for m in result["matches"] if m["lesson_id"] is not None]


@pytest.mark.parametrize("pair", IDS_PAIRS, ids=[p["id"] for p in IDS_PAIRS])
def test_an_ids_variant_is_an_exact_hit_on_its_own_lesson(devset_recaller, pair):
    recaller, lesson_of = devset_recaller
    result = recaller.recall(RecallQuery(text=pair["query_error"]))
    stored = stored_matches(result)
    assert not result["abstained"]
    assert stored[0]["lesson_id"] == lesson_of[pair["id"]]
    assert stored[0]["match_kind"] == "exact"
    assert stored[0]["fix"] == pair["fix"]
    assert result["stages"] == ["exact"]  # nothing else was needed


@pytest.mark.parametrize("unknown_id", HARD_NEGATIVES)
def test_a_look_alike_unknown_failure_is_abstained_on(devset_recaller, unknown_id):
    recaller, _ = devset_recaller
    item = next(u for u in UNKNOWN if u["id"] == unknown_id)
    result = recaller.recall(RecallQuery(text=item["query_error"]))
    assert result["abstained"]  # no stored lesson in the match band (related ones may be shown)
    assert [m for m in result["matches"] if m["band"] == "match"] == []
    assert result["stages"] == ["exact", "wide", "lexical-only"]  # every stage ran, without the model
