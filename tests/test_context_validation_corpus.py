"""The context corpus's validation collection (data/corpus/context-validation/, made on the real
Slurm lab by `make_context_corpus.py --set validation`) stays well formed, with the first
collection's checks: the full context schema with values of the right type, defined classes,
runs with sacct and refusals without, labels backed by the real outputs. Beyond them: it is one
part (`validation`), it shares no case or job script with the first collection, and a class it
shares with the first collection means the same cause and fix there."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.test_context_corpus import ALWAYS, CLASS_FIELDS, INSTANCE_FIELDS, RAN, SCHEMA

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "corpus" / "context-validation"
FIRST = REPO / "data" / "corpus" / "context"
SOURCES = REPO / "bench" / "context_corpus"
# what a shared class must keep from the first collection (its look-alikes may grow)
MEANING = ("family", "title", "cause", "fix", "actions", "fix_depends_on", "decided_by")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def classes() -> dict[str, dict]:
    rows = _lines(CORPUS / "classes.jsonl")
    names = Counter(c["class"] for c in rows)
    assert not [n for n, k in names.items() if k > 1], "a class defined twice"
    return {c["class"]: c for c in rows}


@pytest.fixture(scope="module")
def instances() -> list[dict]:
    return _lines(CORPUS / "instances.jsonl")


def test_classes_are_the_case_tables_and_complete(classes):
    assert (CORPUS / "classes.jsonl").read_bytes() == (SOURCES / "classes_validation.jsonl").read_bytes()
    for name, c in classes.items():
        assert set(c) == CLASS_FIELDS, name
        assert c["cause"].strip() and c["fix"].strip() and c["title"].strip(), name
        assert set(c["decided_by"]) <= set(SCHEMA), name
        for other in c["confusable_with"]:
            assert classes[other]["family"] == c["family"], (name, other)


def test_a_shared_class_means_what_it_meant(classes):
    first = {c["class"]: c for c in _lines(FIRST / "classes.jsonl")}
    shared = set(classes) & set(first)
    assert shared and set(classes) - set(first), "the set reuses some classes and adds others"
    for name in shared:
        assert {k: classes[name][k] for k in MEANING} == {k: first[name][k] for k in MEANING}, name
        assert set(first[name]["confusable_with"]) <= set(classes[name]["confusable_with"]), name


def test_instances_have_unique_ids_known_classes_and_their_texts(classes, instances):
    ids = Counter(i["id"] for i in instances)
    assert not [k for k, n in ids.items() if n > 1]
    for i in instances:
        assert set(i) == INSTANCE_FIELDS, i["id"]
        assert re.fullmatch(r"ctxv-\d{4}", i["id"]), i["id"]
        assert i["class"] in classes, i["id"]
        assert i["split"] == "validation", i["id"]
        assert i["text"].strip(), i["id"]
        assert i["case"] and i["submit_line"].startswith("sbatch "), i["id"]
    assert len({i["case"] for i in instances}) == len(instances), "one instance per case"


def test_new_cases_and_scripts_not_the_first_collections(instances):
    first = _lines(FIRST / "instances.jsonl")
    assert not {i["case"] for i in instances} & {i["case"] for i in first}
    assert not {i["context"]["script_sha256"] for i in instances} & {i["context"]["script_sha256"] for i in first}
    for i in instances:  # the script each instance names is the one its digest was taken of
        text = (SOURCES / "jobs_validation" / i["script"]).read_bytes()
        assert hashlib.sha256(text).hexdigest() == i["context"]["script_sha256"], i["id"]


def test_every_context_has_the_whole_schema_with_sane_values(instances):
    for i in instances:
        ctx = i["context"]
        assert set(ctx) == set(SCHEMA), (i["id"], set(ctx) ^ set(SCHEMA))
        for key, value in ctx.items():
            if value is not None:
                assert isinstance(value, SCHEMA[key]) and not isinstance(value, bool), (i["id"], key, value)
                if isinstance(value, (int, float)):
                    assert value >= 0, (i["id"], key, value)
        for key in ALWAYS:
            assert ctx[key] is not None, (i["id"], key)
        assert all(re.fullmatch(r"[\w.+-]+/[\w.+-]+", m) for m in ctx["modules"]), i["id"]
        assert all(re.fullmatch(r"[a-z0-9]+(:[\w.-]+)?:\d+", g) for g in ctx["gres"] or []), i["id"]
        assert re.fullmatch(r"[0-9a-f]{64}", ctx["script_sha256"]), i["id"]
        assert all(isinstance(v, str) and v for v in (ctx["packages"] or {}).values()), i["id"]


def test_rejections_have_no_job_and_runs_have_sacct(instances):
    for i in instances:
        ctx = i["context"]
        if i["stage"] == "submit":
            assert i["job_id"] is None and i["sacct"] is None and i["sbatch_exit"] != 0, i["id"]
            assert i["text"].startswith("sbatch: "), i["id"]
            assert ctx["state"] is None and ctx["elapsed_s"] is None, i["id"]
        else:
            assert i["stage"] == "run" and isinstance(i["job_id"], int), i["id"]
            assert str(i["job_id"]) in [r["JobID"] for r in i["sacct"]], i["id"]
            for key in (k for k in RAN if k != "mem_mb"):
                assert ctx[key] is not None, (i["id"], key)
            assert ctx["mem_mb"] is not None or ctx["mem_per_cpu_mb"] is not None, i["id"]


def test_failures_are_what_their_class_says(instances):
    """Class-defining facts read from the real outputs, so the labels are not only the case
    table's word."""
    for i in instances:
        ctx, cls, text = i["context"], i["class"], i["text"]
        if cls.startswith("slurm.oom_at_"):
            steps = {r["State"] for r in i["sacct"]}
            assert "OUT_OF_MEMORY" in steps and ctx["state"] in ("OUT_OF_MEMORY", "FAILED"), i["id"]
            assert "oom-kill" in text, i["id"]
            per_node = ctx["mem_mb"] if ctx["mem_mb"] is not None else ctx["mem_per_cpu_mb"] * ctx["cpus"]
            assert per_node == float(cls.removeprefix("slurm.oom_at_").removesuffix("M")), i["id"]
        if cls.startswith("slurm.timeout_"):
            assert ctx["state"] == "TIMEOUT" and "DUE TO TIME LIMIT" in text, i["id"]
            assert (ctx["qos"] == "short") == cls.endswith("qos_short_cap"), i["id"]
            limit = 120 if cls.endswith("partition_max_debug") else 60
            assert ctx["time_limit_s"] == limit and ctx["elapsed_s"] >= limit, i["id"]
            if cls.endswith("partition_max_debug"):
                assert ctx["partition"] == "debug", i["id"]
        if cls == "slurm.preempted":
            assert ctx["state"] == "PREEMPTED" and "DUE TO PREEMPTION" in text, i["id"]
        if cls == "slurm.cancelled":
            assert ctx["state"] == "CANCELLED" and "CANCELLED AT" in text and "DUE TO" not in text, i["id"]
        if cls.startswith("loader.hpcblas_"):
            assert ("libhpcblas.so.2" in text) == cls.endswith("so2_old_module_loaded"), i["id"]
            blas = [m for m in ctx["modules"] if m.startswith("hpcblas/")]
            expected = {"module_not_loaded": [], "wrong_module_version": ["hpcblas/2.0"],
                        "so2_old_module_loaded": ["hpcblas/1.0"]}[cls.removeprefix("loader.hpcblas_")]
            assert blas == expected, i["id"]
        if cls in ("lmod.module_version_unknown", "lmod.hpcblas_version_unknown"):
            assert "module(s) are unknown" in text, i["id"]
            assert ("hpcblas/" in text) == (cls == "lmod.hpcblas_version_unknown"), i["id"]
        if cls == "lmod.module_command_not_found":
            assert "module: command not found" in text, i["id"]
        if cls in ("slurm.account_not_on_partition", "slurm.account_only_on_debug", "slurm.account_unknown"):
            assert "Invalid account or account/partition combination" in text, i["id"]


def test_every_class_has_three_real_instances_and_two_users_submitted(classes, instances):
    per_class = Counter(i["class"] for i in instances)
    assert set(per_class) == set(classes), set(classes) - set(per_class)
    assert min(per_class.values()) >= 3, {k: n for k, n in per_class.items() if n < 3}
    users = Counter(i["context"]["workdir"].split("/work/", 1)[1].split("/", 1)[0] for i in instances)
    assert set(users) == {"alice", "bob"}, users
