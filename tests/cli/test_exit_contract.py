"""The exit-code contract an agent branches on (cli/_errors.py): 0 found, 1 ran fine and found
nothing, 2 bad input or an unusable store, 3 anything unexpected - never a traceback without
--debug, never 0 or 1 after a failure. And the text boundary: undecodable input is repaired."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.cli.helpers import HPCMEM, run_hpcmem

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
BROKEN_LIB = b"python: error while loading shared libraries: libcudart.so.11.0: \xff\xfe cannot open shared object file"


def run_bytes(*args: bytes, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """The console script with raw bytes as argv and stdin, as a shell passes them."""
    return subprocess.run([HPCMEM.encode(), *args], input=stdin, capture_output=True, env=dict(os.environ), timeout=120)


def stored_texts(home: Path) -> list[str]:
    with sqlite3.connect(home / "data" / "user.db") as db:
        return [row[0] for row in db.execute("SELECT excerpt FROM lessons")]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_undecodable_bytes_in_argv_are_recorded_and_recalled(hpcmem_home):
    done = run_bytes(b"record", b"--error", BROKEN_LIB, b"--cause", b"the CUDA 11 runtime is not loaded",
                     b"--fix", b"module load cuda/11.8", b"--json")
    assert done.returncode == 0, done.stderr
    [excerpt] = stored_texts(hpcmem_home)
    assert "\ufffd\ufffd cannot open" in excerpt  # each stray byte became U+FFFD, the rest kept
    again = run_bytes(b"recall", BROKEN_LIB, b"--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["matches"][0]["fix"] == "module load cuda/11.8"


def test_undecodable_bytes_on_stdin_are_read_not_fatal(hpcmem_home):
    for args in ([b"recall", b"-", b"--json"], [b"fingerprint"]):
        done = run_bytes(*args, stdin=BROKEN_LIB + b"\n")
        assert done.returncode in (0, 1), done.stderr
        assert b"Traceback" not in done.stderr
        json.loads(done.stdout)  # one JSON document
    fed = run_bytes(b"record", b"--error-file", b"-", b"--cause", b"c", b"--fix", b"module load cuda/11.8",
                    stdin=b"libfoo.so: \xc3\x28 invalid\n")
    assert fed.returncode == 0, fed.stderr


def test_a_lone_surrogate_never_reaches_the_store(hpcmem_home):
    # What JSON's "\ud800" or an argv byte decoded by surrogateescape gives Python.
    code = ("import sys; sys.argv = ['hpcmem', 'record', '--error', 'libx.so: bad \\ud800 header', "
            "'--cause', 'c\\udcff', '--fix', 'f']\nfrom hpcmem.cli.entry import main\nmain()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert stored_texts(hpcmem_home) == ["libx.so: bad \ufffd header"]


def test_an_unexpected_failure_exits_3_with_one_line_and_a_traceback_only_with_debug(hpcmem_home):
    assert run_hpcmem("record", "--error", OOM, "--cause", "c", "--fix", "request --mem=32G").returncode == 0
    # A fault planted in the library (the part under test is the CLI's top level, not recall).
    code = ("import sys\nfrom hpcmem.kb.recall.recaller import Recaller\n"
            "def broken(self, query):\n    raise RuntimeError('planted fault')\n"
            "Recaller.recall = broken\nsys.argv = ['hpcmem', *sys.argv[1:]]\n"
            "from hpcmem.cli.entry import main\nmain()")
    plain = subprocess.run([sys.executable, "-c", code, "recall", OOM], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 3
    assert one_error_line(plain.stderr) == ("Error: internal error (RuntimeError: planted fault); "
                                            "rerun with --debug and report it")
    debug = subprocess.run([sys.executable, "-c", code, "recall", OOM, "--debug"], capture_output=True, text=True,
                           timeout=120)
    assert debug.returncode == 3 and "Traceback" in debug.stderr and "planted fault" in debug.stderr


def damage(path: Path) -> None:
    """Overwrite the pages after SQLite's header: the file stays, its b-trees do not."""
    with open(path, "r+b") as fh:
        fh.seek(1024)
        fh.write(os.urandom(16 * 1024))


def test_recall_on_a_damaged_store_is_exit_2_never_nothing_found(hpcmem_home):
    assert run_hpcmem("record", "--error", OOM, "--cause", "c", "--fix", "request --mem=32G").returncode == 0
    damage(hpcmem_home / "data" / "user.db")
    for args in (["recall", OOM], ["recall", OOM, "--json"], ["recall", "an error never seen before", "--no-model"],
                 ["lessons", "list"], ["lessons", "export"]):
        done = run_hpcmem(*args)
        assert done.returncode == 2, (args, done.returncode, done.stderr[-500:])
        assert one_error_line(done.stderr)
        assert done.stdout.strip() == "" or json.loads(done.stdout)


def test_a_config_file_that_is_not_utf8_is_one_line_and_exit_2(hpcmem_home, tmp_path):
    config = tmp_path / "site.toml"
    config.write_bytes(b'[recall]\nmatch_probability = "\xff"\n')
    done = run_hpcmem("recall", OOM, env={"HPCMEM_CONFIG": str(config)})
    assert done.returncode == 2
    offset = len(b'[recall]\nmatch_probability = "')  # where the stray byte is
    assert one_error_line(done.stderr) == f"Error: {config}: not UTF-8 text (byte {offset}): TOML files are UTF-8"


def test_text_without_a_word_is_refused_for_what_it_lacks(hpcmem_home):
    done = run_hpcmem("recall", "x")
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert "no word of two or more letters or digits" in line and "only whitespace" not in line


def test_feedback_takes_undecodable_bytes_in_its_error(hpcmem_home):
    done = run_hpcmem("record", "--error", OOM, "--cause", "c", "--fix", "request --mem=32G", "--json")
    lesson_id = json.loads(done.stdout)["lesson_id"]
    fed = run_bytes(b"feedback", lesson_id.encode(), b"--worked", b"--error",
                    OOM.replace("52004", "61100").encode() + b" \xff\xfe", b"--json")
    assert fed.returncode == 0, fed.stderr
    assert b"Traceback" not in fed.stderr
    json.loads(fed.stdout)


def test_an_unknown_schema_revision_is_bad_input_not_a_crash(hpcmem_home):
    for args in (["db", "upgrade", "zzzz"], ["db", "downgrade", "zzzz", "--yes"]):
        done = run_hpcmem(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert one_error_line(done.stderr) == "Error: schema revision 'zzzz': Can't locate revision identified by 'zzzz'"
    assert "up to date" in run_hpcmem("db", "current").stdout + run_hpcmem("db", "current").stderr
