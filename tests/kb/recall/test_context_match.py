"""The job context as evidence (kb/recall/context_match.py): which facts count, when they
agree, differ or contradict, and when a lesson's fix cannot help the job."""

from __future__ import annotations

from hpcmem.kb.recall.context_match import compare

MEM_32G = [{"type": "sbatch", "option": "--mem", "from": "8G", "to": "32G"}]


def test_amounts_agree_within_the_gap_between_binary_and_decimal_units_and_differ_beyond():
    same = compare({"mem_mb": 8000.0}, {"mem_mb": 8192.0}, actions=MEM_32G, category="host_oom")
    assert same.agree == ["mem"] and not same.differs and same.shift > 0
    # the fourth context collection's OOM at 90M is another request than one at 100M
    assert compare({"mem_mb": 90.0}, {"mem_mb": 100.0}, actions=MEM_32G, category="host_oom").contradicts
    other = compare({"mem_mb": 16384.0}, {"mem_mb": 8192.0}, actions=MEM_32G, category="host_oom")
    assert other.differs == [{"field": "mem", "query": "16G", "lesson": "8G", "kind": "context", "matters": True}]
    assert other.contradicts and other.shift < 0 and not other.inapplicable


def test_a_fix_the_job_already_has_makes_the_lesson_inapplicable():
    v = compare({"mem_mb": 65536.0}, {"mem_mb": 8192.0}, actions=MEM_32G, category="host_oom")
    assert v.inapplicable == ["the job already asked --mem=64G; the fix asks 32G"]
    more_time = [{"type": "sbatch", "option": "--time", "from": "1:00:00", "to": "4:00:00"}]
    assert compare({"time_limit_s": 4 * 3600}, {}, actions=more_time, category="time_limit").inapplicable
    assert not compare({"time_limit_s": 3600}, {}, actions=more_time, category="time_limit").inapplicable


def test_a_fix_that_lowers_a_request_is_satisfied_from_below():
    fewer = [{"type": "sbatch", "option": "--cpus-per-task", "to": "64"}]
    lesson = {"cpus": 256}
    assert not compare({"cpus": 128}, lesson, actions=fewer, category="cpu_request_too_large").inapplicable
    assert compare({"cpus": 32}, lesson, actions=fewer, category="cpu_request_too_large").inapplicable


def test_a_refused_request_is_told_apart_by_the_shape_of_its_gpu_request():
    gpu_lesson = {"partition": "cpu", "gres": ["gpu:1"], "gpus": 1}
    v = compare({"partition": "cpu", "mem_mb": 716800.0}, gpu_lesson, category="memory_request_too_large")
    assert v.contradicts and v.differs[0] == {"field": "gpus", "query": "none", "lesson": "gpu", "kind": "context",
                                              "matters": False}
    same = compare({"partition": "cpu", "gres": ["gpu:4"], "gpus": 4}, gpu_lesson, category="memory_request_too_large")
    assert not same.contradicts and "gpus" in same.agree
    typed = compare({"partition": "cpu", "gres": ["gpu:v100:1"], "gpus": 1}, gpu_lesson,
                    category="memory_request_too_large")
    assert typed.contradicts and typed.differs[0]["query"] == "gpu:v100"  # a GPU type asked is another request
    # memory asked or not, one CPU or many: evidence, not a veto (the amounts need the node sizes)
    mem = compare({"partition": "cpu", "mem_mb": 716800.0}, {"partition": "cpu", "cpus": 256},
                  category="memory_request_too_large")
    assert not mem.contradicts and {d["field"] for d in mem.differs} == {"memory_asked", "many_cpus"}


def test_memory_is_what_a_node_gave_the_job():
    per_cpu = compare({"mem_per_cpu_mb": 150.0, "cpus": 2}, {"mem_mb": 300.0}, actions=MEM_32G, category="host_oom")
    assert per_cpu.agree == ["mem"] and not per_cpu.differs
    assert compare({"mem_mb": 150.0}, {"mem_mb": 200.0}, category="host_oom").contradicts  # a twentieth, not a quarter


def test_a_module_the_failure_names_loaded_on_one_side_only_contradicts():
    swap = [{"type": "module", "op": "swap", "from": "hpcfft/2.0", "name": "hpcfft/1.0"}]
    v = compare({"modules": ["gcc/13.1.0"]}, {"modules": ["hpcfft/2.0"]}, actions=swap,
                category="missing_shared_library", mentioned="libhpcfft.so.1: cannot open shared object file")
    assert v.differs == [{"field": "modules", "query": "no hpcfft", "lesson": "hpcfft/2.0", "kind": "context",
                          "matters": True}]
    assert v.contradicts
    # gcc is loaded on one side only, but neither the failure nor the fix names it: no evidence
    quiet = compare({"modules": ["gcc/13.1.0", "hpcfft/2.0"]}, {"modules": ["hpcfft/2.0"]}, actions=swap,
                    category="missing_shared_library", mentioned="libhpcfft.so.1: cannot open shared object file")
    assert quiet.agree == ["modules"] and not quiet.differs


def test_unknown_modules_are_told_apart_by_the_text_not_by_what_was_loaded():
    v = compare({"modules": ["gcc/12.2.0"], "partition": "debug"}, {"modules": ["cuda/12.4"], "partition": "main"},
                category="unknown_module")
    assert not v.contradicts  # the partition is soft evidence there: it lowers, it does not veto
    assert v.differs[0]["field"] == "partition" and v.shift < 0


def test_a_timeout_under_another_qos_contradicts():
    v = compare({"time_limit_s": 60, "qos": "short"}, {"time_limit_s": 60, "qos": "normal"}, category="time_limit")
    assert v.contradicts and v.differs[0]["field"] == "qos"


def test_a_partition_the_fix_moves_to_is_not_where_the_cause_is():
    to_gpu = [{"type": "sbatch", "option": "--partition", "to": "gpu"}]
    conditions = [{"kind": "partition", "name": "gpu"}]
    v = compare({"partition": "cpu", "gres": ["gpu:1"], "gpus": 1}, {"partition": "cpu", "gres": ["gpu:1"], "gpus": 1},
                actions=to_gpu, conditions=conditions, category="memory_request_too_large")
    assert not v.inapplicable and not v.differs
    cause_there = compare({"partition": "cpu"}, {}, conditions=[{"kind": "partition", "name": "gpu"}],
                          category="unknown_module")
    assert cause_there.inapplicable == ["the lesson's cause is on partition gpu; this job ran on cpu"]


def test_no_context_is_no_evidence():
    assert not compare({}, {"mem_mb": 8192.0}, actions=MEM_32G, category="host_oom").decided
    v = compare({"partition": "cpu"}, {}, actions=MEM_32G, category="host_oom")
    assert not v.differs and not v.agree and v.shift == 0


def test_a_lesson_for_another_program_needs_the_facts_to_agree():
    more = [{"type": "sbatch", "option": "--mem", "to": "600M"}]
    lesson = {"mem_mb": 500.0, "command": "prep.sh"}
    # another script and nothing else known: at most related, with the program named
    bare = compare({"command": "train.sh"}, lesson, actions=more, category="host_oom")
    assert bare.contradicts and bare.differs == [{"field": "program", "query": "train.sh", "lesson": "prep.sh",
                                                  "kind": "context", "matters": False}]
    # another script that asked the same and failed the same way: the facts agree
    same_request = compare({"command": "train.sh", "mem_mb": 500.0}, lesson, actions=more, category="host_oom")
    assert not same_request.contradicts and "mem" in same_request.agree
    # issue 34's case: train.sh asked 700M, the lesson's fix is 600M: below what just failed
    below = compare({"command": "train.sh", "mem_mb": 700.0}, lesson, actions=more, category="host_oom")
    assert below.inapplicable and below.contradicts
    # the same program is agreement, whatever the script's digest
    assert "command" in compare({"command": "prep.sh"}, lesson, actions=more, category="host_oom").agree


def test_how_slurm_ended_the_job_is_decisive_for_a_failure_that_is_that_verdict():
    # sacct's State as the context corpus records it: "CANCELLED by 1001" ended as CANCELLED
    cancelled = {"state": "CANCELLED by 1001", "partition": "debug"}
    v = compare({"state": "PREEMPTED", "partition": "debug"}, cancelled, category="job_cancelled")
    assert v.contradicts and {"field": "state", "query": "PREEMPTED", "lesson": "CANCELLED", "kind": "context",
                               "matters": False} in v.differs
    assert "state" in compare({"state": "CANCELLED"}, cancelled, category="job_cancelled").agree
    # for a failure that is not Slurm's verdict (a program's own error), the state says nothing
    assert not compare({"state": "FAILED"}, {"state": "OUT_OF_MEMORY"}, category="python_exception").decided


def test_a_soft_difference_does_not_keep_another_programs_sized_fix_out_when_a_decisive_fact_agrees():
    # the fresh collection's ctxf-0060 against ctxf-0058's lesson: both hit their own 1-minute
    # limit (TIMEOUT, QOS normal), on another partition (soft for a timeout) and program
    more_time = [{"type": "sbatch", "option": "--time", "to": "5"}]
    lesson = {"partition": "main", "qos": "normal", "time_limit_s": 60, "state": "TIMEOUT", "command": "bash"}
    query = {"partition": "debug", "qos": "normal", "time_limit_s": 60, "state": "TIMEOUT", "command": "heat"}
    v = compare(query, lesson, actions=more_time, category="time_limit")
    assert not v.contradicts and {"time_limit", "qos", "state"} <= set(v.agree)
    assert [d["field"] for d in v.differs] == ["partition", "program"]
    # with only a soft fact agreeing, another program's sized fix stays related
    soft = compare({"partition": "main", "command": "heat"}, lesson, actions=more_time, category="time_limit")
    assert soft.contradicts and soft.contradicting == ["program"]
