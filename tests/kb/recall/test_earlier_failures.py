"""What a job's output began with: two outputs that end on the same missing library, one after
``module(s) are unknown`` and one after ``module: command not found``, failed for different
reasons (issue 26). Texts are the real outputs of the context corpus's validation collection
(data/corpus/context-validation/, made on the project's Slurm harness), each with its context."""

from __future__ import annotations

import json
from pathlib import Path


from hpcmem.kb.jobs.context import clean_context
from hpcmem.kb.lessons.from_error import record
from hpcmem.kb.recall.recaller import Recaller, RecallQuery
from hpcmem.kb.signatures.fingerprint import excerpt_template, failure_chain, fingerprint

CORPUS = Path(__file__).resolve().parents[3] / "data" / "corpus" / "context-validation"
INSTANCES = {i["id"]: i for i in map(json.loads, (CORPUS / "instances.jsonl").read_text().splitlines())}
CLASSES = {c["class"]: c for c in map(json.loads, (CORPUS / "classes.jsonl").read_text().splitlines())}

UNKNOWN_THEN_LIBRARY = "ctxv-0056"  # Lmod: "hpcblas/2.1" unknown, then libhpcblas.so.1 not found
NO_MODULE_COMMAND_THEN_LIBRARY = "ctxv-0057"  # module: command not found, then the library
LIBRARY_ONLY = "ctxv-0060"  # the library, no module loaded
PYTHON_DLOPEN = "ctxv-0062"  # ctypes.CDLL of the library, in a traceback


def chain(instance: str):
    return failure_chain(excerpt_template(INSTANCES[instance]["text"]))[:2]


def test_the_four_outputs_end_on_one_failure():
    assert len({fingerprint(INSTANCES[i]["text"]).fingerprint for i in
                (UNKNOWN_THEN_LIBRARY, NO_MODULE_COMMAND_THEN_LIBRARY, LIBRARY_ONLY, PYTHON_DLOPEN)}) == 1


def test_what_an_output_began_with():
    assert chain(UNKNOWN_THEN_LIBRARY)[1] == {"unknown_module"}
    assert chain(NO_MODULE_COMMAND_THEN_LIBRARY)[1] == {"command_not_found", "lmod_not_available"}
    assert chain(LIBRARY_ONLY)[1] == frozenset()
    # the traceback around the failing call is how Python reports it, not an earlier failure
    assert chain(PYTHON_DLOPEN)[1] == frozenset()


def learn(stack_, instance: str) -> str:
    item = INSTANCES[instance]
    cls = CLASSES[item["class"]]
    return record(stack_, cause=cls["cause"], fix=cls["fix"], author="alice", source="human", error_text=item["text"],
                  job_context=clean_context(item["context"]))["lesson_id"]


def ask(stack, instance: str, *, with_context: bool) -> dict:
    stack_, config = stack
    item = INSTANCES[instance]
    r = Recaller(stack_, config, allow_model=False)
    try:
        return r.recall(RecallQuery(text=item["text"], context=clean_context(item["context"]) if with_context else {}))
    finally:
        r.close()


def test_a_job_that_began_otherwise_is_not_given_the_lesson(stack):
    not_loaded = learn(stack[0], LIBRARY_ONLY)
    no_command = learn(stack[0], NO_MODULE_COMMAND_THEN_LIBRARY)

    result = ask(stack, PYTHON_DLOPEN, with_context=True)
    first = result["matches"][0]
    assert first["lesson_id"] == not_loaded and first["band"] == "match"
    other = next(m for m in result["matches"] if m["lesson_id"] == no_command)
    assert other["band"] == "related"
    assert {"query": "nothing before it", "lesson": "command_not_found, lmod_not_available", "kind": "name",
            "matters": True} in other["differs"]

    unknown = ask(stack, UNKNOWN_THEN_LIBRARY, with_context=True)
    assert all(m["band"] != "match" for m in unknown["matches"])
    assert any(d["query"] == "unknown_module" and d["matters"] for m in unknown["matches"] for d in m["differs"])


def test_a_pasted_excerpt_is_not_judged_on_lines_it_may_have_left_out(stack):
    learn(stack[0], NO_MODULE_COMMAND_THEN_LIBRARY)
    pasted = ask(stack, PYTHON_DLOPEN, with_context=False)
    assert not any("nothing before it" in str(m["differs"]) for m in pasted["matches"])


FRESH = CORPUS.parent / "context-fresh"
FRESH_INSTANCES = {i["id"]: i for i in map(json.loads, (FRESH / "instances.jsonl").read_text().splitlines())}
FRESH_CLASSES = {c["class"]: c for c in map(json.loads, (FRESH / "classes.jsonl").read_text().splitlines())}


def test_an_output_that_began_with_the_lessons_failure_has_the_lessons_cause(stack):
    # the fresh collection: hpcfft/1.5 unknown and the script stopped (the lesson, ctxf-0037);
    # hpcfft/3.0 unknown, then the program ran without its library (ctxf-0038)
    lesson_item, query_item = FRESH_INSTANCES["ctxf-0037"], FRESH_INSTANCES["ctxf-0038"]
    cls = FRESH_CLASSES[lesson_item["class"]]
    fft = record(stack[0], cause=cls["cause"], fix=cls["fix"], author="alice", source="human",
                 error_text=lesson_item["text"], job_context=clean_context(lesson_item["context"]),
                 actions=["module load hpcfft/1.0"])["lesson_id"]
    blas = learn(stack[0], "ctxv-0054")  # hpcblas/3.0 unknown: another module's lesson
    assert INSTANCES["ctxv-0054"]["class"] == "lmod.hpcblas_version_unknown"
    stack_, config = stack
    r = Recaller(stack_, config, allow_model=False)
    try:
        result = r.recall(RecallQuery(text=query_item["text"], context=clean_context(query_item["context"])))
    finally:
        r.close()
    first = result["matches"][0]
    assert first["lesson_id"] == fft and first["band"] == "match"
    assert "the failure it began with" in first["context_agrees"]
    other = next(m for m in result["matches"] if m["lesson_id"] == blas)
    assert other["band"] != "match"
    assert any(d["query"] == "hpcfft/3.0" and d["lesson"] == "hpcblas/3.0" and d["matters"] for d in other["differs"])
