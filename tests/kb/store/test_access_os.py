"""SQLite store protection shown with real OS users and groups (needs root).

The tests create users and a group (``hpcmt_`` + a unique tag), run the real hpcmem CLI
as each of them with ``runuser`` and check what the kernel lets them do. They skip when
not root; HPCMEM_REQUIRE_ROOT_TESTS=1 (set it in CI) turns that skip into a failure.

The project venv's interpreter may live under /root (mode 0700), which other users cannot
execute; the tests then use the system interpreter of the same Python version and add
the venv's site-packages with ``site.addsitedir``, so nothing is copied.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcmem.kb.store.access import as_permission_denied
from hpcmem.kb.errors import PermissionDenied

REPO = Path(__file__).resolve().parents[3]
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
RUNNER = (
    "import site, sys\n"
    f"site.addsitedir({SITE_PACKAGES!r})\n"
    "sys.argv[0] = 'hpcmem'\n"
    "from hpcmem.cli.main import main\n"
    "main()\n"
)
LESSON_CAUSE = "alice-private-cause: /home/alice/thesis/run7 ran out of memory"


def _unavailable(reason: str) -> None:
    if os.environ.get("HPCMEM_REQUIRE_ROOT_TESTS") == "1":
        pytest.fail(reason + " (HPCMEM_REQUIRE_ROOT_TESTS=1 makes these tests mandatory)")
    pytest.skip(reason)


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def _interpreter_for_others() -> str | None:
    """A Python of this version that every user may execute, or None."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        real = os.path.realpath(candidate)
        if os.path.exists(real) and _run(["runuser", "-u", "nobody", "--", "test", "-x", real]).returncode == 0:
            return real
    return None


@dataclass
class Site:
    base: Path
    python: str
    alice: str
    bob: str
    lead: str
    lab_group: str

    def home(self, user: str) -> Path:
        return self.base / "homes" / user

    def hpcmem(self, user: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """The real CLI as ``user`` with a clean hpcmem environment."""
        settings = {"HPCMEM_HOME": str(self.home(user)), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", **(env or {})}
        return _run(["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in settings.items()),
                     self.python, "-c", RUNNER, *args], cwd=self.base)

    def sqlite(self, user: str, path: Path, sql: str) -> subprocess.CompletedProcess:
        return _run(["runuser", "-u", user, "--", "sqlite3", str(path), sql], cwd=self.base)


@pytest.fixture
def site():
    if os.geteuid() != 0:
        _unavailable("real-user access tests need root (useradd, runuser)")
    missing = [tool for tool in ("useradd", "userdel", "groupadd", "groupdel", "runuser", "sqlite3")
               if shutil.which(tool) is None]
    if missing:
        _unavailable(f"missing tools for real-user access tests: {', '.join(missing)}")
    python = _interpreter_for_others()
    if python is None:
        _unavailable(f"no Python {sys.version_info.major}.{sys.version_info.minor} that other users may execute")
    if _run(["runuser", "-u", "nobody", "--", "test", "-r", str(REPO / "kb" / "store" / "database.py")]).returncode != 0:
        _unavailable(f"the repository {REPO} is not readable by other users")

    tag = uuid.uuid4().hex[:6]
    users = [f"hpcmt_{tag}_{who}" for who in ("alice", "bob", "lead")]
    group = f"hpcmt_{tag}_lab"
    base = Path(tempfile.mkdtemp(prefix=f"hpcmt_{tag}_", dir="/tmp"))
    made_users: list[str] = []
    made_group = False
    try:
        os.chmod(base, 0o755)  # traversable: each user's own directory below is 0700
        (base / "homes").mkdir(mode=0o755)
        subprocess.run(["groupadd", group], check=True, capture_output=True)
        made_group = True
        for user in users:
            # alice and the lead are in the lab group; bob is not.
            extra = ["-G", group] if not user.endswith("_bob") else []
            subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", *extra, user], check=True, capture_output=True)
            made_users.append(user)
            home = base / "homes" / user
            home.mkdir(mode=0o700)
            shutil.chown(home, user, user)
        yield Site(base, python, *users, lab_group=group)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for user in made_users:
            subprocess.run(["userdel", user], capture_output=True)
        if made_group:
            subprocess.run(["groupdel", group], capture_output=True)


def _record_private_failure(site: Site, user: str) -> Path:
    """``user`` records a lesson and ingests a failed job into their default store."""
    recorded = site.hpcmem(user, "record", "--error", "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.batch",
                           "--cause", LESSON_CAUSE, "--fix", "request --mem=64G", "--source", "human")
    assert recorded.returncode == 0, recorded.stderr
    ingested = site.hpcmem(user, "ingest", "sacct", str(REPO / "data" / "samples" / "sacct" / "lab-week.psv"))
    assert ingested.returncode == 0, ingested.stderr
    return site.home(user) / "data" / "user.db"


def test_user_store_is_private_to_its_owner(site: Site):
    store = _record_private_failure(site, site.alice)
    # hpcmem created it 0600 inside a 0700 directory, owned by alice.
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.parent.stat().st_mode) == 0o700
    assert store.stat().st_uid == store.parent.stat().st_uid == int(_run(["id", "-u", site.alice]).stdout)
    own = site.sqlite(site.alice, store, "SELECT count(*) FROM lessons WHERE cause LIKE 'alice-private-cause%'; "
                                         "SELECT count(*) FROM occurrences;")
    lessons, occurrences = map(int, own.stdout.split())
    assert lessons == 1 and occurrences > 0

    # bob with sqlite3: the kernel refuses.
    other = site.sqlite(site.bob, store, "SELECT cause FROM lessons; SELECT job_id FROM occurrences;")
    assert other.returncode != 0
    assert "unable to open database" in other.stderr
    assert LESSON_CAUSE not in other.stdout
    # bob's plain open(): EACCES, whatever the client.
    probe = _run(["runuser", "-u", site.bob, "--", site.python, "-c", f"open({str(store)!r}, 'rb')"])
    assert "PermissionError: [Errno 13] Permission denied" in probe.stderr


def test_pointing_at_another_users_store_reads_nothing(site: Site):
    store = _record_private_failure(site, site.alice)
    env = {"HPCMEM_USER_STORE": str(store)}
    for args in (("recall", "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9.batch", "--json"),
                 ("stores", "--json")):
        result = site.hpcmem(site.bob, *args, env=env)
        assert result.returncode != 0, result.stdout
        assert LESSON_CAUSE not in result.stdout + result.stderr
        assert "Permission denied" in result.stderr or "permission denied" in result.stderr
        assert str(store) in result.stderr or str(store.parent) in result.stderr
    # Even with alice's directory opened up, the 0600 file keeps bob out.
    os.chmod(store.parent.parent, 0o711)
    os.chmod(store.parent, 0o711)
    result = site.sqlite(site.bob, store, "SELECT cause FROM lessons")
    assert result.returncode != 0 and "unable to open database" in result.stderr


def test_another_users_store_is_a_one_line_error(site: Site):
    store = _record_private_failure(site, site.alice)
    result = site.hpcmem(site.bob, "stores", env={"HPCMEM_USER_STORE": str(store)})
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == f"Error: permission denied: {store.parent}"


def test_refuses_a_user_store_others_can_read(site: Site):
    store = _record_private_failure(site, site.alice)
    os.chmod(store, 0o644)
    result = site.hpcmem(site.alice, "stores")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == f"Error: user store {store} is accessible to other users (mode 0644)"
    assert lines[1] == f"Hint: run: chmod 600 {store}"
    assert "Traceback" not in result.stderr
    os.chmod(store, 0o600)
    os.chmod(store.parent, 0o770)  # group access to the directory is refused too
    result = site.hpcmem(site.alice, "stores")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == f"Error: user store {store.parent} is accessible to other users (mode 0770)"


def test_lab_store_in_setgid_group_directory(site: Site):
    # The site admin makes the lab directory: owned by the lead, group lab, setgid 2770.
    lab_dir = site.base / "labs" / "vision"
    lab_dir.mkdir(parents=True)
    os.chmod(site.base / "labs", 0o755)
    shutil.chown(lab_dir, site.lead, site.lab_group)
    os.chmod(lab_dir, 0o2770)
    lab_db = lab_dir / "vision.db"
    env = {"HPCMEM_LAB_STORES": f"vision={lab_db}"}

    created = site.hpcmem(site.lead, "db", "upgrade", "--scope", "lab:vision", env=env)
    assert created.returncode == 0, created.stderr
    st = lab_db.stat()
    assert stat.S_IMODE(st.st_mode) == 0o660
    assert st.st_gid == lab_dir.stat().st_gid  # inherited from the setgid directory

    # alice (group member) writes through hpcmem and reads with sqlite3; the lead sees it.
    recorded = site.hpcmem(site.alice, "record", "--error", "srun: error: Unable to allocate resources: Invalid qos",
                           "--cause", "the lab's QOS was renamed", "--fix", "use --qos=vision-normal",
                           "--source", "human", "--scope", "lab:vision", env=env)
    assert recorded.returncode == 0, recorded.stderr
    assert site.sqlite(site.alice, lab_db, "SELECT fix FROM lessons").stdout.strip() == "use --qos=vision-normal"
    assert site.sqlite(site.lead, lab_db, "SELECT count(*) FROM lessons").stdout.strip() == "1"
    written = site.sqlite(site.lead, lab_db, "UPDATE lessons SET status = 'validated'; SELECT status FROM lessons;")
    assert written.stdout.strip() == "validated", written.stderr
    # Files SQLite or hpcmem created on the way stay in the lab group and out of reach of others.
    for path in lab_dir.iterdir():
        assert path.stat().st_gid == st.st_gid, path
        assert not stat.S_IMODE(path.stat().st_mode) & 0o007, path

    # bob (not in the group) can neither read nor write it, with sqlite3 or hpcmem.
    denied = site.sqlite(site.bob, lab_db, "SELECT fix FROM lessons")
    assert denied.returncode != 0 and "unable to open database" in denied.stderr
    recall = site.hpcmem(site.bob, "recall", "srun: error: Unable to allocate resources: Invalid qos", "--json", env=env)
    assert "vision-normal" not in recall.stdout
    # a lab store bob may not read is skipped with a warning; his own recall still answers
    assert recall.returncode == 1, recall.stderr
    assert any("vision" in w and "permission denied" in w for w in json.loads(recall.stdout)["warnings"])


def test_permission_errors_map_to_permission_denied(tmp_path: Path):
    """The mapping the CLI can use for OS and SQLite refusals (no root needed)."""
    error = PermissionError(13, "Permission denied", "/srv/labs/vision/vision.db")
    denied = as_permission_denied(error)
    assert isinstance(denied, PermissionDenied)
    assert str(denied) == "permission denied: /srv/labs/vision/vision.db"
    assert "another user" not in denied.hint  # the refused file may be an input, not a store
    readonly = tmp_path / "ro.db"
    sqlite3.connect(readonly).execute("CREATE TABLE t (x)").connection.commit()
    conn = sqlite3.connect(f"file:{readonly}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as info:
        conn.execute("INSERT INTO t VALUES (1)")
    assert str(as_permission_denied(info.value)) == "the store is read-only for you: attempt to write a readonly database"
    assert as_permission_denied(sqlite3.OperationalError("no such table: x")) is None


def _mcp_session_as(site: Site, user: str, env: dict[str, str], body):
    """An MCP client session with `hpcmem mcp` running as ``user`` (runuser), as an agent of that user would."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    settings = {"HPCMEM_HOME": str(site.home(user)), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", **env}
    params = StdioServerParameters(
        command="runuser",
        args=["-u", user, "--", "env", *(f"{k}={v}" for k, v in settings.items()), site.python, "-c", RUNNER, "mcp"],
        cwd=str(site.base))

    async def run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return asyncio.run(run())


def test_mcp_server_has_exactly_its_users_rights(site: Site):
    """The server runs as the user: a lab store it may not write is a one-line tool error, and
    lessons it may not read never appear; a member of the lab sees them."""
    lab_dir = site.base / "labs" / "vision"
    lab_dir.mkdir(parents=True)
    os.chmod(site.base / "labs", 0o755)
    shutil.chown(lab_dir, site.lead, site.lab_group)
    os.chmod(lab_dir, 0o2770)
    env = {"HPCMEM_LAB_STORES": f"vision={lab_dir / 'vision.db'}"}
    assert site.hpcmem(site.lead, "db", "upgrade", "--scope", "lab:vision", env=env).returncode == 0
    error = "srun: error: Unable to allocate resources: Invalid qos specification"

    async def alice(session):
        made = await session.call_tool("record", {"error": error, "cause": "the lab's QOS was renamed",
                                                  "fix": "use --qos=vision-normal", "scope": "lab:vision"})
        assert not made.is_error, made.content
        found = await session.call_tool("recall", {"error": error})
        return [m["fix"] for m in found.structured_content["matches"]]

    assert "use --qos=vision-normal" in _mcp_session_as(site, site.alice, env, alice)

    async def bob(session):
        refused = await session.call_tool("record", {"error": error, "cause": "c", "fix": "f", "scope": "lab:vision"})
        found = await session.call_tool("recall", {"error": error})
        return refused, found

    refused, found = _mcp_session_as(site, site.bob, env, bob)
    assert refused.is_error
    message = refused.content[0].text
    assert "\n" not in message and "ermission denied" in message, message
    assert not found.is_error  # bob's own store still answers, with a warning about the lab store
    assert "vision-normal" not in json.dumps(found.structured_content)
    assert any("vision" in w for w in found.structured_content["warnings"])


# --------------------------------------------------------------------------- the epilog spool


def _spool_event(site: Site, spool: Path, job: str, user: str, group: str) -> None:
    """The compute node's Epilog, as root, for ``user``'s recorded failed job ``job``."""
    from hpcmem.ingest.epilog import parse_env_file

    samples = REPO / "data" / "samples" / "epilog"
    env = parse_env_file((samples / f"{job}.epilog.env").read_text())
    entry = pwd.getpwnam(user)
    env.update(SLURM_JOB_UID=str(entry.pw_uid), SLURM_JOB_GID=str(entry.pw_gid), SLURM_JOB_USER=user,
               PATH="/usr/bin:/bin")
    done = _run([sys.executable, "-I", "-m", "hpcmem.ingest.epilog", "--spool", str(spool), "--group", group,
                 "--scontrol-file", str(samples / f"{job}.epilog.scontrol"), "--verbose"], env=env)
    assert done.returncode == 0 and "new/" in done.stderr, done.stderr


def test_documented_spool_drains_as_the_ingest_account_and_as_the_user_in_any_order(site: Site):
    """docs/site-epilog.md's layout with real accounts: the ingest account (in the spool's
    group) drains every user's events; the user's own drain and recall's automatic drain
    are never locked out by it; an unlistable spool is exit 2, never a silent 0."""
    ingest, user, group = site.lead, site.bob, site.lab_group  # bob is not in the group
    spool = site.base / "spool"
    # the documented command: install -d -o root -g hpcmem -m 0751 /var/spool/hpcmem
    assert _run(["install", "-d", "-o", "root", "-g", group, "-m", "0751", str(spool)]).returncode == 0

    def drain(account: str, *extra: str) -> subprocess.CompletedProcess:
        return site.hpcmem(account, "ingest", "spool", "--spool", str(spool), "--json", "--no-learn", *extra)

    _spool_event(site, spool, "3", user, group)
    first = drain(ingest)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["ingested"] == 1
    lock = spool / user / ".drain.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o644

    _spool_event(site, spool, "4", user, group)
    own = drain(user, "--user", user)  # the user's own drain after the ingest account's
    assert own.returncode == 0, own.stderr
    assert (json.loads(own.stdout)["ingested"], json.loads(own.stdout)["busy"]) == (1, 0)

    _spool_event(site, spool, "7", user, group)
    recalled = site.hpcmem(user, "recall", "--json", "--job", "7", env={"HPCMEM_SPOOL": str(spool)})
    assert recalled.returncode in (0, 1), recalled.stderr  # drained at recall, so the job is known
    assert json.loads(recalled.stdout)["query"]["job_id"] == "7"

    _spool_event(site, spool, "1", user, group)  # the other order: the user first, then the timer
    assert json.loads(drain(user, "--user", user).stdout)["ingested"] == 1
    after = drain(ingest)
    assert after.returncode == 0 and json.loads(after.stdout)["ingested"] == 0, after.stderr
    assert not list((spool / user / "new").iterdir())

    os.chmod(spool, 0o711)  # the layout of earlier docs: the ingest account cannot list it
    _spool_event(site, spool, "5", user, group)
    refused = drain(ingest)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[0] == (f"Error: cannot list spool {spool}: permission denied (the draining "
                                              "account needs read and search permission on it)")
    assert "Traceback" not in refused.stderr
