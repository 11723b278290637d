"""Graded recall on real texts: trailers, contentless input, bands, differences, aliases, advice.

Texts come from the calibration part of data/corpus/ (real error output people pasted into
public issue trackers), by id, so a test fails if the corpus loses them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from hpcmem.kb.lessons.curation import merge_lessons, show_lesson
from hpcmem.kb.errors import InputError
from hpcmem.kb.lessons.evidence import feedback
from hpcmem.kb.recall.recaller import Recaller, RecallQuery
from hpcmem.kb.lessons.from_error import record
from hpcmem.kb.signatures.fingerprint import fingerprint, has_content

CORPUS = Path(__file__).resolve().parents[3] / "data" / "corpus" / "raw"


def corpus_text(instance_id: str) -> str:
    domain = instance_id.split("-")[0]
    for line in (CORPUS / f"{domain}.instances.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["id"] == instance_id:
            return item["text"]
    raise KeyError(instance_id)


def recall(stack_config, text: str, **kw) -> dict:
    stack, config = stack_config
    r = Recaller(stack, config, allow_model=False)
    try:
        return r.recall(RecallQuery(text=text, **kw))
    finally:
        r.close()


# ----------------------------------------------------------------------------- signatures


def test_different_root_causes_behind_one_mpi_abort_banner_get_different_fingerprints():
    reaxff, nwchem, missing_case = (corpus_text(i) for i in ("mpi-0021", "mpi-0055", "mpi-0056"))
    sigs = [fingerprint(t) for t in (reaxff, nwchem, missing_case)]
    assert all("MPI_ABORT was invoked" in t for t in (reaxff, nwchem, missing_case))
    assert len({s.fingerprint for s in sigs}) == 3
    assert "angle_list" in sigs[0].template  # the application's own line, not the banner
    assert "failed to open the input file" in sigs[1].template
    assert "Cannot find input case" in sigs[2].template


SAMPLES = Path(__file__).resolve().parents[3] / "data" / "samples"


def test_the_newest_missing_symbol_version_decides():
    # The loader names every version the binary lacks; a libstdc++ with the newest has them all.
    gromacs = fingerprint((SAMPLES / "logs" / "slurm-4410600.err").read_text())
    assert gromacs.template == "libstdc++.so.6: version `GLIBCXX_3.4.30' not found"
    assert "GLIBCXX_3.4.30" in fingerprint(corpus_text("loader-0012")).template


def test_a_too_old_c_library_outranks_the_libstdcxx_lines_before_it():
    text = corpus_text("loader-0011")
    assert text.index("GLIBCXX_3.4.29") < text.index("GLIBC_2.34")
    sig = fingerprint(text)
    assert sig.template == "libc.so.6: version `GLIBC_2.34' not found"
    assert sig.category == "symbol_version_not_found"


def test_a_separator_or_the_help_aggregate_trailer_is_never_the_decisive_line():
    dashes, aggregate = corpus_text("mpi-0030"), corpus_text("mpi-0032")
    assert dashes.rstrip().endswith("-" * 20) and "orte_base_help_aggregate" in aggregate
    assert any(ch.isalpha() for ch in fingerprint(dashes).template)
    assert fingerprint(aggregate).template.startswith("was unable to find any relevant network interfaces")


def test_version_differences_are_graded_and_apart_from_other_names():
    from hpcmem.kb.recall.fixtokens import compare, fix_tokens

    query = fix_tokens(fingerprint(corpus_text("loader-0106")).template)  # GLIBCXX_3.4.22
    near = compare(query, fix_tokens("libstdc++.so.6: version `GLIBCXX_3.4.20' not found"), "load gcc/9")
    far = compare(query, fix_tokens("libstdc++.so.6: version `GLIBCXX_3.4.31' not found"), "load gcc/13")
    assert near.version_conflicts == far.version_conflicts == 1 and near.name_conflicts == 0
    assert 0 < near.version_gap < far.version_gap
    other = compare(query, fix_tokens("libc.so.6: version `GLIBC_2.34' not found"), "use a newer OS")
    # another library (issue 26, item 3): a conflict that matters, not a version apart
    assert other.conflicts_that_matter >= 1 and other.version_conflicts == 0 and other.version_gap == 0


def test_a_qos_or_association_limit_is_compared_by_the_limit_it_names():
    from hpcmem.kb.recall.fixtokens import compare, fix_tokens

    def tokens(instance_id):
        return fix_tokens(fingerprint(corpus_text(instance_id)).template)

    assoc, qos = tokens("slurm-0049"), tokens("slurm-0050")  # AssocMaxSubmitJobLimit, QOSMax...PerUserLimit
    grp_gres = tokens("slurm-0048")  # QOSGrpGRES
    assert [t.name for t in assoc] == [t.name for t in qos] == ["maxsubmitjob"]
    same = compare(qos, assoc, "submit a job array instead of many jobs")
    assert same.agree == 1 and not same.differences
    # another limit is another failure whatever the fix says: at most related
    assert compare(grp_gres, assoc, "submit a job array instead of many jobs").conflicts_that_matter == 1


def test_a_qos_minimum_is_a_qos_limit_too():
    sig = fingerprint(corpus_text("slurm-0047"))  # sbatch: error: QOSMinNode
    assert sig.category == "qos_limit_exceeded"
    assert sig.template == "QOS or association limit: QOSMinNode"


def test_open_mpi_openib_warnings_share_a_category_and_yield_to_an_aborting_rank():
    for instance_id in ("mpi-0026", "mpi-0030", "mpi-0031"):  # three wordings of Open MPI's openib BTL
        assert fingerprint(corpus_text(instance_id)).category == "mpi_transport_warning"
    # a warning decides only when nothing more specific is in the output
    text = corpus_text("mpi-0031") + "\nTraceback (most recent call last):\nValueError: bad input deck\n"
    assert fingerprint(text).category == "python_exception"


def test_decisive_lines_chosen_apart_still_overlap_with_the_other_excerpt():
    from hpcmem.kb.recall.scoring import Probe, Variant, features, load_model
    from hpcmem.kb.signatures.fingerprint import excerpt_template

    lesson_text, query_text = corpus_text("mpi-0026"), corpus_text("mpi-0030")
    lesson_sig, query_sig = fingerprint(lesson_text), fingerprint(query_text)
    assert lesson_sig.template != query_sig.template
    variant = Variant(lesson_sig.fingerprint, lesson_sig.template, lesson_sig.category,
                      excerpt_template(lesson_text))
    x, _ = features(Probe.of(query_text, query_sig), variant, "", [], load_model(), with_vectors=False)
    assert x["lex_decisive"] < x["lex_cross_lesson"]
    assert 0 < x["lex_cross_query"] <= 1


def test_a_wrapper_exception_yields_to_the_childs_exception():
    text = ("[rank1]: Traceback (most recent call last):\n"
            "[rank1]:   File \"train.py\", line 9, in <module>\n"
            "[rank1]: ValueError: too many values to unpack (expected 2)\n"
            "Traceback (most recent call last):\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    sig = fingerprint(text)
    assert sig.category == "python_exception"
    assert sig.template.startswith("ValueError: too many values to unpack")


def test_a_rank_prefix_does_not_hide_a_python_exception():
    assert fingerprint(corpus_text("dist-0002")).category != "unknown"
    assert fingerprint("[rank3]: RuntimeError: Expected all tensors to be on the same device").category == \
        "python_exception"


def test_the_word_preempted_in_program_output_does_not_outrank_its_traceback():
    text = "resuming: the previous run was preempted, loading checkpoint\nTraceback (most recent call last):\nKeyError: 'lr'"
    assert fingerprint(text).category == "python_exception"
    assert fingerprint("slurmstepd: error: *** JOB 77 ON c1 CANCELLED AT 2026-11-02T01:00:00 DUE TO PREEMPTION ***"
                       ).category == "preempted"


def test_short_node_names_are_masked_and_device_names_and_local_programs_kept():
    a = fingerprint("cn7: error: connection to gpu3 lost on ib0").template
    b = fingerprint("cn12: error: connection to gpu14 lost on ib0").template
    assert a == b and "ib0" in a and "cn7" not in a
    assert fingerprint("./simulate: error: bad input deck").template != fingerprint("./postproc: error: bad input deck").template


@pytest.mark.parametrize("text", ["", "   \n\t", "\x1b[31m\x1b[0m\x1b[2K", "\r\r   \r", "----\n====\n"])
def test_contentless_text_is_refused_by_record_and_recall(stack, text):
    assert not has_content(text)
    with pytest.raises(InputError, match="no content"):
        record(stack[0], cause="c", fix="f", author="a", error_text=text or " ")
    with pytest.raises(InputError, match="no content"):
        recall(stack, text or " ")


# ----------------------------------------------------------------------------- bands


def test_a_recurrence_in_other_words_is_a_match_and_advice_stands_apart(stack):
    mine = record(stack[0], cause="gcc 11's libstdc++ is not on the library path",
                  fix="module load gcc/11.3.0 (provides GLIBCXX_3.4.29) before running",
                  author="a", source="human", error_text=corpus_text("loader-0006"))
    result = recall(stack, corpus_text("loader-0007"))
    top = result["matches"][0]
    assert top["lesson_id"] == mine["lesson_id"] and top["band"] == "match" and not result["abstained"]
    assert all(m["lesson_id"] for m in result["matches"])  # stored lessons only
    assert isinstance(result["advice"], list)


def test_a_version_the_fix_names_is_a_related_difference_never_a_match(stack):
    lesson = record(stack[0], cause="the CUDA 11 runtime is not loaded", fix="module load cuda/11.8",
                    author="a", source="human",
                    error_text="./train: error while loading shared libraries: libcudart.so.11.0: cannot open shared "
                               "object file: No such file or directory")
    result = recall(stack, "python3: error while loading shared libraries: libcudart.so.12: cannot open shared "
                           "object file: No such file or directory")
    assert result["abstained"]
    assert [m["band"] for m in result["matches"]] == ["related"]
    assert result["matches"][0]["lesson_id"] == lesson["lesson_id"]
    assert result["matches"][0]["differs"] == [
        {"query": "libcudart.so.12", "lesson": "libcudart.so.11.0", "kind": "version", "matters": True}]


def test_a_generic_fix_applies_to_another_unknown_module(stack):
    record(stack[0], cause="the module version does not exist here",
           fix="run `module spider NAME` and load a version that exists", author="a", source="human",
           error_text='Lmod has detected the following error:  The following module(s) are unknown: "cuda/11.0"')
    result = recall(stack, 'Lmod has detected the following error:  The following module(s) are unknown: "cuda/10.2"')
    top = result["matches"][0]
    assert top["differs"] and not any(d["matters"] for d in top["differs"])


def test_recall_does_not_change_the_callers_query(stack):
    query = RecallQuery(text="Segmentation fault (core dumped)", modules=["gcc/12.2.0"])
    before = copy.deepcopy(query)
    stack_, config = stack
    r = Recaller(stack_, config, allow_model=False)
    try:
        r.recall(query)
    finally:
        r.close()
    assert query == before


# ----------------------------------------------------------------------------- aliases


def test_a_confirmed_variant_becomes_an_alias_and_a_contradiction_removes_it(stack):
    original, variant = corpus_text("mpi-0055"), corpus_text("mpi-0056")
    lesson = record(stack[0], cause="the application cannot find its input", fix="check the input path",
                    author="a", source="human", error_text=original)
    assert fingerprint(variant).fingerprint != lesson["fingerprint"]
    before = recall(stack, variant)
    assert not any(m["match_kind"] == "exact" for m in before["matches"])

    feedback(stack[0], lesson["lesson_id"], worked=True, actor="a", error_text=variant)
    after = recall(stack, variant)
    top = after["matches"][0]
    assert top["lesson_id"] == lesson["lesson_id"] and top["match_kind"] == "exact" and top["matched_alias"]
    assert top["band"] == "match" and after["stages"] == ["exact"]  # answered without the wide stage
    shown = show_lesson(stack[0], lesson["lesson_id"])
    assert [a["fingerprint"] for a in shown["aliases"]] == [fingerprint(variant).fingerprint]
    assert any(h["action"] == "alias:add" for h in shown["history"])

    feedback(stack[0], lesson["lesson_id"], worked=False, actor="a", error_text=variant)
    assert show_lesson(stack[0], lesson["lesson_id"])["aliases"] == []
    assert not any(m["match_kind"] == "exact" for m in recall(stack, variant)["matches"])


def test_merge_keeps_the_other_lessons_failure_and_aliases_as_variants(stack):
    a = record(stack[0], cause="c", fix="check the input path", author="a", source="human",
               error_text=corpus_text("mpi-0055"))
    b = record(stack[0], cause="c", fix="check the input file name", author="a", source="human",
               error_text=corpus_text("mpi-0056"))
    feedback(stack[0], b["lesson_id"], worked=True, actor="a", error_text=corpus_text("mpi-0057"))
    merged = merge_lessons(stack[0], a["lesson_id"], b["lesson_id"], actor="lead", keep=a["lesson_id"][:8])
    assert merged["aliases_added"] == 2
    prints = {x["fingerprint"] for x in show_lesson(stack[0], a["lesson_id"])["aliases"]}
    assert prints == {b["fingerprint"], fingerprint(corpus_text("mpi-0057")).fingerprint}
