"""Stores are opened, not conjured (issue 33, defects 4, 10 and 14).

- A store the user named (--store, HPCMEM_USER_STORE, a config file) that is not there is
  an error naming the path and `hpcmem db upgrade`; no command creates its directory, and
  only a command that stores something creates the file, in an existing directory.
- The default user store is created by the first command that stores something; commands
  that only read see it as empty and leave no file behind.
- A damaged store, a file that is not a database, or one without alembic_version is one
  line and exit 2 on every command, naming the store, and its bytes are left as they were.
- Hints say what is wrong: /dev/null is not a regular file, an unreadable input is not
  a store that belongs to someone else, a read-only store is read-only.

Real stores through the real CLI; damage is bytes written into the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.cli.helpers import run_hpcmem
from tests.conftest import SAMPLES

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. "
       "Some of your processes may have been killed")
SACCT = SAMPLES / "sacct" / "lab-week.psv"

# Commands that only read: none of them may create a store.
READ_COMMANDS = [
    ["recall", OOM],
    ["recall", "--json", OOM],
    ["lessons", "list"],
    ["lessons", "show", "0123abcd"],
    ["lessons", "export"],
    ["stores"],
    ["stores", "--json"],
    ["feedback", "0123abcd-0000-4000-8000-000000000000", "--worked"],
    ["env", "list"],
    ["db", "current"],
]


def record(*root: str, env: dict[str, str] | None = None) -> str:
    done = run_hpcmem(*root, "record", "--error", OOM, "--cause", "the step used more than --mem",
                      "--fix", "request --mem=32G", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["lesson_id"]


def one_clean_error(result, *starts: str) -> str:
    """The stderr of a refused command: exit 2, `Error:` (and at most a `Hint:`), no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("Error: ") and len(lines) <= 2, result.stderr
    assert len(lines) == 1 or lines[1].startswith("Hint: "), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for start in starts:
        assert lines[0].startswith(start), (lines[0], start)
    return result.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lesson_count(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM lessons").fetchone()[0]


# --------------------------------------------------------------------------- defect 4


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda args: " ".join(args)[:30])
def test_a_mistyped_store_is_reported_and_never_created(tmp_path: Path, args):
    typo = tmp_path / "no-such-dir" / "sub" / "kb.db"
    err = one_clean_error(run_hpcmem("--store", str(typo), *args), f"Error: store 'user' does not exist at {typo}")
    assert "hpcmem db upgrade" in err
    assert not (tmp_path / "no-such-dir").exists()


def test_a_named_store_is_created_by_a_write_only_inside_an_existing_directory(tmp_path: Path):
    typo = tmp_path / "no-such-dir" / "kb.db"
    refused = run_hpcmem("--store", str(typo), "record", "--error", OOM, "--cause", "c", "--fix", "f")
    assert f"directory {typo.parent} does not exist" in one_clean_error(refused, "Error: cannot create store 'user'")
    assert not typo.parent.exists()

    place = tmp_path / "mine"
    place.mkdir(mode=0o700)
    assert run_hpcmem("--store", str(place / "kb.db"), "lessons", "list").returncode == 2  # reading creates nothing
    assert list(place.iterdir()) == []
    lesson = record("--store", str(place / "kb.db"))
    assert stat.S_IMODE((place / "kb.db").stat().st_mode) == 0o600
    listed = run_hpcmem("--store", str(place / "kb.db"), "lessons", "list", "--json")
    assert listed.returncode == 0 and [l["lesson_id"] for l in json.loads(listed.stdout)] == [lesson]
    # The same rules for a store named by the environment.
    env = {"HPCMEM_USER_STORE": str(tmp_path / "elsewhere" / "kb.db")}
    one_clean_error(run_hpcmem("recall", OOM, env=env), "Error: store 'user' does not exist at")
    assert not (tmp_path / "elsewhere").exists()


def test_db_upgrade_is_the_way_to_create_a_named_store(tmp_path: Path):
    path = tmp_path / "new" / "kb.db"
    made = run_hpcmem("--store", str(path), "db", "upgrade")
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    nothing = run_hpcmem("--store", str(path), "recall", OOM)
    assert nothing.returncode == 1, nothing.stderr  # ran fine, found nothing


def test_read_commands_leave_the_default_store_uncreated_and_record_creates_it(hpcmem_home: Path):
    for args in READ_COMMANDS:
        result = run_hpcmem(*args)
        assert result.returncode in (0, 1, 2) and "Traceback" not in result.stderr, (args, result.stderr)
        if args[0] in ("recall", "lessons", "stores", "env") and args[:2] != ["lessons", "show"]:
            assert result.returncode in (0, 1), (args, result.stderr)  # an empty store, not an error
    recall = run_hpcmem("recall", "--json", OOM)
    assert recall.returncode == 1 and json.loads(recall.stdout)["matches"] == []
    listed = json.loads(run_hpcmem("stores", "--json").stdout)["stores"][0]
    assert not listed["reachable"] and "does not exist yet" in listed["error"]
    assert not (hpcmem_home / "data").exists()

    lesson = record()  # a new user's first record creates the default store, privately
    store = hpcmem_home / "data" / "user.db"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600 and stat.S_IMODE(store.parent.stat().st_mode) == 0o700
    found = run_hpcmem("recall", "--json", OOM.replace("52004", "61117"))
    assert found.returncode == 0 and json.loads(found.stdout)["matches"][0]["lesson_id"] == lesson


def test_recall_stores_the_epilogs_pending_events_in_a_new_default_store(hpcmem_home: Path, tmp_path: Path):
    from tests.ingest.test_drain_before_recall import event_user, spooled_failure

    spool = tmp_path / "spool"
    spooled_failure(spool, "880031")  # the user's own failed job, waiting in the spool
    result = run_hpcmem("recall", "--json", "--no-model", "--job", "880031", env={"HPCMEM_SPOOL": str(spool)})
    assert result.returncode in (0, 1), result.stderr
    assert json.loads(result.stdout)["seen_before"]["count"] == 1
    assert (hpcmem_home / "data" / "user.db").exists()
    assert list((spool / event_user() / "new").iterdir()) == []


def test_a_missing_lab_store_is_listed_and_named_never_created(tmp_path: Path):
    lab = tmp_path / "labs" / "vision.db"
    env = {"HPCMEM_LAB_STORES": f"vision={lab}"}
    record(env=env)
    listed = run_hpcmem("stores", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    vision = json.loads(listed.stdout)["stores"][1]
    assert not vision["reachable"] and vision["error"] == f"store 'vision' does not exist at {lab}"
    err = one_clean_error(run_hpcmem("lessons", "list", "--scope", "lab:vision", env=env),
                          f"Error: store 'vision' does not exist at {lab}")
    assert "hpcmem db upgrade --scope lab:vision" in err
    one_clean_error(run_hpcmem("ingest", "sacct", str(SACCT), "--scope", "lab:vision", env=env))
    assert not lab.parent.exists()


# --------------------------------------------------------------------------- defect 10


def _damage(kind: str, store: Path) -> None:
    if kind == "malformed":  # random bytes over everything but the header page
        size = store.stat().st_size
        with open(store, "r+b") as fh:
            fh.seek(4096)
            fh.write(os.urandom(size - 4096))
    else:  # a file that is not a database at all
        store.write_bytes(os.urandom(200_000))


DAMAGE_REASON = {"malformed": "database disk image is malformed", "not-a-database": "file is not a database"}
EVERY_COMMAND = READ_COMMANDS + [
    ["record", "--error", OOM, "--cause", "c", "--fix", "f"],
    ["ingest", "sacct", str(SACCT)],
    ["learn"],
    ["db", "upgrade"],
]


@pytest.mark.parametrize("kind", sorted(DAMAGE_REASON))
def test_a_damaged_store_is_one_line_and_exit_2_on_every_command(tmp_path: Path, kind: str):
    store = tmp_path / "kb" / "user.db"
    store.parent.mkdir(mode=0o700)
    record("--store", str(store))
    _damage(kind, store)
    before = digest(store)
    for args in EVERY_COMMAND:
        result = run_hpcmem("--store", str(store), *args)
        err = one_clean_error(result, f"Error: store 'user' at {store} cannot be read: {DAMAGE_REASON[kind]}")
        assert "backup" in err, args
    assert digest(store) == before  # never written to


def test_a_damaged_lab_store_is_listed_unreachable_and_recall_still_answers(tmp_path: Path):
    lab = tmp_path / "labs" / "vision.db"
    lab.parent.mkdir()
    lab.write_bytes(os.urandom(50_000))
    env = {"HPCMEM_LAB_STORES": f"vision={lab}"}
    lesson = record(env=env)
    listed = run_hpcmem("stores", "--json", env=env)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    vision = json.loads(listed.stdout)["stores"][1]
    assert not vision["reachable"]
    assert vision["error"] == f"store 'vision' at {lab} cannot be read: file is not a database"
    table = run_hpcmem("stores", env={**env, "COLUMNS": "400"})
    assert table.returncode == 0 and "file is not a database" in table.stdout
    recall = run_hpcmem("recall", "--json", "--no-model", OOM.replace("52004", "7"), env=env)
    assert recall.returncode == 0 and json.loads(recall.stdout)["matches"][0]["lesson_id"] == lesson
    assert any("vision" in w and "not a database" in w for w in json.loads(recall.stdout)["warnings"])
    one_clean_error(run_hpcmem("lessons", "list", "--scope", "lab:vision", env=env),
                    f"Error: store 'vision' at {lab} cannot be read")


def test_a_store_without_its_version_table_is_refused_and_left_untouched(tmp_path: Path):
    store = tmp_path / "kb" / "user.db"
    store.parent.mkdir(mode=0o700)
    record("--store", str(store))
    with sqlite3.connect(store) as conn:
        conn.execute("DROP TABLE alembic_version")
    conn.close()
    before = digest(store)
    for args in (["stores"], ["recall", OOM], ["lessons", "list"], ["db", "upgrade"],
                 ["record", "--error", OOM, "--cause", "c", "--fix", "f"], ["feedback", "0123abcd", "--worked"]):
        err = one_clean_error(run_hpcmem("--store", str(store), *args), f"Error: store 'user' at {store} has tables")
        assert "no schema version (alembic_version)" in err and "already exists" not in err, args
    assert digest(store) == before and lesson_count(store) == 1


def test_a_postgres_store_without_its_version_table_is_refused(pg_schema, tmp_path: Path):
    url, schema = pg_schema
    cfg = tmp_path / "lab.toml"
    cfg.write_text(f'[stores.labs.vision]\nurl = "{url}"\nschema = "{schema}"\n')
    assert run_hpcmem("--config", str(cfg), "db", "upgrade", "--scope", "lab:vision").returncode == 0
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{schema}".alembic_version')
    for args in (["lessons", "list", "--scope", "lab:vision"], ["db", "upgrade", "--scope", "lab:vision"]):
        err = one_clean_error(run_hpcmem("--config", str(cfg), *args), "Error: store 'vision' at postgresql")
        assert "no schema version (alembic_version)" in err, args
    with psycopg.connect(url) as conn:  # nothing was created again or dropped
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}
    assert "alembic_version" not in tables and {"lessons", "audit_log"} <= tables


# --------------------------------------------------------------------------- defect 14


@pytest.mark.parametrize("target", ["/dev/null", "a directory"])
def test_a_store_that_is_not_a_regular_file_says_so(tmp_path: Path, target: str):
    path = "/dev/null" if target == "/dev/null" else str(tmp_path)
    for args in (["recall", OOM], ["stores"], ["record", "--error", OOM, "--cause", "c", "--fix", "f"]):
        err = one_clean_error(run_hpcmem("--store", path, *args),
                              f"Error: store 'user' at {path} is not a regular file")
        assert "chmod" not in err, args


def _without_root_powers() -> list[str]:
    """A prefix that makes this process subject to file modes (root bypasses them)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("as root, a refused read needs setpriv to drop CAP_DAC_OVERRIDE")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all"]


def run_as_plain_user(*args: str, env: dict[str, str] | None = None):
    import subprocess

    from tests.cli.helpers import HPCMEM

    return subprocess.run([*_without_root_powers(), HPCMEM, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_an_unreadable_input_is_named_and_no_store_is_blamed(tmp_path: Path):
    record()
    dump = tmp_path / "dump.psv"
    shutil.copy(SACCT, dump)
    dump.chmod(0)
    err = one_clean_error(run_as_plain_user("ingest", "sacct", str(dump)))
    assert str(dump) in err.splitlines()[0]
    assert "store" not in err.lower()  # the dump was refused, not a store
    # A refusal that reaches the CLI's last resort (here the model directory) is named too.
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    model = locked / "model"
    err = one_clean_error(run_as_plain_user("recall", "ImportError: libfoo.so.1: cannot open shared object file",
                                            env={"HPCMEM_MODEL_DIR": str(model)}))
    assert str(model) in err.splitlines()[0] and "store" not in err.lower()


@pytest.mark.parametrize("journal", ["WAL", "DELETE"])
def test_feedback_on_a_read_only_store_says_it_is_read_only(tmp_path: Path, journal: str):
    cfg = tmp_path / "journal.toml"
    cfg.write_text(f'[stores.user]\njournal_mode = "{journal}"\n')
    lesson = record("--config", str(cfg))
    store = Path(os.environ["HPCMEM_HOME"]) / "data" / "user.db"
    store.chmod(0o400)
    try:
        result = run_as_plain_user("--config", str(cfg), "feedback", lesson, "--worked")
        err = one_clean_error(result)
        assert "read-only" in err.splitlines()[0] and "no lesson" not in err
    finally:
        store.chmod(0o600)
    with sqlite3.connect(store) as conn:  # the lesson is as it was
        assert conn.execute("SELECT confirmations FROM lessons WHERE id = ?", (lesson,)).fetchone() == (0,)
    conn.close()
