"""The real-world error corpus (data/corpus/) stays well formed as it grows: every text has
its source, belongs to a defined class, and the instances of one class come from different
reports (independent instances are what the recall benchmark's figures rest on)."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
INSTANCE_FIELDS = {"id", "class", "text", "source", "source_title", "redactions"}
CLASS_FIELDS = {"class", "family", "title", "cause", "fix", "actions"}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _domains(folder: str) -> list[str]:
    return sorted(p.name.split(".")[0] for p in (CORPUS / folder).glob("*.instances.jsonl"))


def _classes(folder: str) -> dict[str, dict]:
    out = {}
    for path in sorted((CORPUS / folder).glob("*.classes.jsonl")):
        for c in _lines(path):
            assert c["class"] not in out, f"class {c['class']} defined twice"
            out[c["class"]] = c | {"_domain": path.name.split(".")[0]}
    return out


def _instances(folder: str) -> list[dict]:
    return [i | {"_domain": d} for d in _domains(folder) for i in _lines(CORPUS / folder / f"{d}.instances.jsonl")]


# raw/: the calibration and held-out parts; validation/: a later collection, its own part
@pytest.fixture(scope="module", params=["raw", "validation"])
def folder(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def classes(folder) -> dict[str, dict]:
    return _classes(folder)


@pytest.fixture(scope="module")
def instances(folder) -> list[dict]:
    return _instances(folder)


def test_every_instance_is_complete_with_its_source(instances):
    for i in instances:
        assert set(i) - {"_domain"} == INSTANCE_FIELDS, i["id"]
        assert re.fullmatch(rf"{i['_domain']}-\d{{4}}", i["id"]), i["id"]
        assert i["text"].strip(), i["id"]
        assert re.match(r"https?://\S+$", i["source"]), i["id"]
        assert isinstance(i["redactions"], list), i["id"]
    ids = Counter(i["id"] for i in instances)
    assert not [k for k, n in ids.items() if n > 1]


def test_every_instance_belongs_to_a_defined_class_of_its_domain(classes, instances):
    for i in instances:
        assert i["class"] in classes, i["id"]
        assert i["class"].startswith(i["_domain"] + "."), i["id"]
    for name, c in classes.items():
        assert CLASS_FIELDS <= set(c), name
        assert name.startswith(c["_domain"] + "."), name
        assert c["cause"].strip() and c["fix"].strip() and c["family"].strip(), name


def test_instances_of_one_class_come_from_different_reports(instances):
    seen = Counter((i["class"], i["source"].split("#")[0].rstrip("/")) for i in instances)
    assert not [k for k, n in seen.items() if n > 1]


@pytest.mark.parametrize("folder", ["raw", "validation"])
def test_merges_join_defined_classes(folder):
    classes = _classes(folder)
    path = CORPUS / "merges.json" if folder == "raw" else CORPUS / folder / "merges.json"
    merges = json.loads(path.read_text())["merge"]
    for a, b in merges.items():
        assert a in classes and b in classes and a != b, (a, b)


def test_the_corpus_meets_the_sizes_issue_10_asks_for_and_the_split_keeps_families_apart():
    sys.path.insert(0, str(CORPUS.parents[1] / "bench"))
    from recall_corpus import load, plan

    classes, instances = load()
    per_class = Counter(i.cls for i in instances)
    assert len(instances) >= 400
    assert len(per_class) >= 100
    assert sum(1 for n in per_class.values() if n >= 3) >= 60
    parts = {name: plan(name) for name in ("calibration", "heldout")}
    families = {name: {classes[i.cls].family for i in p.queries} | {c.family for _, c in p.lessons}
                for name, p in parts.items()}
    assert not families["calibration"] & families["heldout"]
    assert sum(len(p.queries) + len(p.lessons) for p in parts.values()) == len(instances)


def test_the_validation_part_is_independent_of_the_other_two():
    """Its pages are not used by calibration or held-out, and its plan is all of its texts."""
    sys.path.insert(0, str(CORPUS.parents[1] / "bench"))
    from recall_corpus import load, plan

    def page(url: str) -> str:
        return url.split("#")[0].rstrip("/")

    raw_pages = {page(i["source"]) for i in _instances("raw")}
    validation = _instances("validation")
    assert len(validation) >= 150
    assert not {page(i["source"]) for i in validation} & raw_pages
    _, instances = load(folder="validation")
    part = plan("validation")
    assert len(part.lessons) >= 20 and len(part.recurrences) >= 50 and len(part.no_lesson) >= 20
    assert len(part.queries) + len(part.lessons) == len(instances) == len(validation)
