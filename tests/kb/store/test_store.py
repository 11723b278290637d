"""Opening stores: creation modes, journal modes, locking, refusals."""

from __future__ import annotations

import multiprocessing as mp
import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from hpcmem.kb.errors import StoreError, UnsafeStoreError
from hpcmem.kb.store.fsinfo import filesystem_type, safe_journal_mode
from hpcmem.kb.store.schema_version import SCHEMA_HEAD
from hpcmem.kb.store.database import Store, normalize_url, redact_url


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_user_store_is_created_private_and_at_head(tmp_path: Path):
    path = tmp_path / "new" / "user.db"
    store = Store(str(path)).open()
    assert store.revision() == SCHEMA_HEAD
    assert mode(path.parent) == 0o700
    assert mode(path) == 0o600
    assert store.journal_mode == "WAL"
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_lab_store_is_group_shared(tmp_path: Path):
    path = tmp_path / "lab" / "vision.db"
    Store(str(path), name="vision", scope="lab").open()
    assert mode(path.parent) == 0o2770
    assert mode(path) == 0o660


def test_refuses_a_user_store_others_can_read(tmp_path: Path):
    path = tmp_path / "u" / "user.db"
    Store(str(path)).open().dispose()
    os.chmod(path, 0o644)
    with pytest.raises(UnsafeStoreError, match="accessible to other users") as info:
        Store(str(path)).open()
    assert "chmod 600" in info.value.hint
    os.chmod(path, 0o600)
    os.chmod(path.parent, 0o755)
    with pytest.raises(UnsafeStoreError, match="mode 0755"):
        Store(str(path)).open()


def test_journal_mode_follows_the_filesystem(tmp_path: Path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw 0 0\n"
        "nas:/export/labs /shared/labs nfs4 rw,vers=4.2 0 0\n"
        "10.0.0.1@o2ib:/scratch /lustre/scratch lustre rw,flock 0 0\n"
        "/dev/vdb /shared/labs/local\\040disk xfs rw 0 0\n"
    )
    assert filesystem_type("/shared/labs/vision/store.db", str(mounts)) == "nfs4"
    assert safe_journal_mode("/shared/labs/vision", str(mounts)) == "DELETE"
    assert safe_journal_mode("/lustre/scratch/lab", str(mounts)) == "DELETE"
    assert safe_journal_mode("/home/alice", str(mounts)) == "WAL"
    assert filesystem_type("/shared/labs/local disk/x", str(mounts)) == "xfs"
    assert filesystem_type("/shared/labsX/y", str(mounts)) == "ext4"  # prefix must end at a path separator


def test_configured_journal_mode_wins(tmp_path: Path):
    store = Store(str(tmp_path / "l" / "lab.db"), scope="lab", journal_mode="delete").open()
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "delete"


def _open_in_child(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        store = Store(path).open()
        results.put(("ok", store.revision()))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        results.put(("error", repr(exc)))


def test_concurrent_first_open_migrates_once(tmp_path: Path):
    path = str(tmp_path / "race" / "user.db")
    ctx = mp.get_context("spawn")
    n = 4
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_open_in_child, args=(path, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == [("ok", SCHEMA_HEAD)] * n
    with Store(path).open().engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1


def test_refuses_a_store_newer_than_this_hpcmem(store_factory):
    store = store_factory().open()
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError, match="newer than this hpcmem"):
        store.open()


def test_unreachable_postgres_is_a_clear_store_error():
    store = Store("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(StoreError, match="cannot reach store 'user'"):
        store.open()
    info = store.info()
    assert not info.reachable and "Connection refused" in info.error


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:////x/y.db", "sqlite:////x/y.db"),
    ],
)
def test_normalize_url(raw: str, expected: str):
    assert normalize_url(raw) == expected


def test_plain_path_becomes_absolute_sqlite(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert normalize_url("rel/a.db") == f"sqlite:///{tmp_path / 'rel' / 'a.db'}"


def test_passwords_never_shown():
    assert "s3cret" not in redact_url("postgresql+psycopg://lab:s3cret@db/hpcmem")
    with pytest.raises(StoreError) as info:
        Store("postgresql://lab:s3cret@127.0.0.1:1/x").open()
    assert "s3cret" not in str(info.value)
