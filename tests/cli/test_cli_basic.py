"""The CLI skeleton: version, help, stores, config, db, and how errors look."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcmem import __version__
from tests.cli.helpers import run_hpcmem


def test_version():
    result = run_hpcmem("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"hpcmem {__version__}"


def test_help_does_not_import_heavy_libraries():
    code = (
        "import sys\n"
        "from hpcmem.cli.main import app\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'faiss', 'numpy', 'alembic', 'sqlalchemy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_stores_json_shows_the_default_user_store(hpcmem_home: Path):
    fresh = run_hpcmem("stores", "--json")  # only reads: lists the store, creates nothing
    assert fresh.returncode == 0, fresh.stderr
    [new] = json.loads(fresh.stdout)["stores"]
    assert not new["reachable"] and "does not exist yet" in new["error"]
    assert not (hpcmem_home / "data").exists()
    assert run_hpcmem("db", "upgrade").returncode == 0
    result = run_hpcmem("stores", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # nothing but one JSON document on stdout
    [user] = data["stores"]
    assert user["name"] == "user" and user["scope"] == "user"
    assert user["url"] == f"sqlite:///{hpcmem_home / 'data' / 'user.db'}"
    assert user["reachable"] and user["up_to_date"]
    assert (hpcmem_home / "data" / "user.db").exists()


def test_stores_with_a_postgres_lab_store(hpcmem_home: Path, pg_schema, tmp_path: Path):
    url, schema = pg_schema
    cfg = tmp_path / "lab.toml"
    cfg.write_text(f'[stores.labs.vision]\nurl = "{url}"\nschema = "{schema}"\n')
    # The lab store exists and is migrated by its lead; `stores` only probes it.
    assert run_hpcmem("--config", str(cfg), "db", "upgrade", "--scope", "lab:vision").returncode == 0
    result = run_hpcmem("--config", str(cfg), "stores", "--json")
    assert result.returncode == 0, result.stderr
    stores = {s["name"]: s for s in json.loads(result.stdout)["stores"]}
    assert set(stores) == {"user", "vision"}
    assert stores["vision"]["scope"] == "lab"
    assert stores["vision"]["url"].startswith("postgresql+psycopg://")
    assert stores["vision"]["reachable"] and stores["vision"]["up_to_date"]


def test_unreachable_lab_store_is_listed_not_fatal(tmp_path: Path):
    result = run_hpcmem("stores", "--json", env={"HPCMEM_LAB_STORES": "ghost=postgresql://x@127.0.0.1:1/db"})
    assert result.returncode == 0, result.stderr
    ghost = json.loads(result.stdout)["stores"][1]
    assert ghost["name"] == "ghost" and ghost["reachable"] is False and "refused" in ghost["error"]


def test_config_show_reports_origins(tmp_path: Path):
    result = run_hpcmem("config", "show", "--json", env={"HPCMEM_CLUSTER": "della"})
    assert result.returncode == 0
    settings = {s["key"]: s for s in json.loads(result.stdout)["settings"]}
    assert settings["cluster.name"] == {"key": "cluster.name", "value": "della", "origin": "env"}
    assert settings["index.flat_max"]["origin"] == "builtin"


def test_config_show_hides_passwords():
    result = run_hpcmem("config", "show", env={"HPCMEM_CLUSTER_STORE": "postgresql://hpc:hunter2@db/cluster"})
    assert result.returncode == 0
    assert "hunter2" not in result.stdout and "***" in result.stdout


def test_db_current_and_history_json():
    assert run_hpcmem("db", "upgrade").returncode == 0
    current = json.loads(run_hpcmem("db", "current", "--json").stdout)
    assert current["up_to_date"] and current["revision"] == current["head"]
    history = json.loads(run_hpcmem("db", "history", "--json").stdout)
    assert history[-1]["down_revision"] is None and history[0]["revision"] == current["head"]


def test_db_downgrade_needs_yes():
    run_hpcmem("db", "upgrade")
    result = run_hpcmem("db", "downgrade", "base")
    assert result.returncode == 2 and "--yes" in result.stderr
    assert json.loads(run_hpcmem("db", "current", "--json").stdout)["up_to_date"]


@pytest.mark.parametrize(
    "env, args, message",
    [
        ({"HPCMEM_USER_STORE": "postgresql://nobody@127.0.0.1:1/none"}, ["stores"], "Error: cannot reach store 'user'"),
        ({"HPCMEM_LAB_STORES": "broken"}, ["stores"], "Error: HPCMEM_LAB_STORES"),
        ({}, ["db", "current", "--scope", "lab:nope"], "Error: no lab store 'nope'"),
        ({"HPCMEM_USER_STORE": "mysql://x/y"}, ["stores"], "Error: unsupported store backend 'mysql'"),
    ],
)
def test_errors_are_one_line_exit_2_without_traceback(env, args, message):
    result = run_hpcmem(*args, env=env)
    assert result.returncode == 2
    assert result.stderr.startswith(message)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_debug_flag_shows_the_traceback():
    result = run_hpcmem("--debug", "stores", env={"HPCMEM_LAB_STORES": "broken"})
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "Error: HPCMEM_LAB_STORES" in result.stderr


def test_usage_errors_exit_2():
    result = run_hpcmem("db", "frobnicate")
    assert result.returncode == 2


def test_debug_is_accepted_anywhere_before_a_double_dash():
    plain = run_hpcmem("recall", "--job", "nosuch")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    for args in (("--debug", "recall", "--job", "nosuch"), ("recall", "--debug", "--job", "nosuch"),
                 ("recall", "--job", "nosuch", "--debug")):
        result = run_hpcmem(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" in result.stderr and "no stored failure for job nosuch" in result.stderr, args


def test_console_script_epilog_imports_no_cli_framework(tmp_path):
    """`hpcmem epilog` goes straight to the epilog's standard-library entry point."""
    code = ("import runpy, sys; sys.argv = ['hpcmem', 'epilog', '--dry-run']\n"
            "try:\n    runpy.run_path(sys.executable.rsplit('/', 1)[0] + '/hpcmem', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('typer', 'pydantic', 'rich', 'sqlalchemy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"})
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr
