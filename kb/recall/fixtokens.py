"""Fix-deciding tokens: the names and versions in an error that a lesson's fix may depend on.

Two instances of one failure often differ in a command (``python``/``python3``), a path or
a minor version; two different failures often differ only in one name (``libcudnn.so.8``
vs ``libcudnn.so.9``, ``No module named 'torch'`` vs ``'pandas'``). Recall therefore compares
these tokens as whole tokens with their versions parsed, and asks whether the lesson's fix
mentions what differs:

- a lesson whose fix is ``module load cuda/11.8`` depends on the CUDA major version of
  ``libcudart.so.11.0``, so a ``libcudart.so.12`` failure *conflicts* with it;
- a lesson whose fix is "run ``module spider NAME`` and load a version that exists" does
  not mention the module it was recorded for, so another unknown module does not conflict;
- a lesson recorded for ``unknown module cuda/12.1`` whose fix loads ``cuda/12.4`` *replaces*
  the version that failed: another failing version (``cuda/10.2``) is served by the same fix,
  and so is another module the fix offers a version of (``gcc/13.1.0`` for ``gcc/11.2.0``);
  the version the fix loads failing too is a conflict (the context corpus's calibration part).

Some differences name another failure outright, whatever the fix says. Decided per kind of
token (issue 26, item 3; tests: tests/kb/recall/test_fixtokens.py):

- **Slurm's verdict, a QOS/association limit, the JVM memory area** (``slurm_verdict``,
  ``slurm_limit``, ``jvm_memory``): each value is its own failure.
- **errno words** (``errno``: ``No such file or directory``, ``Permission denied``, ``Exec format
  error``...). The vocabulary is the C library's own: ``os.strerror`` of every code in
  ``errno.errorcode`` (glibc's wording on the Linux hosts recall runs on), not a list of
  examples. An errno is the kernel's verdict on why a call failed; the same call failing with
  another errno failed for another reason (a missing file is not a denied one), so when the
  two messages share no errno the difference matters. Messages that share an errno do not
  conflict over another one either names. An errno in another language (``No existe el
  fichero o el directorio``) is not read, and is no evidence either way.
- **library families** (``soname``). A library's family is its soname stem up to the first
  ``_``, without ``lib`` and version: ``libcudnn_ops_infer.so.8`` is cuDNN's, and is compared
  with ``libcudnn.so.8`` as one library (by version). ``libcuda`` (the driver), ``libcudart``
  (the toolkit's runtime) and ``libnvidia-ml`` are three families, not three versions. When
  the two messages name no family in common they are about different libraries: another
  library is missing or broken and its fix installs or loads something else, so the
  difference matters. Siblings that one package ships under different stems (``libssl`` and
  ``libcrypto``, ``libmpi`` and ``libopen-pal``) count as different libraries too: the text
  cannot tell a package's libraries apart from another package's. When the messages share a
  family (``libstdc++.so.6 ... (required by libfoo.so)`` against ``(required by libbar.so)``),
  the other names differ as before: they matter when the fix names them.
- **symbol-version families** (``symbol_version``: ``GLIBC_``, ``GLIBCXX_``, ``CXXABI_``...). A
  family is the set of versions one library defines: messages with no family in common are
  about different libraries, and the difference matters, unless they also name a library
  family in common (``libstdc++.so.6`` defines both ``GLIBCXX_`` and ``CXXABI_``): then, as
  before, it matters when the fix names it. Versions within one family are compared as before.
- **a message's own phrase** (``phrase``). Where a line ends ``<head>: <phrase>`` (``Failed to
  initialize NVML: Driver/library version mismatch``, ``CUDA error: out of memory``, ``Batch job
  submission failed: Requested node configuration is not available``), the head says who
  speaks and the phrase what went wrong. Two messages that end on the same head with
  different phrases are the same emitter reporting another failure: the difference matters.
  The split is at the last ``: `` outside brackets; the head is the last sentence before it,
  bracketed asides such as ``[rank3]`` left out, of two to six words (a dotted name such as
  ``java.lang.OutOfMemoryError`` is one word). A one-word head is a program (``srun``), a
  severity (``error``) or an exception class, which print many messages, in many wordings for
  one cause: on the validation collection, comparing after one-word heads cost as many right
  answers as it removed wrong ones (docs/benchmarks.md, "Recall quality"). The phrase is the
  first sentence after the split, compared on its plain words: lower-case or capitalised
  words outside quotes, brackets and masked values (2 to 12 of them). Identifiers, acronyms, numbers and quoted
  names (``Atomtype HB``, ``'torch'``, a partition) are not plain words: they are left to their
  own kinds, whose rules (the fix names them, or not) stand. Phrases differ when they share
  fewer plain words than they do not and neither's words contain the other's (one may be cut
  short). A phrase that differs where a token of another kind differs (an errno, a JVM memory
  area) is that token's difference, reported and judged once; a phrase with errno words is
  compared as an errno.

- **where a library was found** (``location_differences``, on the masked excerpts): the same
  library in an environment's copy (``<conda env>/lib/libstdc++.so.6``) and elsewhere
  (``/lib64/libstdc++.so.6``) needs the fix at another copy, so the difference matters; with no
  path printed there is no evidence (the calibration part's conda/system ``GLIBCXX_`` classes).

The names, versions and modules of the other kinds matter only when the fix mentions them.
Agreement on an errno or a phrase is not counted as agreement (``Comparison.agree``): those
are words the lexical evidence already weighs, and one errno is shared by many failures.
Differences of the new kinds are reported as ``"kind": "name"`` (``differs`` in recall's JSON).

A conflict is evidence for the scorer (``kb/recall/scoring.py``) and is spelled out to the user
("differs"); it is never a silent veto: a lesson that would match but for a conflict that
matters is shown as *related*.
"""

from __future__ import annotations

import errno
import math
import os
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
# QOS or association limit a job hit, the JVM memory area that ran out, the errno a call failed
# with (when the messages share none), the phrase after a shared head. A different value
# matters whatever the fix says.
ALWAYS_MATTERS = frozenset({"slurm_verdict", "slurm_limit", "jvm_memory", "errno", "phrase"})
# Kinds compared as families (module docstring): messages that share no family are about
# different libraries (or, for errno, fail for different reasons).
_FAMILY_KINDS = ("soname", "symbol_version", "errno")
# Words and kinds that are evidence of their own words (the lexical overlap), not agreement.
_NOT_AGREEMENT = frozenset({"exception", "errno", "phrase"})
_VERSION_IN_TEXT = re.compile(r"(?<![\w.])(\d+)(?:\.(\d+))?(?:\.\d+)*")


@dataclass(frozen=True)
class FixToken:
    kind: str
    name: str  # lower-case, without a "lib" prefix for sonames; a phrase's head
    version: tuple[int, ...]
    text: str  # as written
    words: frozenset[str] = frozenset()  # a phrase's plain words

    @property
    def major(self) -> int | None:
        return self.version[0] if self.version else None

    @property
    def family(self) -> str:
        """The library (or errno) a token is about: a soname's stem up to the first ``_``."""
        return self.name.split("_", 1)[0] if self.kind == "soname" else self.name


@lru_cache(maxsize=1)
def _compiled() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((kind, re.compile(p, re.MULTILINE)) for kind, p in _PATTERNS)


@lru_cache(maxsize=1)
def _errno_vocabulary() -> tuple[str, ...]:
    """Every errno's words as the C library writes them (``os.strerror``), lower-case, longest
    first so that ``no such device or address`` is not read as ``no such device``."""
    phrases = {os.strerror(code).lower() for code in errno.errorcode}
    return tuple(sorted((p for p in phrases if not p.startswith("unknown error")), key=lambda p: (-len(p), p)))


def _errno_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` names an errno, as whole words (plain substring search: a regex of some 130
    phrases would cost recall's fast path its compile time)."""
    low, spans = text.lower(), []
    for phrase in _errno_vocabulary():
        start = low.find(phrase)
        while start != -1:
            end = start + len(phrase)
            whole = (start == 0 or not (low[start - 1].isalnum() or low[start - 1] in "_-")) and \
                (end == len(low) or not (low[end].isalnum() or low[end] in "_-"))
            if whole and not any(a < end and start < b for a, b in spans):
                spans.append((start, end))
            start = low.find(phrase, start + 1)
    return sorted(spans)


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
    for start, end in _errno_spans(template):
        words = template[start:end]
        found.setdefault(("errno", words.lower(), ()), FixToken("errno", words.lower(), (), words))
    phrase = _phrase(template)
    if phrase is not None:
        found[("phrase", phrase.name, ())] = phrase
    return tuple(found.values())


# ----------------------------------------------------------------------------- a message's phrase

_PLACEHOLDER = re.compile(r"<[A-Z_]+>")
# quoted text: 'x', "x", `x' or `x`, ‘x’, “x” (not the apostrophes of can't ... doesn't)
_QUOTED = re.compile(r"(?<!\w)'[^'\n]*'(?!\w)|\"[^\"\n]*\"|`[^`'\n]*[`']|‘[^’\n]*’|“[^”\n]*”")
_HEAD_WORD = re.compile(r"[A-Za-z0-9][\w+-]*(?:\.[\w+-]+)*")  # java.lang.OutOfMemoryError is one word
_PLAIN = re.compile(r"[A-Za-z][a-z]+")  # lower-case or capitalised: not an identifier or an acronym
_OPEN, _CLOSE = "([{", ")]}"


def _segments(line: str) -> list[str]:
    """``line`` split at each ``: `` (or `` : ``) outside brackets: ``a: b (c: d): e`` -> a, b (c: d), e."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(line):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif ch == ":" and depth == 0 and line[i + 1:i + 2] == " ":
            parts.append(line[start:i])
            start = i + 2
    parts.append(line[start:])
    return [p.strip() for p in parts]


_BRACKETED = re.compile(r"\[[^\]]*\]|\([^)]*\)|\{[^}]*\}")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
# A head names a message (``CUDA error``, ``Failed to initialize NVML``, ``Unable to create step
# for job``): a few words, and more than one: one word is a program (srun, wandb), a severity
# (error, FATAL) or an exception class, which print many messages, in many wordings for one
# cause. A phrase says what went wrong in a clause, not a paragraph.
_HEAD_WORDS, _PHRASE_WORDS = (2, 6), 12


def _clause(text: str, last: bool) -> str:
    """``text`` without bracketed asides ([rank3], (errno = 11, ...)), masked values and quoted
    text: its last sentence (a head) or its first (a phrase)."""
    text = _BRACKETED.sub(" ", _QUOTED.sub(" ", _PLACEHOLDER.sub(" ", text)))
    sentences = [x for x in _SENTENCE_END.split(text.strip()) if x.strip()]
    return (sentences[-1] if last else sentences[0]) if sentences else ""


def _plain_words(text: str) -> frozenset[str]:
    """Lower-case or capitalised words of two or more letters, outside quotes and masked
    values: identifiers, acronyms, numbers and quoted names are left to their own kinds."""
    text = _QUOTED.sub(" ", _PLACEHOLDER.sub(" ", text))
    return frozenset(w.lower() for w in re.findall(r"(?<![\w.])[A-Za-z][\w.]*", text) if _PLAIN.fullmatch(w))


def _phrase(template: str) -> FixToken | None:
    """The last ``<head>: <phrase>`` of a template's first line, when both say something."""
    line = template.strip().splitlines()[0] if template.strip() else ""
    parts = _segments(line)
    if len(parts) < 2:
        return None
    head = [w.lower() for w in _HEAD_WORD.findall(_clause(parts[-2], last=True))]
    phrase = _clause(parts[-1], last=False).strip(" .!;,")
    phrase_words = _plain_words(phrase)
    if not _HEAD_WORDS[0] <= len(head) <= _HEAD_WORDS[1] or not 2 <= len(phrase_words) <= _PHRASE_WORDS:
        return None
    return FixToken("phrase", " ".join(head), (), " ".join(parts[-1].split()), phrase_words)


def _phrases_differ(a: FixToken, b: FixToken) -> bool:
    """The phrases share fewer plain words than they do not (``unable to flock file`` is
    ``unable to lock file``), and neither's words contain the other's (one may be cut short)."""
    if a.words <= b.words or b.words <= a.words:
        return False
    return len(a.words & b.words) < len(a.words ^ b.words)


# ----------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Difference:
    query: str
    lesson: str
    kind: str  # "version" | "minor_version" | "name" (a library, errno or phrase is a name)
    matters: bool  # the lesson's fix names what differs, or the kind names another failure
    gap: float = 0.0  # versions only: log(1 + distance at the first component that differs)
    # the fix replaces what failed (``module load cuda/12.4`` for an unknown cuda/12.1): another
    # failing version is shown, but is no evidence against the lesson
    replaced: bool = False

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
    def _unnamed(self) -> tuple[Difference, ...]:
        """Differences the fix does not name, and does not replace."""
        return tuple(d for d in self.differences if not d.matters and not d.replaced)

    @property
    def conflicts_that_do_not(self) -> int:
        return len(self._unnamed)

    @property
    def version_conflicts(self) -> int:
        """Same library/symbol/module, another version, where the fix does not name it
        (GLIBCXX_3.4.29 vs 3.4.32 under a fix that says "load a newer gcc")."""
        return sum(1 for d in self._unnamed if d.kind != "name")

    @property
    def version_gap(self) -> float:
        """How far apart the most distant differing version is (0 when none differs):
        GLIBCXX_3.4.22 is nearer 3.4.20 (log 3) than 3.4.31 (log 10); the further apart
        two versions are, the less likely one fix serves both."""
        return max((d.gap for d in self._unnamed if d.kind != "name"), default=0.0)

    @property
    def name_conflicts(self) -> int:
        """Another library/module/exception of the same kind, where the fix does not name it."""
        return sum(1 for d in self._unnamed if d.kind == "name")


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


def _families(tokens: tuple[FixToken, ...], kind: str) -> frozenset[str]:
    return frozenset(t.family for t in tokens if t.kind == kind)


def _apart(query: tuple[FixToken, ...], lesson: tuple[FixToken, ...]) -> frozenset[str]:
    """The family kinds on which the two messages name something and nothing in common."""
    apart = set()
    for kind in _FAMILY_KINDS:
        q, l = _families(query, kind), _families(lesson, kind)
        if q and l and not q & l:
            apart.add(kind)
    # GLIBCXX_ and CXXABI_ are both libstdc++'s: families of one library named by both messages
    if "symbol_version" in apart and _families(query, "soname") & _families(lesson, "soname"):
        apart.discard("symbol_version")
    return frozenset(apart)


def compare(query: tuple[FixToken, ...], lesson: tuple[FixToken, ...], fix: str) -> Comparison:
    """How the query's fix-deciding tokens agree or conflict with a lesson's."""
    agree, differences = 0, []
    query_kinds = {t.kind for t in query}
    apart = _apart(query, lesson)
    phrase = None
    for lt in lesson:
        if lt.kind not in query_kinds:
            continue  # the query says nothing about this kind: no evidence either way
        if lt.kind == "phrase":
            phrase = lt  # judged last, knowing the other differences
            continue
        # one library family is one library (libcudnn_ops_infer is cuDNN's), compared by version
        same_name = [qt for qt in query if qt.kind == lt.kind and qt.family == lt.family]
        if any(_compatible(qt.version, lt.version) for qt in same_name):
            # An exception class or an errno is evidence of its own words (the lexical overlap)
            # and, like a different one, is not counted as a fix-deciding token here.
            agree += lt.kind not in _NOT_AGREEMENT
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
            replaced = lt.kind == "module" and _replaces(lt, fix)
            if replaced:
                # the fix moves off the lesson's version: it serves any other failing version,
                # unless the query failed on the very version the fix loads
                matters = any(_loads(t, fix) and not any(_compatible(t.version, o.version) for o in lesson
                                                         if o.kind == "module" and o.name == t.name)
                              for t in same_name)
            differences.append(Difference(qt.text, lt.text, kind, matters, _gap(qt.version, lt.version),
                                          replaced=replaced and not matters))
        elif lt.kind == "errno" and lt.kind not in apart:
            continue  # the messages share an errno; one names more: no evidence either way
        elif lt.kind != "exception":
            qt = next(t for t in query if t.kind == lt.kind)
            # Another library/module/package: it matters when the fix names the lesson's one or
            # its version (``module load cuda/11.8`` is about libcudart.so.11.0, not libcudnn.so.9),
            # and whatever the fix says when the kind names another failure.
            matters = (lt.kind in ALWAYS_MATTERS or lt.kind in apart or _mentions_name(lt, fix)
                       or _mentions_version(lt, fix))
            replaced = lt.kind == "module" and _replaces(lt, fix) and _replaces(qt, fix)
            if replaced:
                # a fix that offers another version of both modules ("load one that exists: cuda/12.4
                # or gcc/13.1.0") is as much the query's module's fix as the lesson's
                matters = False
            differences.append(Difference(qt.text, lt.text, "name", matters, replaced=replaced))
    if phrase is not None:
        differences += _phrase_difference(query, phrase, differences)
    differences += _fix_about_another_module(query, lesson, fix)
    return Comparison(agree, tuple(differences))


def _fix_modules(fix: str) -> tuple[FixToken, ...]:
    return tuple(t for t in fix_tokens(fix) if t.kind == "module")


def _loads(token: FixToken, fix: str) -> bool:
    """The fix loads this module at a version compatible with the token's."""
    return any(t.name == token.name and _compatible(t.version, token.version) for t in _fix_modules(fix))


def _replaces(token: FixToken, fix: str) -> bool:
    """The fix loads the token's module at another version, never at the token's own: the token
    is what failed (``unknown module cuda/12.1`` -> ``module load cuda/12.4``), not what the
    fix provides (``requires cuda/11.8`` -> ``module load cuda/11.8``)."""
    return (any(t.name == token.name for t in _fix_modules(fix)) and not _loads(token, fix)
            and token.text.lower() not in fix)


def _fix_about_another_module(query: tuple[FixToken, ...], lesson: tuple[FixToken, ...], fix: str) -> list[Difference]:
    """A fix that loads a module the query does not name, where the query names another one
    and the lesson's own text names none (``unknown module "nonexistent"`` fixed with
    ``module load gcc/13.1.0``, asked about ``cuda/13.0``): the fix is about another module."""
    if any(t.kind == "module" for t in lesson):
        return []  # compared token to token above
    asked = [t for t in query if t.kind == "module"]
    if not asked:
        return []
    named = {t.name for t in asked}
    loaded = [t for t in fix_tokens(fix) if t.kind == "module" and t.name not in named]
    if not loaded or any(t.kind == "module" and t.name in named for t in fix_tokens(fix)):
        return []
    return [Difference(asked[0].text, loaded[0].text, "name", True)]


def _overlaps(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return a in b or b in a


def _phrase_difference(query: tuple[FixToken, ...], lt: FixToken, others: list[Difference]) -> list[Difference]:
    """The same head, another phrase: another failure. A phrase that differs where a token of
    another kind differs (an errno, a JVM memory area, a library) is that token's difference,
    reported and judged once, by its own kind."""
    qt = next(t for t in query if t.kind == "phrase")
    if qt.name != lt.name or not _phrases_differ(qt, lt):
        return []
    if _errno_spans(qt.text) or _errno_spans(lt.text):
        # an errno is compared as an errno; against one in another language (``No existe el
        # fichero o el directorio``) or another platform's words, nothing can be told
        return []
    if any(_overlaps(d.query, qt.text) and _overlaps(d.lesson, lt.text) for d in others):
        return []
    return [Difference(qt.text, lt.text, "name", True)]


# ----------------------------------------------------------------------------- where a library was found

_ENVIRONMENT = "<ENV_PATH>"  # kb.signatures.fingerprint.ENV_PATH: a conda env's, a venv's or site-packages


def _location(template: str, excerpt: str, soname: FixToken) -> str | None:
    """Where the loader found a library: in an environment (a conda env or venv's own copy),
    elsewhere (a path that is not an environment's), or None when no path is printed."""
    name = re.escape(soname.text)
    if any(re.search(rf"{_ENVIRONMENT}\S*?{name}", t) for t in (template, excerpt)):
        return "in an environment"
    if re.search(rf"(?:<PATH>|/)\S*?{name}", excerpt):
        return "elsewhere"
    return None


def location_differences(query: tuple[str, str], lesson: tuple[str, str]) -> tuple[Difference, ...]:
    """The same library found in an environment by one failure and elsewhere by the other
    (``<conda env>/lib/libstdc++.so.6`` against ``/lib64/libstdc++.so.6``): the fix goes to
    another copy (update the environment's, or load a newer compiler for the system's), so the
    difference matters. ``query``/``lesson``: (decisive template, masked excerpt)."""
    out = []
    lesson_libraries = {t.family: t for t in fix_tokens(lesson[0]) if t.kind == "soname"}
    for qt in fix_tokens(query[0]):
        lt = lesson_libraries.get(qt.family) if qt.kind == "soname" else None
        if lt is None:
            continue
        where_q, where_l = _location(*query, qt), _location(*lesson, lt)
        if where_q and where_l and where_q != where_l:
            out.append(Difference(f"{qt.text} {where_q}", f"{lt.text} {where_l}", "name", True))
    return tuple(out)

