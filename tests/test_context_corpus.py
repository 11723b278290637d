"""The context corpus (data/corpus/context/, made on the real Slurm lab by
bench/context_corpus/make_context_corpus.py) stays well formed: every failure text carries
the full context schema with values of the right type, belongs to a defined class, sits on the
side of the split its family hashes to, and every class has several real instances."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "corpus" / "context"
CLASS_FIELDS = {"class", "family", "title", "cause", "fix", "actions", "fix_depends_on", "decided_by",
                "confusable_with"}
INSTANCE_FIELDS = {"id", "class", "split", "stage", "text", "context", "case", "script", "job_id", "submit_line",
                   "sbatch_exit", "sacct"}
# key -> allowed types (None = not known for this instance)
SCHEMA: dict[str, tuple[type, ...]] = {
    "partition": (str,), "account": (str,), "qos": (str,), "mem_mb": (float,), "mem_per_cpu_mb": (float,),
    "cpus": (int,), "gpus": (int,), "gres": (list,), "nodes": (int,), "time_limit_s": (int,), "constraint": (str,),
    "max_rss_mb": (float,), "elapsed_s": (int,), "exit_code": (int,), "signal": (int,), "state": (str,),
    "modules": (list,), "conda_env": (str,), "venv": (str,), "python": (str,), "packages": (dict,),
    "command": (str,), "script_sha256": (str,), "workdir": (str,), "launcher": (str,), "job_name": (str,),
}
# known for every instance: the request, the program, the stack (modules may be an empty list)
ALWAYS = ("partition", "account", "qos", "cpus", "nodes", "modules", "command", "script_sha256", "workdir",
          "job_name")
# known for every job that ran (sacct)
RAN = ("mem_mb", "time_limit_s", "elapsed_s", "exit_code", "signal", "state", "max_rss_mb")


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


def _split_rule():
    spec = importlib.util.spec_from_file_location("context_cases", REPO / "bench" / "context_corpus" / "cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_classes_are_complete_and_their_neighbours_exist(classes):
    for name, c in classes.items():
        assert set(c) == CLASS_FIELDS, name
        assert c["cause"].strip() and c["fix"].strip() and c["title"].strip(), name
        assert set(c["decided_by"]) <= set(SCHEMA), name
        for other in c["confusable_with"]:
            assert classes[other]["family"] == c["family"], (name, other)


def test_instances_have_unique_ids_known_classes_and_their_texts(classes, instances):
    ids = Counter(i["id"] for i in instances)
    assert not [k for k, n in ids.items() if n > 1]
    for i in instances:
        assert set(i) == INSTANCE_FIELDS, i["id"]
        assert re.fullmatch(r"ctx-\d{4}", i["id"]), i["id"]
        assert i["class"] in classes, i["id"]
        assert i["text"].strip(), i["id"]
        assert i["case"] and i["submit_line"].startswith("sbatch "), i["id"]
    assert len({i["case"] for i in instances}) == len(instances), "one instance per case"


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
        assert all(re.fullmatch(r"[a-z]+(:[\w.-]+)?:\d+", g) for g in ctx["gres"] or []), i["id"]
        assert re.fullmatch(r"[0-9a-f]{64}", ctx["script_sha256"]), i["id"]
        assert ctx["mem_mb"] is not None or ctx["mem_per_cpu_mb"] is not None or i["stage"] == "submit", i["id"]


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
            for key in RAN:
                assert ctx[key] is not None, (i["id"], key)


def test_failures_are_what_their_class_says(instances):
    """A few class-defining facts, read from the real outputs: the corpus labels are not
    only asserted by the case table."""
    for i in instances:
        ctx, cls, text = i["context"], i["class"], i["text"]
        if cls.startswith("slurm.oom_at_"):
            # an srun step's OOM leaves the allocation FAILED; the step row says OUT_OF_MEMORY
            steps = {r["State"] for r in i["sacct"]}
            assert "OUT_OF_MEMORY" in steps and ctx["state"] in ("OUT_OF_MEMORY", "FAILED"), i["id"]
            assert "oom-kill" in text, i["id"]
            assert ctx["mem_mb"] == float(cls.removeprefix("slurm.oom_at_").removesuffix("M")), i["id"]
        if cls.startswith("slurm.timeout_"):
            assert ctx["state"] == "TIMEOUT" and "DUE TO TIME LIMIT" in text and ctx["time_limit_s"] == 60, i["id"]
            assert (ctx["qos"] == "short") == cls.endswith("qos_short_cap"), i["id"]
        if cls == "slurm.preempted":
            assert ctx["state"] == "PREEMPTED" and "DUE TO PREEMPTION" in text, i["id"]
        if cls == "slurm.cancelled":
            assert ctx["state"] == "CANCELLED" and "CANCELLED AT" in text and "DUE TO" not in text, i["id"]
        if cls.startswith("loader.hpcfft_"):
            assert "libhpcfft.so.1" in text, i["id"]
            assert ("hpcfft/2.0" in ctx["modules"]) == cls.endswith("wrong_module_version"), i["id"]


def test_split_is_the_seeded_family_hash(classes, instances):
    rule = _split_rule()
    for i in instances:
        assert i["split"] == rule.part_of_family(classes[i["class"]]["family"]), i["id"]
    assert {i["split"] for i in instances} == {"calibration", "heldout"}


def test_every_class_has_three_real_instances(classes, instances):
    per_class = Counter(i["class"] for i in instances)
    assert set(per_class) == set(classes), set(classes) - set(per_class)
    assert min(per_class.values()) >= 3, {k: n for k, n in per_class.items() if n < 3}


# Fields kb/jobs/context.py gained after both collections were made (how --cpus-per-task,
# --ntasks and --mincpus split the CPUs, --exclusive: issue 27's checks). The corpus is kept
# as the run produced it; its `cpus` holds their product, as the store's did then.
ADDED_AFTER_THE_CORPUS = {"cpus_per_task", "ntasks", "ntasks_per_node", "mincpus", "exclusive"}


def test_context_keys_are_the_stores_keys():
    """The corpus speaks the schema kb/jobs/context.py defines (when that module has it)."""
    context = pytest.importorskip("hpcmem.kb.jobs.context")
    fields = getattr(context, "FIELDS", None)
    if fields is None:
        pytest.skip("kb/jobs/context.py defines no FIELDS yet")
    assert set(SCHEMA) == set(fields) - ADDED_AFTER_THE_CORPUS, set(SCHEMA) ^ (set(fields) - ADDED_AFTER_THE_CORPUS)
    for key in SCHEMA:
        kind = fields[key]
        assert kind in SCHEMA[key] or (kind is float and SCHEMA[key] == (float,)), key
