"""Snapshots and dumps that look wrong are refused (issue 33, defects 6, 7, 8 and 12).

Everything runs through the real CLI on real files, FIFOs, pipes and SQLite stores; the
stand-ins for scontrol and Lmod are shell scripts on PATH, as in test_partitions/test_lmod.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from tests.cli.helpers import HPCMEM, run_hpcmem
from tests.conftest import REPO, SAMPLES

ENV = SAMPLES / "env" / "cluster-2026-10"
MODULES = ENV / "module-t-avail.txt"
PARTITIONS = ENV / "scontrol-show-partition-oneliner.txt"
SACCT = SAMPLES / "sacct"
LAB = {"HPCMEM_CLUSTER": "lab"}
TIMEOUT = "slurmstepd: error: *** JOB 52026 ON gpu-01 CANCELLED AT 2026-11-25T11:00:05 DUE TO TIME LIMIT ***"


def db_rows(home: Path, query: str) -> list[tuple]:
    with sqlite3.connect(home / "data" / "user.db") as conn:
        return conn.execute(query).fetchall()


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("Error: ")
    return first


# ----------------------------------------------------------------- defect 6: env snapshots


@pytest.fixture
def lab_env(hpcmem_home: Path) -> dict[str, str]:
    """A stored snapshot of cluster-2026-10 and a lesson tied to its gpu_test partition."""
    first = run_hpcmem("env", "snapshot", "--modules", str(MODULES), "--partitions", str(PARTITIONS), env=LAB)
    assert first.returncode == 0, first.stderr
    rec = run_hpcmem("record", "--error", TIMEOUT, "--cause", "gpu_test caps jobs at 8 h", "--fix", "use gpu",
                     "--partition", "gpu_test", "--cluster", "lab", "--json", env=LAB)
    assert rec.returncode == 0, rec.stderr
    lesson = json.loads(rec.stdout)
    assert {"kind": "partition", "name": "gpu_test"} in [{k: c[k] for k in ("kind", "name")} for c in lesson["conditions"]]
    return lesson


def stored_state(home: Path) -> tuple[list[tuple], list[tuple]]:
    return (db_rows(home, "SELECT id, content_hash FROM env_snapshots ORDER BY id"),
            db_rows(home, "SELECT id, status, status_reason FROM lessons ORDER BY id"))


def test_partition_listing_with_only_partitionname_is_refused(hpcmem_home: Path, lab_env, tmp_path: Path):
    before = stored_state(hpcmem_home)
    bare = tmp_path / "partitions.txt"
    bare.write_text("PartitionName=\n")
    for command in (["revalidate"], ["revalidate", "--allow-empty"], ["env", "snapshot"]):
        result = run_hpcmem(*command, "--partitions", str(bare), env=LAB)
        # a listing with no parsable partition names the input, --allow-empty or not
        assert one_line_error(result) == f"Error: {bare}: line 1: PartitionName= has no name"
    assert stored_state(hpcmem_home) == before


@pytest.mark.parametrize("listing", [
    # an hourly `scontrol show partition -o` cut off inside its first record
    lambda: PARTITIONS.read_text()[:len("PartitionName=cp")],
    # sinfo's header, no partition rows
    lambda: "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n",
    # some other cluster's partitions: none of the stored ones
    lambda: (SAMPLES / "env" / "formats" / "partitions" / "scontrol-multiline-unseparated.txt").read_text(),
], ids=["cut-off-scontrol", "sinfo-header-only", "other-partitions"])
def test_partition_snapshot_that_removes_every_partition_needs_allow_empty(hpcmem_home: Path, lab_env,
                                                                           tmp_path: Path, listing):
    path = tmp_path / "partitions.txt"
    path.write_text(listing())
    before = stored_state(hpcmem_home)
    for command in (["revalidate"], ["revalidate", "--dry-run"], ["env", "snapshot"]):
        result = run_hpcmem(*command, "--partitions", str(path), env=LAB)
        assert one_line_error(result).startswith(f"Error: {path}: ")
        assert "--allow-empty" in result.stderr.splitlines()[1]  # the hint
    assert stored_state(hpcmem_home) == before

    # Told that the partitions really are gone, revalidation expires the lesson tied to one.
    done = run_hpcmem("revalidate", "--partitions", str(path), "--allow-empty", "--json", env=LAB)
    assert done.returncode == 0, done.stderr
    [change] = json.loads(done.stdout)["changes"]
    assert (change["lesson_id"], change["after"]) == (lab_env["lesson_id"], "expired")
    assert "partition gpu_test no longer exists" in change["reasons"]
    assert len(stored_state(hpcmem_home)[0]) == len(before[0]) + 1


def test_module_snapshot_that_removes_every_module_needs_allow_empty(hpcmem_home: Path, lab_env, tmp_path: Path):
    before = stored_state(hpcmem_home)
    empty, other = tmp_path / "empty.txt", tmp_path / "other.txt"
    empty.write_text("")
    other.write_text((SAMPLES / "env" / "real-debian-lmod" / "module-t-avail.txt").read_text())  # lmod, settarg
    assert "empty module listing" in one_line_error(run_hpcmem("env", "snapshot", "--modules", str(empty), env=LAB))
    error = one_line_error(run_hpcmem("revalidate", "--modules", str(other), env=LAB))
    assert error.startswith(f"Error: {other}: none of the ") and "modules of snapshot 1" in error
    assert stored_state(hpcmem_home) == before
    [first] = json.loads(run_hpcmem("env", "list", "--json").stdout)
    stored = run_hpcmem("env", "snapshot", "--modules", str(empty), "--allow-empty", "--json", env=LAB)
    assert stored.returncode == 0, stored.stderr
    summary = json.loads(stored.stdout)["snapshot"]
    assert (summary["modules"], summary["partitions"]) == (0, first["partitions"])  # partitions carried over


def _script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_live_snapshot_from_a_silent_scontrol_is_refused(hpcmem_home: Path, lab_env, tmp_path: Path):
    """`revalidate --live` on a timer: scontrol exits 0 but prints nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "scontrol", "exit 0\n")
    lmod = _script(bin_dir, "lmod", f'/bin/cat "{MODULES}" >&2\n')  # Lmod lists on stderr
    live = {**LAB, "PATH": str(bin_dir), "LMOD_DIR": "", "LMOD_CMD": str(lmod)}
    before = stored_state(hpcmem_home)
    error = one_line_error(run_hpcmem("revalidate", "--live", env=live))
    assert error == "Error: live `scontrol show partition`: no partition in the listing"
    assert stored_state(hpcmem_home) == before
    assert run_hpcmem("revalidate", "--live", "--allow-empty", env=live).returncode == 0


# ----------------------------------------------------------------- defect 7: FIFOs in ingest logs


def test_ingest_logs_skips_fifos_named_or_found(hpcmem_home: Path, tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(SAMPLES / "logs" / "fail-3.err", logs / "slurm-3.err")
    os.mkfifo(logs / "slurm-10.out")  # nobody ever writes to it
    named = tmp_path / "slurm-11.out"
    os.mkfifo(named)
    result = run_hpcmem("ingest", "logs", str(logs), str(named), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["failures"] == 1 and summary["skipped"] == 2
    assert {(i["path"], i["reason"]) for i in summary["issues"]} == {
        (str(logs / "slurm-10.out"), "not a regular file (a FIFO); skipped"),
        (str(named), "not a regular file (a FIFO); skipped"),
    }
    assert db_rows(hpcmem_home, "SELECT job_id FROM occurrences") == [("3",)]


def test_sacct_logs_never_waits_on_a_fifo(hpcmem_home: Path, tmp_path: Path):
    """`ingest sacct --logs`: a job whose StdErr is a FIFO keeps its sacct facts."""
    os.mkfifo(tmp_path / "train-900.err")
    dump = tmp_path / "dump.psv"
    dump.write_text("JobID|JobName|User|State|ExitCode|StdOut|StdErr|Submit|Start|End\n"
                    f"900|train|alice|FAILED|3:0||{tmp_path}/%x-%j.err|2026-11-30T01:00:00|2026-11-30T01:00:01|"
                    "2026-11-30T01:00:03\n")
    result = run_hpcmem("ingest", "sacct", str(dump), "--logs", "--no-learn", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["failures"] == 1
    assert db_rows(hpcmem_home, "SELECT job_id, log_excerpt FROM occurrences") == [("900", None)]


# ----------------------------------------------------------------- defect 8: sacct headers


def _failures(home: Path) -> list[tuple]:
    return db_rows(home, "SELECT job_id, state FROM occurrences ORDER BY job_id")


def _ingest_elsewhere(tmp_path: Path, name: str, path: Path) -> list[tuple]:
    """``path`` ingested into a store of its own: the reference to compare with."""
    home = tmp_path / name
    home.mkdir(mode=0o700)
    result = run_hpcmem("ingest", "sacct", str(path), "--no-learn", env={"HPCMEM_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    return _failures(home)


def test_sacct_header_jobid_jobstate_is_read(hpcmem_home: Path, tmp_path: Path):
    usual = SACCT / "lab-week.psv"
    header, rest = usual.read_text().split("\n", 1)
    names = ["JobId" if n == "JobID" else "JobState" if n == "State" else n for n in header.split("|")]
    renamed = tmp_path / "renamed.psv"
    renamed.write_text("|".join(names) + "\n" + rest)
    result = run_hpcmem("ingest", "sacct", str(renamed), "--no-learn", "--json")
    assert result.returncode == 0, result.stderr
    expected = _ingest_elsewhere(tmp_path, "reference", usual)
    assert json.loads(result.stdout)["failures"] == len(expected) > 0
    assert _failures(hpcmem_home) == expected


def test_sacct_table_of_jobcomp_keys_is_read(hpcmem_home: Path, tmp_path: Path):
    """A site's table of jobcomp/filetxt records (Slurm's own key names: JobId, JobState,
    UserId, StartTime, ...) gives the failures `sacct -c` reads from the same file."""
    records = [dict(pair.split("=", 1) for pair in line.split())
               for line in (SACCT / "real-22.05-jobcomp-filetxt.txt").read_text().splitlines()]
    keys = list(records[0])
    table = tmp_path / "jobcomp.psv"
    table.write_text("\n".join("|".join(row) for row in [keys, *([r[k] for k in keys] for r in records)]) + "\n")
    result = run_hpcmem("ingest", "sacct", str(table), "--no-learn", "--json")
    assert result.returncode == 0, result.stderr
    expected = _ingest_elsewhere(tmp_path, "sacct-c", SACCT / "real-22.05-jobcomp-parsable2.psv")
    assert json.loads(result.stdout)["failures"] == len(expected) > 0
    assert _failures(hpcmem_home) == expected
    users = db_rows(hpcmem_home, "SELECT DISTINCT user_name FROM job_records")
    assert users == [("alice",)]  # UserId=alice(1001) read as sacct's User


def test_sacct_dump_without_a_state_column_is_an_error(hpcmem_home: Path, tmp_path: Path):
    dump = tmp_path / "nostate.psv"
    lines = (SACCT / "real-22.05-parsable2.psv").read_text().splitlines()
    dump.write_text("".join("|".join(line.split("|")[:5]) + "\n" for line in lines))  # JobID..Partition
    assert run_hpcmem("ingest", "sacct", str(SACCT / "real-22.05-parsable2.psv"), "--no-learn").returncode == 0
    before = db_rows(hpcmem_home, "SELECT * FROM job_records ORDER BY job_id")
    error = one_line_error(run_hpcmem("ingest", "sacct", str(dump), "--no-learn"))
    assert error.startswith("Error: sacct output has no State column")
    assert db_rows(hpcmem_home, "SELECT * FROM job_records ORDER BY job_id") == before


# ----------------------------------------------------------------- defect 12: pipes, unreadable dirs


def test_ingest_sacct_reads_process_substitution_and_dev_stdin(hpcmem_home: Path, tmp_path: Path):
    dump = SACCT / "real-22.05-parsable2.psv"
    expected = _ingest_elsewhere(tmp_path, "reference", dump)
    substituted = subprocess.run(["bash", "-c", f'"$0" ingest sacct <(cat "$1") --no-learn --json', HPCMEM, str(dump)],
                                 capture_output=True, text=True, timeout=120)
    assert substituted.returncode == 0, substituted.stderr
    summary = json.loads(substituted.stdout)
    assert summary["source"].startswith("/dev/fd/") and summary["failures"] == len(expected)
    assert _failures(hpcmem_home) == expected

    piped = run_hpcmem("ingest", "sacct", "/dev/stdin", "--no-learn", "--json", input=dump.read_text())
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["failures"] == len(expected)


def test_ingest_sacct_names_a_directory_and_a_missing_file(tmp_path: Path):
    assert one_line_error(run_hpcmem("ingest", "sacct", str(tmp_path))) == \
        f"Error: {tmp_path} is a directory, not a sacct dump"
    assert one_line_error(run_hpcmem("ingest", "sacct", str(tmp_path / "nope.psv"))) == \
        f"Error: {tmp_path / 'nope.psv'}: no such file"


def _unavailable(reason: str) -> None:
    if os.environ.get("HPCMEM_REQUIRE_ROOT_TESTS") == "1":
        pytest.fail(reason + " (HPCMEM_REQUIRE_ROOT_TESTS=1 makes this test mandatory)")
    pytest.skip(reason)


def _as_unprivileged(base: Path) -> tuple[list[str], Path]:
    """(argv prefix running hpcmem as a user who cannot read other users' 0700
    directories, that user's HPCMEM_HOME). As root: the `nobody` account via runuser,
    with a system Python of this version and the venv's site-packages (as in
    tests/kb/store/test_access_os.py); otherwise the current user."""
    home = base / "home"
    home.mkdir(mode=0o700)
    if os.geteuid() != 0:
        return [HPCMEM], home
    if shutil.which("runuser") is None:
        _unavailable("runuser is needed to drop privileges")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    python = next((p for p in (os.path.realpath(sys.executable), f"/usr/bin/python{version}",
                               f"/usr/local/bin/python{version}")
                   if os.path.exists(p) and subprocess.run(["runuser", "-u", "nobody", "--", "test", "-x", p]).returncode == 0),
                  None)
    if python is None:
        _unavailable(f"no Python {version} that the nobody user may execute")
    if subprocess.run(["runuser", "-u", "nobody", "--", "test", "-r", str(REPO / "ingest" / "logs.py")]).returncode:
        _unavailable(f"the repository {REPO} is not readable by other users")
    shutil.chown(home, "nobody")
    runner = (f"import site, sys; site.addsitedir({sysconfig.get_paths()['purelib']!r}); sys.argv[0] = 'hpcmem'; "
              "from hpcmem.cli.main import main; main()")
    return ["runuser", "-u", "nobody", "--", python, "-c", runner], home


@pytest.mark.parametrize("where", ["named", "nested"])
def test_ingest_logs_unreadable_directory_is_an_error(where: str):
    base = Path(tempfile.mkdtemp(prefix="hpcmem-unreadable-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        prefix, home = _as_unprivileged(base)
        logs = base / "logs"
        logs.mkdir(mode=0o755)
        shutil.copy(SAMPLES / "logs" / "fail-3.err", logs / "slurm-3.err")
        os.chmod(logs / "slurm-3.err", 0o644)
        private = logs / "private"
        private.mkdir()
        shutil.copy(SAMPLES / "logs" / "oom-4.out", private / "slurm-4.out")
        os.chmod(private, 0)  # unreadable by anyone but root
        target = private if where == "named" else logs
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("HPCMEM_")},
               "HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1"}
        result = subprocess.run([*prefix, "ingest", "logs", str(target)], capture_output=True, text=True,
                                timeout=120, env=env, cwd=base)
        assert one_line_error(result) == f"Error: cannot read directory {private}: Permission denied"
        # nothing of the readable part was stored either
        store = home / "data" / "user.db"
        assert not store.exists() or db_rows(home, "SELECT count(*) FROM occurrences") == [(0,)]
    finally:
        if (base / "logs" / "private").exists():
            os.chmod(base / "logs" / "private", stat.S_IRWXU)  # so that a non-root run can remove it
        shutil.rmtree(base, ignore_errors=True)
