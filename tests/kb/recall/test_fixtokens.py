"""Decisive tokens conflict by kind (issue 26, item 3): errno words, library families,
symbol-version families and a message's own phrase.

Texts are real: the calibration part of data/corpus/ (by id, so a test fails if the corpus
loses them) and data/samples/. Where a test needs the other side of a pair the corpus does not
have, it changes one token of a real line and says so.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from hpcmem.kb.lessons.from_error import record
from hpcmem.kb.recall.fixtokens import compare, fix_text, fix_tokens
from hpcmem.kb.recall.recaller import Recaller, RecallQuery
from hpcmem.kb.signatures.fingerprint import fingerprint

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "data" / "corpus" / "raw"
SAMPLES = REPO / "data" / "samples"


def corpus_text(instance_id: str) -> str:
    domain = instance_id.split("-")[0]
    for line in (CORPUS / f"{domain}.instances.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["id"] == instance_id:
            return item["text"]
    raise KeyError(instance_id)


def corpus_fix(class_name: str) -> str:
    domain = class_name.split(".")[0]
    for line in (CORPUS / f"{domain}.classes.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["class"] == class_name:
            return fix_text(item["fix"], [])
    raise KeyError(class_name)


def template(text: str) -> str:
    return fingerprint(text).template


def tokens(text: str):
    return fix_tokens(template(text))


def conflicts(query_text: str, lesson_text: str, fix: str) -> list[dict]:
    """The differences that matter when ``query_text`` meets a lesson recorded from ``lesson_text``."""
    c = compare(tokens(query_text), tokens(lesson_text), fix)
    return [d.as_dict() for d in c.differences if d.matters]


# ----------------------------------------------------------------------------- errno words


def test_every_errno_the_c_library_names_is_an_errno_token():
    # the vocabulary is the platform's own strerror, not a list of examples
    for code in errno.errorcode:
        words = os.strerror(code)
        if words.lower().startswith("unknown error"):
            continue
        found = [t for t in fix_tokens(f"open(/scratch/x): {words}") if t.kind == "errno"]
        assert [t.name for t in found] == [" ".join(words.lower().split())], words


def test_another_errno_is_another_failure_whatever_the_fix_says():
    # fork failing for the process limit (EAGAIN) is not fork failing for memory (ENOMEM)
    nproc, enomem = corpus_text("sysfs-0049"), corpus_text("sysfs-0057")
    assert conflicts(nproc, enomem, corpus_fix("sysfs.fork_enomem_large_parent")) == [
        {"query": "Resource temporarily unavailable", "lesson": "Cannot allocate memory", "kind": "name",
         "matters": True}]
    # HDF5 cannot lock: the file system has no locks (ENOLCK), or another process holds it (EAGAIN)
    no_locks, held = corpus_text("apps-0002"), corpus_text("apps-0006")
    assert conflicts(no_locks, held, corpus_fix("apps.hdf5_lock_held_by_other_process"))[0]["lesson"] == \
        "Resource temporarily unavailable"
    # a quota (data/samples) is not a full device (a UCX shared-memory segment, calibration)
    quota = (SAMPLES / "logs" / "slurm-4410689.err").read_text()
    assert [d["query"] for d in conflicts(quota, corpus_text("mpi-0017"), "raise kernel.shmmax")] == \
        ["Disk quota exceeded"]


def test_the_issue_examples_of_errno_words():
    # smoke test: one real-shaped pair from the issue
    denied = "slurmstepd: error: execve(): /home/u/run.sh: Permission denied"
    missing = "slurmstepd: error: execve(): /home/u/run.sh: No such file or directory"
    exec_format = "slurmstepd: error: execve(): /home/u/run.sh: Exec format error"
    assert conflicts(denied, missing, "fix the path in the job script")
    assert conflicts(exec_format, denied, "chmod +x the script")


def test_the_same_errno_in_other_words_around_it_does_not_conflict():
    lesson = corpus_text("sysfs-0049")  # -bash: fork: Resource temporarily unavailable
    for other in ("sysfs-0050", "sysfs-0114", "sysfs-0113"):  # fork failed: resource..., fork: retry: ...
        assert conflicts(corpus_text(other), lesson, corpus_fix("sysfs.fork_nproc_limit")) == [], other


def test_an_errno_in_another_language_is_no_evidence_either_way():
    # "No existe el fichero o el directorio" is ENOENT in Spanish: not read as an errno, and
    # the phrase after "cuda_runtime.h:" is not compared against an errno's words
    spanish, english = corpus_text("loader-0111"), corpus_text("loader-0107")
    assert "No existe el fichero" in template(spanish)
    assert conflicts(spanish, english, corpus_fix("loader.cuda_runtime_h_not_found")) == []


def test_messages_that_share_an_errno_do_not_conflict_over_another_one_they_name():
    lesson = "open(/scratch/a): Permission denied; retry: No such file or directory"
    query = "open(/scratch/b): No such file or directory"
    assert conflicts(query, lesson, "create the directory first") == []


def test_a_shared_errno_is_not_counted_as_agreement():
    # "No such file or directory" ends every missing-header message: it does not make mpi.h
    # agree with Python.h
    mpi_h, python_h = corpus_text("loader-0050"), corpus_text("loader-0054")
    c = compare(tokens(mpi_h), tokens(python_h), corpus_fix("loader.python_h_not_found"))
    assert c.agree == 0
    assert [(d.query, d.lesson) for d in c.differences] == [("mpi.h", "Python.h")]


# ----------------------------------------------------------------------------- library families


def test_another_library_family_is_another_library_whatever_the_fix_says():
    mpich, openssl = corpus_text("loader-0023"), corpus_text("loader-0088")  # libmpi.so.12, libssl.so.1.1
    for fix in (corpus_fix("loader.libssl_so_1_1_missing"), "load the module that provides it", ""):
        assert conflicts(mpich, openssl, fix) == [
            {"query": "libmpi.so.12", "lesson": "libssl.so.1.1", "kind": "name", "matters": True}], fix


def test_the_cuda_runtime_is_not_the_cuda_driver():
    # smoke test from the issue: data/samples' libcudart.so.11.0 against the driver's libcuda.so.1
    runtime = (SAMPLES / "logs" / "slurm-4410577.err").read_text()
    driver = runtime.replace("libcudart.so.11.0", "libcuda.so.1")
    nvml = runtime.replace("libcudart.so.11.0", "libnvidia-ml.so.1")
    assert conflicts(runtime, driver, "run on a node with the NVIDIA driver installed")
    assert conflicts(driver, nvml, "run on a node with the NVIDIA driver installed")


def test_one_library_family_at_another_version_is_a_version_difference():
    # libmpi.so.12 (MPICH ABI) vs libmpi.so.40 (Open MPI 4): the same family, compared by version;
    # the Open MPI lesson's fix names openmpi/4.x, not 40
    mpich, openmpi = corpus_text("loader-0023"), corpus_text("loader-0019")
    c = compare(tokens(mpich), tokens(openmpi), corpus_fix("loader.openmpi4_libs_so_40_missing"))
    assert [(d.kind, d.matters) for d in c.differences] == [("version", False)]


def test_libraries_of_one_family_share_the_stem_before_an_underscore():
    cudnn = "ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory"
    ops = "ImportError: libcudnn_ops_infer.so.8: cannot open shared object file: No such file or directory"
    assert conflicts(ops, cudnn, "install cuDNN 8 for this CUDA") == []
    assert [t.family for t in fix_tokens(ops) if t.kind == "soname"] == ["cudnn"]


def test_a_shared_library_keeps_other_names_to_the_fix():
    # loader-0173 names the plug-in that needs libstdc++ as well; the GLIBCXX_3.4.31 lesson
    # does not name it: the two messages share libstdc++, so nothing that matters differs
    plugin, lesson = corpus_text("loader-0173"), corpus_text("loader-0100")
    assert {t.family for t in tokens(plugin) if t.kind == "soname"} >= {"pkg1", "stdc++"}
    assert conflicts(plugin, lesson, corpus_fix("loader.glibcxx_3_4_31_32_not_found")) == []


# ----------------------------------------------------------------------------- symbol-version families


def test_glibc_is_not_glibcxx():
    glibc, glibcxx = corpus_text("loader-0045"), corpus_text("loader-0006")  # GLIBC_2.28, GLIBCXX_3.4.29
    found = conflicts(glibc, glibcxx, corpus_fix("loader.glibcxx_3_4_29_not_found"))
    assert {"query": "GLIBC_2.28", "lesson": "GLIBCXX_3.4.29", "kind": "name", "matters": True} in found


def test_two_symbol_families_of_one_library_are_compared_as_before():
    # CXXABI_ and GLIBCXX_ are both libstdc++'s (a real line of loader-0098): the difference
    # matters only when the fix names it
    cxxabi = "/lib64/libstdc++.so.6: version CXXABI_1.3.8 not found"
    assert cxxabi in corpus_text("loader-0098")
    glibcxx = corpus_text("loader-0006")
    assert conflicts(cxxabi, glibcxx, "load a newer gcc module") == []
    c = compare(fix_tokens(template(cxxabi)), tokens(glibcxx), "load a newer gcc module")
    assert c.name_conflicts == 1


# ----------------------------------------------------------------------------- a message's phrase


@pytest.mark.parametrize("query, lesson", [
    ("slurm-0085", "slurm-0039"),  # Unable to create step for job: More processors ... / Memory required by task ...
    ("slurm-0028", "slurm-0090"),  # Batch job submission failed: Requested node configuration ... / Invalid feature ...
    ("apps-0027", "apps-0026"),    # while mounting: destination ... doesn't exist in container / mount source ...
])
def test_the_same_head_with_another_phrase_is_another_failure(query, lesson):
    found = conflicts(corpus_text(query), corpus_text(lesson), "")  # whatever the fix says
    assert len(found) == 1 and found[0]["matters"]


def test_the_issue_example_of_a_phrase():
    # smoke test: NVML's own words after its prefix (the second is NVML's text for a driver
    # that is not loaded)
    mismatch = corpus_text("cuda-0013")
    unknown = mismatch.replace("Driver/library version mismatch", "Driver Not Loaded")
    assert conflicts(unknown, mismatch, "reboot the node or reload the nvidia kernel module")


@pytest.mark.parametrize("query, lesson", [
    ("slurm-0076", "slurm-0028"),  # another head (Unable to allocate resources), the same phrase
    ("apps-0081", "apps-0001"),    # unable to flock file / unable to lock file: one word apart
    ("cuda-0025", "cuda-0097"),    # CUDA error: invalid device ordinal / cuda runtime error (...) : invalid ...
    ("loader-0130", "loader-0019"),  # the same message
])
def test_look_alike_phrases_do_not_conflict(query, lesson):
    assert conflicts(corpus_text(query), corpus_text(lesson), "") == []


def test_names_inside_a_phrase_are_left_to_their_own_kind():
    # Atomtype IP vs Atomtype HB: a name, not another phrase (apps-0015's line, one name changed)
    ip = corpus_text("apps-0015")
    hb = ip.replace("Atomtype IP not found", "Atomtype HB not found")
    assert "Atomtype HB" in hb and conflicts(hb, ip, "include the force field") == []
    # another missing Python module under a generic fix: not a conflict (data/samples)
    pandas = (SAMPLES / "logs" / "slurm-4410702.err").read_text()
    torch = pandas.replace("'pandas'", "'torch'")
    assert conflicts(torch, pandas, "pip install the missing package into the job's environment") == []


def test_a_jvm_memory_area_is_one_difference_not_two():
    heap, gc = corpus_text("apps-0034"), corpus_text("apps-0030")
    assert conflicts(gc, heap, "") == [{"query": "OutOfMemoryError: GC overhead limit exceeded",
                                        "lesson": "OutOfMemoryError: Java heap space", "kind": "name",
                                        "matters": True}]


# ----------------------------------------------------------------------------- through recall


def test_a_lesson_for_another_errno_is_never_applied_and_says_why(stack):
    stack_, config = stack
    held = record(stack_, cause="another process holds the HDF5 file's lock",
                  fix="close the other handle or stop the process holding the file", author="a", source="human",
                  error_text=corpus_text("apps-0006"))
    r = Recaller(stack_, config, allow_model=False)
    try:
        result = r.recall(RecallQuery(text=corpus_text("apps-0002")))  # ... 'No locks available'
    finally:
        r.close()
    assert result["abstained"]
    assert all(m["band"] != "match" for m in result["matches"])
    shown = [m for m in result["matches"] if m["lesson_id"] == held["lesson_id"]]
    for m in shown:
        assert {"query": "No locks available", "lesson": "Resource temporarily unavailable", "kind": "name",
                "matters": True} in m["differs"]


def test_a_fix_loading_another_module_conflicts_with_the_module_asked_about():
    # issue 34: `module load gcc/13.1.0`, recorded for unknown module "nonexistent", asked about cuda/13.0
    from hpcmem.kb.recall.fixtokens import compare, fix_text, fix_tokens

    lesson = fix_tokens('The following module(s) are unknown: "nonexistent"')
    query = fix_tokens('The following module(s) are unknown: "cuda/13.0"')
    action = [{"type": "module", "op": "load", "name": "gcc/13.1.0"}]
    other = compare(query, lesson, fix_text("load gcc", action))
    assert [(d.query, d.lesson, d.matters) for d in other.differences] == [("cuda/13.0", "gcc/13.1.0", True)]
    # a fix that loads another version of the module asked about is that module's fix
    same = compare(query, lesson, fix_text("load an existing cuda", [{"type": "module", "op": "load", "name": "cuda/12.4"}]))
    assert not same.differences
    # a fix that names no module says nothing either way
    assert not compare(query, lesson, fix_text("run `module spider NAME` and load a version that exists")).differences


def test_a_fix_that_moves_off_the_lessons_module_version_serves_other_failing_versions():
    # The context corpus's real Lmod output (calibration part) and its class's fix: recorded for
    # cuda/12.1, the fix loads cuda/12.4 or gcc/13.1.0 - what failed is what the fix replaces.
    corpus = REPO / "data" / "corpus" / "context"
    texts = {i["id"]: i["text"] for i in map(json.loads, (corpus / "instances.jsonl").read_text().splitlines())}
    cls = next(c for c in map(json.loads, (corpus / "classes.jsonl").read_text().splitlines())
               if c["class"] == "lmod.module_version_unknown")
    fix = fix_text(cls["fix"], [{"type": "module", "op": "load", "name": "cuda/12.4"}])
    lesson = tokens(texts["ctx-0046"])  # "cuda/12.1"
    for other in ("ctx-0047", "ctx-0048"):  # "cuda/10.2"; "gcc/11.2.0", whose versions the fix names too
        differences = compare(tokens(texts[other]), lesson, fix).differences
        assert differences and not any(d.matters for d in differences)
    # the very version the fix loads failed too: the fix cannot help (one token changed: 12.1 -> 12.4)
    loaded = compare(tokens(texts["ctx-0046"].replace("cuda/12.1", "cuda/12.4")), lesson, fix)
    assert [d.matters for d in loaded.differences] == [True]
    # a module the fix offers nothing for
    blas = compare(fix_tokens('The following module(s) are unknown: "hpcblas/2.1"'), lesson, fix)
    assert [d.matters for d in blas.differences] == [True]
    # written here, not collected: a fix that provides the lesson's own version is about that version
    needs = compare(fix_tokens("requires cuda/11.8 (found cuda/12.4)"), fix_tokens("requires cuda/11.8 (found cuda/12.1)"),
                    fix_text("module load cuda/11.8"))
    assert not any(d.matters for d in needs.differences)
    other_needs = compare(fix_tokens("requires cuda/12.2"), fix_tokens("requires cuda/11.8"), fix_text("module load cuda/11.8"))
    assert [d.matters for d in other_needs.differences] == [True]


# ----------------------------------------------------------------------------- where a library was found


def located(query_id: str, lesson_id: str) -> list[dict]:
    from hpcmem.kb.recall.fixtokens import location_differences
    from hpcmem.kb.signatures.fingerprint import excerpt_template

    def side(instance_id: str) -> tuple[str, str]:
        text = corpus_text(instance_id)
        return template(text), excerpt_template(text)

    return [d.as_dict() for d in location_differences(side(query_id), side(lesson_id))]


def test_a_library_found_in_an_environment_is_not_the_systems_copy():
    # a conda env's libstdc++ (loader-0174) against the system's (loader-0012, /lib/x86_64-linux-gnu)
    assert located("loader-0174", "loader-0012") == [{"query": "libstdc++.so.6 in an environment",
                                                      "lesson": "libstdc++.so.6 elsewhere", "kind": "name",
                                                      "matters": True}]
    # two environments' copies (loader-0024 is ".../anaconda3/bin/../lib/libstdc++.so.6")
    assert located("loader-0174", "loader-0024") == []
    # two system copies (/usr/lib/x86_64-linux-gnu and /lib/x86_64-linux-gnu)
    assert located("loader-0161", "loader-0012") == []
    # no path printed ("libstdc++.so.6: version `GLIBCXX_3.4.20' not found"): no evidence either way
    assert located("loader-0175", "loader-0012") == [] and located("loader-0175", "loader-0024") == []


def test_a_version_the_fix_replaces_is_shown_but_counts_nothing_against_the_lesson():
    lesson = fix_tokens('The following module(s) are unknown: "cuda/12.1"')
    query = fix_tokens('The following module(s) are unknown: "cuda/10.2"')
    found = compare(query, lesson, fix_text("load one that exists", [{"type": "module", "op": "load", "name": "cuda/12.4"}]))
    assert [d.as_dict() for d in found.differences] == [{"query": "cuda/10.2", "lesson": "cuda/12.1", "kind": "version",
                                                         "matters": False}]
    assert (found.conflicts_that_do_not, found.version_conflicts, found.version_gap) == (0, 0, 0.0)
    # a version the fix does not name at all is still a version conflict (the scorer weighs it)
    plain = compare(query, lesson, fix_text("run `module spider cuda` and load a version that exists"))
    assert plain.version_conflicts == 1 and plain.version_gap > 0
