"""The real-world error corpus (data/corpus/): loading, the fixed split, and the recall plan.

Shared by ``fit_recall_model.py`` (calibration part only) and ``bench_recall_quality.py``
(reports the held-out part). See data/corpus/README.md for what the corpus is.

The split is by *family* (a group of confusable classes), so a hard negative and the class
it is confused with are always in the same part. Within a part, each class with two or more
instances is either *known* (its first instance, by id, is recorded as a lesson with the
class's cause and fix; the other instances are recurrences to recall) or *no-lesson* (every
instance is a query that must be abstained on); classes with one instance are no-lesson.
Both choices hash the family or class name with a fixed seed: stable when data is added.

A third part, **validation**, is a later collection kept in its own folder
(``data/corpus/validation/``): pages and classes no rule, feature or fit of recall was written
or tuned on. It chooses between fits made on calibration (``bench_recall_quality.py --part
validation --compare ...``), so that the held-out part only ever reports the one chosen.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "corpus"
SEED = "hpcmem-corpus-2026-12-01"
PARTS = ("calibration", "heldout")  # the two sides of data/corpus/raw/, by family hash
VALIDATION = "validation"  # its own folder, every family in it


@dataclass(frozen=True)
class Instance:
    id: str
    cls: str
    text: str
    source: str


@dataclass(frozen=True)
class ErrorClass:
    name: str
    family: str
    cause: str
    fix: str
    actions: tuple[str, ...]


@dataclass
class Plan:
    """What one part of the corpus asks of a recall method."""

    part: str
    lessons: list[tuple[Instance, ErrorClass]] = field(default_factory=list)  # recorded
    recurrences: list[Instance] = field(default_factory=list)  # a lesson of their class exists
    no_lesson: list[Instance] = field(default_factory=list)  # no lesson of their class exists
    family: dict[str, str] = field(default_factory=dict)  # class name -> its family

    @property
    def queries(self) -> list[Instance]:
        return self.recurrences + self.no_lesson


def _hash(*parts: str) -> int:
    return int(hashlib.sha256("\n".join((SEED,) + parts).encode()).hexdigest(), 16)


def part_of_family(family: str) -> str:
    return PARTS[_hash("part", family) % 2]


def has_lesson(cls: str, rotation: int = 0) -> bool:
    # three in four multi-instance classes get a lesson (another draw for another rotation)
    return _hash("known", cls, *((str(rotation),) if rotation else ())) % 4 != 0


def _merges(corpus: Path) -> dict[str, str]:
    path = corpus / "merges.json"
    return json.loads(path.read_text())["merge"] if path.exists() else {}


def _united_families(raw: dict[str, dict], merge: dict[str, str]) -> dict[str, str]:
    """family -> representative, uniting the families of merged classes (union-find)."""
    parent: dict[str, str] = {}

    def find(f: str) -> str:
        while parent.setdefault(f, f) != f:
            f = parent[f]
        return f

    for a, b in merge.items():
        if a in raw and b in raw:
            fa, fb = sorted((find(raw[a]["family"]), find(raw[b]["family"])))
            parent[fb] = fa
    return {c["family"]: find(c["family"]) for c in raw.values()}


def load(corpus: Path = CORPUS, folder: str = "raw") -> tuple[dict[str, ErrorClass], list[Instance]]:
    """Classes (after merges.json) and instances (relabelled to the merged class) of one
    folder: ``raw`` (calibration and held-out) or ``validation``."""
    merge = _merges(corpus if folder == "raw" else corpus / folder)
    raw: dict[str, dict] = {}
    instances: list[Instance] = []
    for path in sorted((corpus / folder).glob("*.classes.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                c = json.loads(line)
                raw[c["class"]] = c
    family = _united_families(raw, merge)
    classes = {name: ErrorClass(name, family[c["family"]], c["cause"], c["fix"], tuple(c.get("actions") or ()))
               for name, c in raw.items() if name not in merge}
    for path in sorted((corpus / folder).glob("*.instances.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                i = json.loads(line)
                name = merge.get(i["class"], i["class"])
                if name in classes:  # a domain still being collected has no classes file yet
                    instances.append(Instance(i["id"], name, i["text"], i["source"]))
    return classes, sorted(instances, key=lambda i: i.id)


def half_of_family(family: str) -> str:
    return "ab"[_hash("half", family) % 2]


def plan(part: str, corpus: Path = CORPUS, rotation: int = 0) -> Plan:
    """``rotation`` > 0: another plan of the same texts (fit experiments only): the
    ``rotation``-th instance of each class is its lesson, and the draw of which classes have
    one differs. Rotation 0 is the plan every benchmark reports. ``validation:a`` and
    ``validation:b`` are the validation part's two halves, by family (a seeded hash): fitted
    on one, judged on the other, they tell whether fitting on more collected data helps."""
    whole, _, half = part.partition(":")
    if whole not in PARTS + (VALIDATION,) or half not in ("", "a", "b") or (half and whole != VALIDATION):
        raise ValueError(f"unknown part {part!r}")
    classes, instances = load(corpus, VALIDATION if whole == VALIDATION else "raw")
    by_class: dict[str, list[Instance]] = {}
    for inst in instances:
        by_class.setdefault(inst.cls, []).append(inst)
    out = Plan(part)
    for name in sorted(by_class):
        cls, members = classes[name], by_class[name]
        if whole != VALIDATION and part_of_family(cls.family) != part:
            continue
        if half and half_of_family(cls.family) != half:
            continue
        out.family[name] = cls.family
        if len(members) >= 2 and has_lesson(name, rotation):
            k = rotation % len(members)
            out.lessons.append((members[k], cls))
            out.recurrences += members[:k] + members[k + 1:]
        else:
            out.no_lesson += members
    return out


def combined(plans: list[Plan]) -> Plan:
    """One plan of several parts (a fit on more than calibration): their lessons share a store.
    A class both parts define (one cause, collected twice) keeps the first part's family."""
    out = Plan("+".join(p.part for p in plans))
    for p in plans:
        out.lessons += p.lessons
        out.recurrences += p.recurrences
        out.no_lesson += p.no_lesson
        out.family = p.family | out.family
    return out
