"""Layered configuration: each merge rule with a low and a high scope."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcmem.kb.config import load_config, merge
from hpcmem.kb.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_merge_tables_recursively_scalars_and_arrays_replace():
    low = {"stores": {"labs": {"a": {"url": "x"}}, "user": {"url": "u1"}}, "l": [1, 2]}
    high = {"stores": {"labs": {"b": {"url": "y"}}, "user": {"url": "u2"}}, "l": [3]}
    merged = merge(low, high)
    assert merged == {"stores": {"labs": {"a": {"url": "x"}, "b": {"url": "y"}}, "user": {"url": "u2"}}, "l": [3]}
    assert low["stores"]["user"]["url"] == "u1"  # inputs untouched


def test_builtin_user_store_lives_under_hpcmem_home(hpcmem_home: Path):
    cfg = load_config()
    assert cfg.get("stores.user.url") == f"sqlite:///{hpcmem_home / 'data' / 'user.db'}"
    assert cfg.get("index.dir") == str(hpcmem_home / "cache" / "index")
    assert dict((k, o) for k, _, o in cfg.flat())["stores.user.url"] == "builtin"


def test_scope_precedence_site_user_file_env_cli(tmp_path: Path, hpcmem_home: Path, monkeypatch):
    site = write(tmp_path / "site.toml", '[cluster]\nname = "site"\n[stores.labs.vision]\nurl = "sqlite:////srv/vision.db"\n[epilog]\nbudget_seconds = 3\n')
    write(hpcmem_home / "config" / "config.toml", '[cluster]\nname = "user"\n[stores.labs.nlp]\nurl = "sqlite:////srv/nlp.db"\n')
    extra = write(tmp_path / "extra.toml", '[cluster]\nname = "file"\n')
    monkeypatch.setenv("HPCMEM_SITE_CONFIG", str(site))
    monkeypatch.delenv("HPCMEM_DISABLE_LOCAL_CONFIG")

    cfg = load_config()
    assert cfg.get("cluster.name") == "user"
    assert set(cfg.get("stores.labs")) == {"vision", "nlp"}  # user adds a lab, keeps the site's
    origins = {k: o for k, _, o in cfg.flat()}
    assert origins["epilog.budget_seconds"].startswith("site:")
    assert origins["stores.labs.nlp.url"].startswith("user:")

    monkeypatch.setenv("HPCMEM_CONFIG", str(extra))
    assert load_config().get("cluster.name") == "file"
    monkeypatch.setenv("HPCMEM_CLUSTER", "env")
    assert load_config().get("cluster.name") == "env"
    cfg = load_config(cli_overrides={"cluster": {"name": "cli"}})
    assert cfg.get("cluster.name") == "cli"
    assert {k: o for k, _, o in cfg.flat()}["cluster.name"] == "cli"


def test_disable_local_config_ignores_site_and_user(tmp_path: Path, hpcmem_home: Path, monkeypatch):
    site = write(tmp_path / "site.toml", '[cluster]\nname = "site"\n')
    monkeypatch.setenv("HPCMEM_SITE_CONFIG", str(site))
    assert load_config().get("cluster.name") != "site"  # conftest sets HPCMEM_DISABLE_LOCAL_CONFIG=1


def test_env_lab_stores_and_numbers(monkeypatch):
    monkeypatch.setenv("HPCMEM_LAB_STORES", "vision=sqlite:////a.db, nlp=postgresql://h/db")
    monkeypatch.setenv("HPCMEM_EPILOG_BUDGET", "0.5")
    cfg = load_config()
    assert cfg.get("stores.labs.vision.url") == "sqlite:////a.db"
    assert cfg.get("stores.labs.nlp.url") == "postgresql://h/db"
    assert cfg.get("epilog.budget_seconds") == 0.5


@pytest.mark.parametrize(
    "text, message",
    [
        ("[stores.user]\nurll = 'x'\n", "unknown key 'stores.user.urll'"),
        ("[epilog]\nbudget_seconds = 'fast'\n", "'epilog.budget_seconds' must be a number"),
        ("[cluster\nname='x'", "invalid TOML"),
        ("stores = 3\n", "'stores' must be a table"),
        ("[stores.labs.vision]\nleads = 'lena'\n", "'stores.labs.vision.leads' must be a list of user names"),
        ("[stores.labs.vision]\nleads = ['lena', '']\n", "'stores.labs.vision.leads' must be a list of user names"),
    ],
)
def test_invalid_files_name_file_and_key(tmp_path: Path, monkeypatch, text: str, message: str):
    bad = write(tmp_path / "bad.toml", text)
    monkeypatch.setenv("HPCMEM_CONFIG", str(bad))
    with pytest.raises(ConfigError) as info:
        load_config()
    assert str(bad) in str(info.value) and message in str(info.value)


@pytest.mark.parametrize("value", ["vision", "=x", "vision="])
def test_bad_lab_env_is_a_config_error(monkeypatch, value: str):
    monkeypatch.setenv("HPCMEM_LAB_STORES", value)
    with pytest.raises(ConfigError, match="HPCMEM_LAB_STORES"):
        load_config()


def test_a_labs_leads_reach_its_store(tmp_path: Path, monkeypatch):
    """Issue 34, item 4: a SQLite lab store cannot tell its leads; its configuration names them."""
    from hpcmem.kb.store.stack import StoreStack

    monkeypatch.setenv("HPCMEM_CONFIG", str(write(tmp_path / "site.toml", '[stores.labs.vision]\nleads = ["lena", "maria"]\n')))
    monkeypatch.setenv("HPCMEM_LAB_STORES", f"vision=sqlite:///{tmp_path / 'vision.db'},nlp=sqlite:///{tmp_path / 'nlp.db'}")
    stack = StoreStack.from_config(load_config())
    assert {lab.name: lab.leads for lab in stack.labs} == {"vision": ("lena", "maria"), "nlp": ()}


def test_missing_explicit_config_file(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("HPCMEM_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()


def test_cluster_name_comes_from_slurm_conf_when_not_configured(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("# Slurm 22.05\nSlurmctldHost=localhost\nclustername=della  # the site's name\nNodeName=x\n")
    base = {"HPCMEM_HOME": str(tmp_path / "h"), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", "SLURM_CONF": str(conf)}
    config = load_config(environ=base)
    assert config.get("cluster.name") == "della"
    assert config.origins["cluster.name"] == f"slurm:{conf}" and config.warnings == []

    configured = load_config(environ={**base, "HPCMEM_CLUSTER": "tiger"})
    assert configured.get("cluster.name") == "tiger"
    assert configured.warnings == [f"cluster.name is 'tiger' (env) but Slurm's ClusterName is 'della' ({conf}): "
                                   "lessons and job records will not line up"]
    assert load_config(environ={**base, "SLURM_CLUSTER_NAME": "della"}).warnings == []  # inside a job

    without = load_config(environ={**base, "SLURM_CONF": str(tmp_path / "missing.conf")})
    assert without.get("cluster.name") == "local" and without.warnings == []


def test_recall_reports_a_cluster_name_slurm_disagrees_with(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=della\n")
    env = {**os.environ, "HPCMEM_HOME": str(tmp_path / "h"), "HPCMEM_DISABLE_LOCAL_CONFIG": "1",
           "SLURM_CONF": str(conf), "HPCMEM_CLUSTER": "tiger"}
    hpcmem = str(Path(sys.executable).with_name("hpcmem"))
    result = subprocess.run([hpcmem, "recall", "--json", "--no-model", "some error"], env=env, capture_output=True,
                            text=True)
    doc = json.loads(result.stdout)
    assert doc["query"]["cluster"] == "tiger"
    assert any("Slurm's ClusterName is 'della'" in w for w in doc["warnings"])


def test_match_probability_is_a_probability_and_the_old_key_says_what_replaced_it(tmp_path: Path, hpcmem_home: Path):
    good = write(tmp_path / "good.toml", "[recall]\nmatch_probability = 0.6\n")
    assert load_config(config_file=str(good)).get("recall.match_probability") == 0.6
    assert load_config().get("recall.match_probability") is None  # unset: the fitted threshold
    for value in ("0", "1.5", "-0.2"):
        bad = write(tmp_path / "bad.toml", f"[recall]\nmatch_probability = {value}\n")
        with pytest.raises(ConfigError, match="'recall.match_probability' must be a probability"):
            load_config(config_file=str(bad))
    old = write(tmp_path / "old.toml", "[recall]\nabstain_below = 0.75\n")
    with pytest.raises(ConfigError, match="'recall.abstain_below' is no longer read; use recall.match_probability"):
        load_config(config_file=str(old))
