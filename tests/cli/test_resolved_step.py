"""The "resolved" step of an agent's loop (issue 34, item 3): after a success, one call
confirms the recalled lesson by the short id the human output shows, or records a new one;
`learn` then confirms that lesson instead of writing a second one. Real processes, real
SQLite stores, real sacct output (data/samples)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli.helpers import run_hpcmem
from tests.conftest import SAMPLES

LIB = ("python3: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: "
       "No such file or directory")
TWINS = ("abcdef12-0000-4000-8000-000000000001", "abcdef12-0000-4000-8000-000000000002")


def ok(result):
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result


def one_error_line(result, starts: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and errors[0].startswith(starts) and "Traceback" not in result.stderr, result.stderr
    return errors[0]


def test_feedback_takes_the_short_id_the_human_recall_output_shows():
    mine = json.loads(ok(run_hpcmem("record", "--error", LIB, "--cause", "the CUDA 11 runtime is not loaded",
                                    "--fix", "module load cuda/11.8", "--json")).stdout)
    shown = ok(run_hpcmem("recall", "--no-model", LIB))
    # each lesson's panel title starts with its number and its short id
    ids = re.findall(r"^╭─ \d+\. lesson ([0-9a-f]{8}) · ", shown.stdout, re.M)
    assert ids == [mine["lesson_id"][:8]], shown.stdout
    fed = json.loads(ok(run_hpcmem("feedback", ids[0], "--worked", "--job", "4242", "--json")).stdout)
    assert fed["lesson_id"] == mine["lesson_id"] and fed["confirmations"] == 1
    assert fed["confidence"] > mine["confidence"]
    assert ("worked", "4242") in {(e["kind"], e["job_id"]) for e in fed["provenance"]["evidence"]}
    # the human form names the lesson by the same short id
    again = ok(run_hpcmem("feedback", mine["lesson_id"][:10].upper(), "--failed"))
    assert again.stdout.startswith(f"lesson {mine['lesson_id'][:8]}: confidence ")
    # shorter than 8 characters, or no such lesson: one line, exit 2
    one_error_line(run_hpcmem("feedback", mine["lesson_id"][:7], "--worked"), "Error: lesson id")
    one_error_line(run_hpcmem("feedback", "0123abcd", "--worked"), "Error: no lesson with id '0123abcd'")


def test_an_ambiguous_short_id_is_one_line_naming_how_many_match(tmp_path: Path):
    ok(run_hpcmem("record", "--error", LIB, "--cause", "c", "--fix", "module load cuda/11.8"))
    line = json.loads(ok(run_hpcmem("lessons", "export")).stdout.splitlines()[0])
    path = tmp_path / "twins.jsonl"
    path.write_text("".join(json.dumps(line | {"id": i}) + "\n" for i in TWINS))
    ok(run_hpcmem("lessons", "import", str(path), "--scope", "user"))
    for argv in (("feedback", "abcdef12", "--worked"), ("lessons", "show", "abcdef12")):
        error = one_error_line(run_hpcmem(*argv), "Error: lesson id 'abcdef12' is ambiguous: 2 lessons match")
        assert all(i in error for i in TWINS)
    fed = json.loads(ok(run_hpcmem("feedback", TWINS[1], "--worked", "--json")).stdout)  # the whole id decides
    assert fed["lesson_id"] == TWINS[1] and fed["confirmations"] == 1


# ------------------------------------------------------------------ learn confirms the agent's lesson

REAL = SAMPLES / "sacct" / "real-22.05-parsable2.psv"  # jobs 1-7 of a real Slurm 22.05 cluster
RESUBMITTED = SAMPLES / "sacct" / "resubmissions" / "real-22.05-oom-timeout-resubmitted.psv"  # + 9 and 10
# Later: oom.sh fails again at its script's 50M (job 11) and completes with --mem=400M (job 12). The
# rows are jobs 4 and 9 of RESUBMITTED with new ids and times, in the same 18 fields.
LATER = """\
JobID|JobName|User|Account|Partition|State|ExitCode|DerivedExitCode|Elapsed|Timelimit|ReqMem|MaxRSS|NodeList|Submit|Start|End|WorkDir|SubmitLine
11|oom|alice|research|main|OUT_OF_MEMORY|0:125|0:0|00:00:01|00:02:00|50M||localhost|2026-11-30T03:00:00|2026-11-30T03:00:02|2026-11-30T03:00:03|/home/alice/jobs|sbatch --parsable oom.sh
11.batch|batch||research||OUT_OF_MEMORY|0:125||00:00:01|||44064K|localhost|2026-11-30T03:00:02|2026-11-30T03:00:02|2026-11-30T03:00:03||
12|oom|alice|research|main|COMPLETED|0:0|0:0|00:00:04|00:02:00|400M||localhost|2026-11-30T03:05:00|2026-11-30T03:05:00|2026-11-30T03:05:04|/home/alice/jobs|sbatch --parsable --mem=400M oom.sh
12.batch|batch||research||COMPLETED|0:0||00:00:04|||308644K|localhost|2026-11-30T03:05:00|2026-11-30T03:05:00|2026-11-30T03:05:04||
"""
OOM_LOG = ("slurmstepd: error: Detected 1 oom_kill event in StepId=4.batch. Some of your processes may have been "
           "killed by the cgroup out-of-memory handler.")


def lessons() -> list[dict]:
    return json.loads(ok(run_hpcmem("lessons", "list", "--json")).stdout)


def with_memory_fix(listed: list[dict]) -> list[dict]:
    return [l for l in listed if any(a.get("option") == "--mem" for a in l["actions"])]


@pytest.mark.parametrize("told", [("--job", "4", "--action=--mem=400M"),
                                  ("--error", OOM_LOG, "--action=--mem=400")])  # 400 is MB to sbatch
def test_learn_confirms_the_agents_lesson_instead_of_writing_a_second(tmp_path: Path, told):
    ok(run_hpcmem("ingest", "sacct", str(REAL)))
    how, what, action = told
    mine = json.loads(ok(run_hpcmem("record", how, what, "--cause", "oom.sh grows to about 300 MB",
                                    "--fix", "submit oom.sh with --mem=400M", action, "--json")).stdout)
    # the resubmission that completed: ingest pairs 4 -> 9 (and 1 -> 10, a time fix)
    learned = json.loads(ok(run_hpcmem("ingest", "sacct", str(RESUBMITTED),
                                       "--json")).stdout)["learned"]
    assert (learned["pairs_found"], learned["lessons_created"], learned["lessons_confirmed"]) == (2, 1, 1)
    (only,) = with_memory_fix(lessons())  # no second lesson with the same fix
    assert only["lesson_id"] == mine["lesson_id"]
    shown = json.loads(ok(run_hpcmem("lessons", "show", mine["lesson_id"][:8], "--json")).stdout)
    assert ("fixed_by", "9") in {(e["kind"], e["job_id"]) for e in shown["evidence"]}
    assert shown["confirmations"] == 1 and shown["confidence"] > mine["confidence"]
    assert shown["fix"] == "submit oom.sh with --mem=400M"  # the recorded words stay
    assert [h["action"] for h in shown["history"]] == ["create", "confirm"]

    # a later failure and success with the same fix confirm the same lesson
    later = tmp_path / "later.psv"
    later.write_text(LATER)
    learned = json.loads(ok(run_hpcmem("ingest", "sacct", str(later), "--json")).stdout)["learned"]
    assert (learned["lessons_created"], learned["lessons_confirmed"], learned["lesson_ids"]) == (
        0, 1, [mine["lesson_id"]])
    (only,) = with_memory_fix(lessons())
    assert only["confirmations"] == 2 and only["fix"] == "submit oom.sh with --mem=400M"
    # relearning everything counts nothing twice
    again = json.loads(ok(run_hpcmem("learn", "--full", "--json")).stdout)
    assert (again["lessons_created"], again["lessons_confirmed"]) == (0, 0)
    assert again["skipped"]["already_learned"] == 3
    assert with_memory_fix(lessons())[0]["confirmations"] == 2
