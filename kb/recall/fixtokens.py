"""Fix-deciding tokens: the names and versions in an error that a lesson's fix may depend on.

Two instances of one failure often differ in a command (``python``/``python3``), a path or
a minor version; two different failures often differ only in one name (``libcudnn.so.8``
vs ``libcudnn.so.9``, ``No module named 'torch'`` vs ``'pandas'``). Recall therefore compares
these tokens as whole tokens with their versions parsed, and asks whether the lesson's fix
mentions what differs:

- a lesson whose fix is ``module load cuda/11.8`` depends on the CUDA major version of
  ``libcudart.so.11.0``, so a ``libcudart.so.12`` failure *conflicts* with it;
- a lesson whose fix is "run ``module spider NAME`` and load a version that exists" does
  not mention the module it was recorded for, so another unknown module does not conflict.

A conflict is evidence for the scorer (``kb/recall/scoring.py``) and is spelled out to the user
("differs"); it is never a silent veto.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

# kind -> regex with groups (name, version). Order matters only for readability.
_PATTERNS = (
    ("soname", r"(?<![\w+.-])(lib[\w+-]*?|ld-linux[\w-]*)\.so((?:\.\d+)*)(?![\w.])"),
    ("symbol_version", r"\b([A-Z][A-Z]+)_(\d+(?:\.\d+)+)\b"),
    ("module", r"(?<![\w/.:@<-])([A-Za-z][\w.+-]*)/(\d[\w.+-]*)(?![\w/])"),
    ("cuda_arch", r"\b(sm|compute)_(\d+)[a-z]?\b"),
    ("python_module", r"No module named ['\"]?([\w]+)(?:\.[\w.]+)?['\"]?()"),
    ("command", r"(?:^|\s)([\w.+-]+): command not found()"),
    ("header", r"\b([\w+-]+)\.(?:h|hh|hpp|cuh)\b()"),
    ("partition", r"invalid partition specified: (\S+)()"),
    ("host_compiler", r"\b(gcc|clang|icc|msvc) versions? later than (\d+(?:\.\d+)*)"),
    ("exception", r"^\s*(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception))\b()"),
    # A QOS or association limit (Slurm's reason code): the limit decides the fix, not whether
    # a QOS or the association set it (AssocMaxSubmitJobLimit = QOSMaxSubmitJobPerUserLimit).
    ("slurm_limit", r"\b(?:QOS|Assoc)((?:Max|Grp|Min)[A-Za-z]*?)(?:Per(?:User|Account|Job|Node))?(?:Limit)?\b()"),
    ("slurm_verdict", r"\bDUE TO (TIME LIMIT|NODE FAILURE|PREEMPTION|JOB NOT ENDING WITH SIGNALS)\b()"),
    ("missing_key", r"\bKeyError: ['\"]([^'\"]+)['\"]()"),
    ("jvm_memory", r"OutOfMemoryError: (Java heap space|Metaspace|GC overhead limit exceeded|Direct buffer memory|"
                   r"unable to create (?:new )?native thread|Compressed class space|Requested array size)()"),
)
_NUMBER = re.compile(r"\d+")
# Kinds whose values name different failures outright: Slurm's verdict on why a job ended, the
# QOS or association limit a job hit, the JVM memory area that ran out. A different value
# matters whatever the fix says.
ALWAYS_MATTERS = frozenset({"slurm_verdict", "slurm_limit", "jvm_memory"})
_VERSION_IN_TEXT = re.compile(r"(?<![\w.])(\d+)(?:\.(\d+))?(?:\.\d+)*")


@dataclass(frozen=True)
class FixToken:
    kind: str
    name: str  # lower-case, without a "lib" prefix for sonames
    version: tuple[int, ...]
    text: str  # as written

    @property
    def major(self) -> int | None:
        return self.version[0] if self.version else None


@lru_cache(maxsize=1)
def _compiled() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((kind, re.compile(p, re.MULTILINE)) for kind, p in _PATTERNS)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in _NUMBER.findall(text)[:4])


@lru_cache(maxsize=4096)
def fix_tokens(template: str) -> tuple[FixToken, ...]:
    """The fix-deciding tokens of a template (or any text), in order of appearance."""
    found: dict[tuple[str, str, tuple[int, ...]], FixToken] = {}
    for kind, regex in _compiled():
        for m in regex.finditer(template):
            name, version = m.group(1), m.group(2) or ""
            if kind == "symbol_version" and name in ("SIZE", "NUM", "PATH"):
                continue
            key_name = name.lower()
            if kind == "soname" and key_name.startswith("lib"):
                key_name = key_name[3:]
            token = FixToken(kind, key_name, _version(version), m.group(0).strip())
            found.setdefault((kind, key_name, token.version), token)
    return tuple(found.values())


@dataclass(frozen=True)
class Difference:
    query: str
    lesson: str
    kind: str  # "version" | "minor_version" | "name"
    matters: bool  # the lesson's fix names what differs
    gap: float = 0.0  # versions only: log(1 + distance at the first component that differs)

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "lesson": self.lesson, "kind": self.kind, "matters": self.matters}


@dataclass(frozen=True)
class Comparison:
    agree: int
    differences: tuple[Difference, ...]

    @property
    def conflicts_that_matter(self) -> int:
        return sum(1 for d in self.differences if d.matters)

    @property
    def conflicts_that_do_not(self) -> int:
        return sum(1 for d in self.differences if not d.matters)

    @property
    def version_conflicts(self) -> int:
        """Same library/symbol/module, another version, where the fix does not name it
        (GLIBCXX_3.4.29 vs 3.4.32 under a fix that says "load a newer gcc")."""
        return sum(1 for d in self.differences if not d.matters and d.kind != "name")

    @property
    def version_gap(self) -> float:
        """How far apart the most distant differing version is (0 when none differs):
        GLIBCXX_3.4.22 is nearer 3.4.20 (log 3) than 3.4.31 (log 10); the further apart
        two versions are, the less likely one fix serves both."""
        return max((d.gap for d in self.differences if not d.matters and d.kind != "name"), default=0.0)

    @property
    def name_conflicts(self) -> int:
        """Another library/module/exception of the same kind, where the fix does not name it."""
        return sum(1 for d in self.differences if not d.matters and d.kind == "name")


def fix_text(fix: str, actions: Iterable[dict[str, Any]] = ()) -> str:
    """The lesson's fix and actions as one lower-case text to look names up in."""
    parts = [fix or ""]
    for action in actions or ():
        parts += [str(v) for k, v in action.items() if k != "type" and v is not None]
    return " ".join(parts).lower()


def _mentions_name(token: FixToken, text: str) -> bool:
    return len(token.name) >= 2 and re.search(rf"(?<![a-z0-9]){re.escape(token.name)}", text) is not None


def _mentions_exact(token: FixToken, text: str) -> bool:
    version = ".".join(str(n) for n in token.version)
    return token.text.lower() in text or (len(token.version) > 1 and re.search(
        rf"(?<![\w.]){re.escape(version)}(?![\w]|\.\d)", text) is not None)


def _mentions_version(token: FixToken, text: str) -> bool:
    """The fix names this token or a version with its major number (cuda/11.8 for .so.11.0)."""
    if token.text.lower() in text:
        return True
    if token.major is None:
        return False
    return any(int(m.group(1)) == token.major and (m.group(2) is not None or len(token.version) == 1)
               for m in _VERSION_IN_TEXT.finditer(text))


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Equal, or one a prefix of the other: libcudart.so.11 and libcudart.so.11.0."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _gap(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """log(1 + |a_i - b_i|) at the first component i where two parsed versions differ."""
    for x, y in zip(a, b):
        if x != y:
            return math.log1p(abs(x - y))
    return 0.0


def compare(query: tuple[FixToken, ...], lesson: tuple[FixToken, ...], fix: str) -> Comparison:
    """How the query's fix-deciding tokens agree or conflict with a lesson's."""
    agree, differences = 0, []
    query_kinds = {t.kind for t in query}
    for lt in lesson:
        if lt.kind not in query_kinds:
            continue  # the query says nothing about this kind: no evidence either way
        same_name = [qt for qt in query if qt.kind == lt.kind and qt.name == lt.name]
        if any(_compatible(qt.version, lt.version) for qt in same_name):
            # An exception class is evidence of its own words (the lexical overlap) and, like
            # a different one, is not counted as a fix-deciding token here.
            agree += lt.kind != "exception"
            continue
        if same_name:
            qt = same_name[0]
            major_differs = qt.major != lt.major
            kind = "version" if major_differs or len(lt.version) < 2 else "minor_version"
            if lt.kind == "symbol_version":  # GLIBCXX_3.4.29 vs 3.4.30: all share major 3
                kind = "version" if qt.version[:2] != lt.version[:2] else "minor_version"
            # A minor difference matters only when the fix names the exact version
            # (GLIBCXX_3.4.29 -> gcc 11); a major one also when it names the major (cuda/11.8).
            matters = _mentions_exact(lt, fix) if kind == "minor_version" else _mentions_version(lt, fix)
            differences.append(Difference(qt.text, lt.text, kind, matters, _gap(qt.version, lt.version)))
        elif lt.kind != "exception":
            qt = next(t for t in query if t.kind == lt.kind)
            # Another library/module/package: it matters when the fix names the lesson's one or
            # its version (``module load cuda/11.8`` is about libcudart.so.11.0, not libcudnn.so.9).
            matters = lt.kind in ALWAYS_MATTERS or _mentions_name(lt, fix) or _mentions_version(lt, fix)
            differences.append(Difference(qt.text, lt.text, "name", matters))
    return Comparison(agree, tuple(differences))
