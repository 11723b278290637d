"""The "resolved" step of an agent's loop (issue 34, item 3): after a success, one call
confirms the recalled lesson by the short id the human output shows, or records a new one;
`learn` then confirms that lesson instead of writing a second one. Real processes, real
SQLite stores, real sacct output (data/samples)."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
