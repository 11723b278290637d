"""What each hot command imports. Agents run `recall` before every resubmission and
`record` after every fix; the epilog runs at every job end. A heavy import that creeps
onto one of these paths fails here (the cost of each is in bench/bench_startup.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpcmem.kb.store.schema_version import SCHEMA_HEAD
from tests.cli.helpers import run_hpcmem

# Run the installed entry point and report every module imported by the end.
RUNNER = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: sys.__stderr__.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
    "sys.argv = ['hpcmem', *sys.argv[1:]]\n"
    "from hpcmem.cli.entry import main\n"
    "main()\n"
)
OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
OOM_AGAIN = OOM.replace("52004", "77130").replace("1 oom-kill", "2 oom-kill")

HEAVY = ("pydantic", "sqlalchemy", "alembic", "rich", "numpy", "faiss", "torch", "sentence_transformers",
         "onnxruntime", "tokenizers", "mcp")
OTHER_COMMANDS = ("hpcmem.cli.lessons", "hpcmem.cli.ingest", "hpcmem.cli.mcp_server", "hpcmem.cli.env",
                  "hpcmem.cli.db", "hpcmem.cli.revalidate", "hpcmem.cli.model", "hpcmem.cli.stores")


def imported(*args: str, stdin: str | None = None,
             env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    result = subprocess.run([sys.executable, "-c", RUNNER, *args], input=stdin, capture_output=True, text=True,
                            timeout=120, env={**os.environ, **(env or {})})
    line = [l for l in result.stderr.splitlines() if l.startswith("MODULES ")][-1]
    return result, set(json.loads(line[len("MODULES "):]))


def offenders(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m in forbidden or m.startswith(tuple(f + "." for f in forbidden)))


@pytest.fixture
def known_lesson():
    done = run_hpcmem("record", "--error", OOM, "--cause", "the step used more than --mem", "--fix", "request --mem=32G")
    assert done.returncode == 0, done.stderr


def test_record_imports_no_orm_framework_or_renderer(known_lesson):
    result, modules = imported("record", "--error", "ModuleNotFoundError: No module named 'torch'",
                               "--cause", "venv not active", "--fix", "source .venv/bin/activate", "--json")
    assert result.returncode == 0, result.stderr
    assert offenders(modules, HEAVY + OTHER_COMMANDS) == []


def test_known_template_recall_imports_nothing_heavy(known_lesson):
    result, modules = imported("recall", OOM_AGAIN, "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["matches"], result.stderr
    assert offenders(modules, HEAVY + OTHER_COMMANDS) == []
    # an OOM is no refused submission: the site's checks and snapshot types stay unloaded
    # (importing them cost known-template recall 17 %, bench_recall_regression.py)
    assert offenders(modules, ("hpcmem.kb.environment.site_check", "hpcmem.kb.environment.snapshot",
                               "hpcmem.kb.recall.site_match", "hpcmem.kb.recall.submission_advice")) == []


def test_recall_before_the_first_write_creates_no_store_and_no_orm_after_the_first(hpcmem_home):
    # A new user's recalls read an in-memory copy of an empty store; the template it is copied
    # from is made once (with Alembic), in the cache, and the store itself is never created.
    first, _ = imported("recall", OOM_AGAIN, "--json")
    assert first.returncode == 1, first.stderr
    again, modules = imported("recall", OOM_AGAIN, "--json")
    assert again.returncode == 1 and json.loads(again.stdout)["abstained"], again.stderr
    assert offenders(modules, ("sqlalchemy", "alembic") + OTHER_COMMANDS) == []  # no migration, no ORM
    assert not (hpcmem_home / "data" / "user.db").exists()
    assert [p.name for p in (hpcmem_home / "cache" / "empty-store").iterdir()] == [f"{SCHEMA_HEAD}.db"]


def test_fingerprint_imports_nothing_heavy():
    result, modules = imported("fingerprint", stdin=OOM + "\n")
    assert result.returncode == 0 and json.loads(result.stdout)["category"], result.stderr
    assert offenders(modules, HEAVY + OTHER_COMMANDS + ("hpcmem.kb.store.database", "sqlite3", "psycopg")) == []


def test_check_on_a_saved_snapshot_imports_no_cli_framework_or_orm():
    sample = os.path.join(os.path.dirname(__file__), "..", "..", "data", "samples", "env", "cluster-2026-12")
    stored = run_hpcmem("env", "snapshot", "--partitions", os.path.join(sample, "scontrol-show-partition-oneliner.txt"),
                        "--modules", os.path.join(sample, "module-t-avail.txt"),
                        "--nodes", os.path.join(sample, "scontrol-show-node-oneliner.txt"), env={"HPCMEM_CLUSTER": "lab"})
    assert stored.returncode == 0, stored.stderr
    result, modules = imported("check", "--sbatch-args", "-p cpu --mem=8G", "--user", "alice", "--json",
                               env={"HPCMEM_CLUSTER": "lab"})
    assert result.returncode == 0, result.stderr
    assert offenders(modules, HEAVY + OTHER_COMMANDS + ("typer", "click", "hpcmem.cli.main")) == []


def test_epilog_imports_only_the_standard_library_and_its_own_module(tmp_path):
    from hpcmem.ingest.epilog import parse_env_file
    from tests.conftest import SAMPLES

    job = parse_env_file((SAMPLES / "epilog" / "3.epilog.env").read_text())  # a real failed job's epilog
    result, modules = imported("epilog", "--scontrol-file", str(SAMPLES / "epilog" / "3.epilog.scontrol"),
                               "--dry-run", env=job)
    assert result.returncode == 0 and json.loads(result.stdout)["state"], result.stderr
    assert offenders(modules, HEAVY + ("typer", "hpcmem.cli.main", "hpcmem.kb.store.database")) == []


def test_a_store_that_is_behind_still_records(tmp_path, known_lesson):
    # The slow path is allowed when needed: an empty (new) store is created with Alembic.
    result, modules = imported("--store", str(tmp_path / "new.db"), "record", "--error", OOM, "--cause", "c",
                               "--fix", "f", "--json")
    assert result.returncode == 0, result.stderr
    assert "alembic" in modules and json.loads(result.stdout)["lesson_id"]


@pytest.mark.parametrize("argv, needed", [
    (["recall", "x"], ["recall"]),
    (["--store", "/tmp/s.db", "record", "--error", "e"], ["record"]),
    (["--config=/etc/h.toml", "--debug", "fingerprint"], ["fingerprint"]),
    (["--config", "recall", "lessons", "list"], ["lessons"]),  # a value that looks like a command
    (["--version"], []),
    (["--version", "--help"], None),
    (["--help"], None),
    ([], None),
    (["no-such-command"], None),  # the full app says so, with the list of commands
])
def test_the_app_is_built_with_just_the_command_invoked(argv, needed):
    from hpcmem.cli.main import commands_needed

    assert commands_needed(argv) == needed


def test_every_command_still_registers_and_an_unknown_one_is_a_usage_error():
    result = run_hpcmem("--help")
    assert result.returncode == 0
    from hpcmem.cli.main import COMMANDS

    for name in COMMANDS:
        assert name in result.stdout, name
    wrong = run_hpcmem("no-such-command")
    assert wrong.returncode == 2 and "No such command" in wrong.stderr
