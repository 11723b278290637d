"""Failure signatures: normalise an error message to a template, name its failure class,
and hash both into a fingerprint that stays the same across instances of one failure.

    normalize(text)          -> template (variable parts replaced by <NUM>, <PATH>, ...)
    categorize(text)         -> failure class, from the data-driven rules in categories.toml
    signature_text(text)     -> the text a failure is fingerprinted from: normalised, then redacted
    fingerprint(text)        -> FailureSignature(fingerprint, template, category)
    signature_of_block(text) -> Signature of a whole excerpt (traceback, .err file): it picks
                                the decisive line so unrelated output does not change it
    load_rules(extra_path)   -> the built-in rules plus a site's own file

Masking removes what varies between two instances of the same failure (ids, nodes, paths,
numbers, sizes, times, addresses) and keeps what decides the fix (exception classes, errno
names, library sonames, symbol versions, module/version names, CUDA architectures, and the
tokens a rule marks with ``keep``, such as a missing command or Python module).

Only the standard library is imported here; the rules file is read lazily on first use.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from hpcmem.kb.errors import ConfigError
from hpcmem.kb.signatures.rules_digest import site_rules_path

__all__ = [
    "FailureSignature",
    "Rule",
    "UNKNOWN",
    "signature_text",
    "normalize",
    "categorize",
    "fingerprint",
    "signature_of_block",
    "load_rules",
]

UNKNOWN = "unknown"
BUILTIN_RULES = os.path.join(os.path.dirname(__file__), "categories.toml")
FINGERPRINT_CHARS = 16
# Bump when decisive-line or masking logic changes in a way patterns don't show. 3: record,
# recall, feedback and refingerprint fingerprint signature_text(text) (normalised, then
# redacted), where they fingerprinted the redacted raw text.
FINGERPRINT_VERSION = 3


@dataclass(frozen=True)
class FailureSignature:
    fingerprint: str
    template: str
    category: str


@dataclass(frozen=True)
class Rule:
    """One failure class detector, as read from a rules file (see categories.toml)."""

    name: str
    category: str
    description: str
    patterns: tuple[re.Pattern[str], ...]
    priority: int = 0
    pick: str = "first"
    keep: tuple[re.Pattern[str], ...] = ()
    mask: tuple[re.Pattern[str], ...] = ()
    template: str | None = None
    generic: bool = False
    root_cause_before: bool = False
    skip: tuple[re.Pattern[str], ...] = ()
    # Per pattern: a literal every match must contain (and whether it is case-folded),
    # checked with a fast substring test before the regex runs on a long excerpt.
    needles: tuple[tuple[str, bool] | None, ...] = ()


# --------------------------------------------------------------------------- rules


def load_rules(extra_path: str | None = None) -> tuple[Rule, ...]:
    """The rules in precedence order: built-in ones plus those of ``extra_path``.

    A site rule with the same name as a built-in one replaces it. Rules are sorted by
    ``priority`` (higher first); ties keep file order with site rules ahead of built-ins.
    The result is cached per path, so regexes are compiled once.
    """
    return _load_rules(str(extra_path) if extra_path is not None else None)


@lru_cache(maxsize=8)
def _load_rules(extra_path: str | None) -> tuple[Rule, ...]:
    builtin = _read_rules_file(BUILTIN_RULES)
    site = _read_rules_file(extra_path) if extra_path else []
    site_names = {rule.name for rule in site}
    merged = site + [rule for rule in builtin if rule.name not in site_names]
    # sorted() is stable, so equal priorities keep the order built above.
    return tuple(sorted(merged, key=lambda rule: -rule.priority))


def _read_rules_file(path: str) -> list[Rule]:
    import tomllib  # imported here: only needed the first time rules are used

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read rules file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"rules file {path} is not valid TOML: {exc}") from exc
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        raise ConfigError(f"rules file {path}: 'rule' must be an array of tables ([[rule]])")
    rules, seen = [], set()
    for index, entry in enumerate(entries, start=1):
        rule = _parse_rule(entry, f"{path}, rule #{index}")
        if rule.name in seen:
            raise ConfigError(f"rules file {path}: rule name {rule.name!r} is used twice")
        seen.add(rule.name)
        rules.append(rule)
    return rules


def _parse_rule(entry: object, where: str) -> Rule:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a table")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: 'name' (a non-empty string) is required")
    where = f"{where} ({name})"
    patterns = _compile_all(entry.get("patterns"), where, "patterns")
    if not patterns:
        raise ConfigError(f"{where}: 'patterns' needs at least one regex")
    pick = entry.get("pick", "first")
    if pick not in ("first", "last", "highest"):
        raise ConfigError(f"{where}: 'pick' must be \"first\", \"last\" or \"highest\", not {pick!r}")
    if pick == "highest" and not all("version" in regex.groupindex for regex in patterns):
        raise ConfigError(f"{where}: pick = \"highest\" needs a (?P<version>...) group in every pattern")
    priority = entry.get("priority", 0)
    if not isinstance(priority, int):
        raise ConfigError(f"{where}: 'priority' must be an integer")
    mask = _compile_all(entry.get("mask", []), where, "mask")
    for flag in ("generic", "root_cause_before"):
        if not isinstance(entry.get(flag, False), bool):
            raise ConfigError(f"{where}: '{flag}' must be true or false")
    for regex in mask:
        if len(regex.groupindex) != 1:
            raise ConfigError(f"{where}: mask regex {regex.pattern!r} needs one named group")
    template = entry.get("template")
    if template is not None:
        if not isinstance(template, str):
            raise ConfigError(f"{where}: 'template' must be a string")
        try:
            template.format_map(_Groups())
        except (ValueError, IndexError) as exc:
            raise ConfigError(f"{where}: bad template {template!r}: {exc}") from exc
    return Rule(
        name=name,
        category=str(entry.get("category", name)),
        description=str(entry.get("description", "")),
        patterns=patterns,
        needles=tuple(_required_literal(regex.pattern) for regex in patterns),
        priority=priority,
        pick=pick,
        keep=_compile_all(entry.get("keep", []), where, "keep"),
        mask=mask,
        template=template,
        generic=entry.get("generic", False),
        root_cause_before=entry.get("root_cause_before", False),
        skip=_compile_all(entry.get("skip", []), where, "skip"),
    )


def _compile_all(values: object, where: str, field: str) -> tuple[re.Pattern[str], ...]:
    if values is None:
        return ()
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where}: '{field}' must be a list of regex strings")
    compiled = []
    for value in values:
        try:
            # MULTILINE so ^/$ mean line boundaries when a whole excerpt is searched.
            compiled.append(re.compile(value, re.MULTILINE))
        except re.error as exc:
            raise ConfigError(f"{where}: bad regex in '{field}' {value!r}: {exc}") from exc
    return tuple(compiled)


def _required_literal(pattern: str) -> tuple[str, bool] | None:
    """The longest literal text that every match of ``pattern`` contains, or None.

    Conservative: only characters outside groups and classes count, a quantified
    character is dropped, and a top-level alternation gives up.
    """
    ignorecase = False
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if flags:
        if "x" in flags.group(1):
            return None  # verbose patterns: spaces are not literal
        ignorecase = "i" in flags.group(1)
        pattern = pattern[flags.end() :]
    if re.search(r"\\[xuUN0-9]", pattern):
        return None  # character escapes and backreferences: not worth decoding here
    runs, run, depth, i = [], "", 0, 0
    try:
        while i < len(pattern):
            ch = pattern[i]
            if ch == "\\" and not pattern[i + 1].isalnum():
                char, i = pattern[i + 1], i + 2  # escaped punctuation is a literal
            elif ch in "*?+{":
                # the quantifier applies to the run's last character: optional ones go
                minimum = re.match(r"\{(\d*)", pattern[i:]) if ch == "{" else None
                if ch in "*?" or (minimum and int(minimum.group(1) or 0) == 0):
                    run = run[:-1]
                runs.append(run)
                run = ""
                i = pattern.index("}", i) + 1 if ch == "{" else i + 1
                continue
            elif ch == "|" and depth == 0:
                return None
            elif ch == "[":
                end = i + 1 + (pattern[i + 1] == "^")
                end = pattern.index("]", end + (pattern[end] == "]")) + 1
                runs.append(run)
                run, i = "", end
                continue
            elif ch == "\\" or ch in ".^$()|":
                depth += (ch == "(") - (ch == ")")
                runs.append(run)
                run, i = "", i + (2 if ch == "\\" else 1)
                continue
            else:
                char, i = ch, i + 1
            if depth == 0:
                run += char
            else:
                runs.append(run)
                run = ""
    except (IndexError, ValueError):
        return None
    runs.append(run)
    best = max(runs, key=len)
    if len(best) < 3:
        return None
    return (best.lower(), True) if ignorecase else (best, False)


class _Groups(dict):
    """Named groups for a rule template; a group the matching pattern lacks is empty."""

    def __missing__(self, key: str) -> str:
        return ""


# --------------------------------------------------------------------------- masking
# Protected tokens are swapped for single private-use characters while masking runs,
# so no masking regex can touch them, and are put back at the end.

_SENTINEL_BASE = 0xF0000


class _Protected:
    def __init__(self) -> None:
        self.values: list[str] = []

    def hide(self, value: str) -> str:
        self.values.append(value)
        return chr(_SENTINEL_BASE + len(self.values) - 1)

    def hide_matches(self, regex: re.Pattern[str], text: str) -> str:
        """Hide every match of ``regex``, or only its named groups when it has some."""

        def replace(match: re.Match[str]) -> str:
            whole = match.group(0)
            spans = [match.span(g) for g in regex.groupindex if match.group(g)]
            if not regex.groupindex:
                return self.hide(whole)
            start0 = match.start()
            for start, end in sorted(spans, reverse=True):
                a, b = start - start0, end - start0
                whole = whole[:a] + self.hide(whole[a:b]) + whole[b:]
            return whole

        return regex.sub(replace, text)

    def restore(self, text: str, sentinel: re.Pattern[str]) -> str:
        return sentinel.sub(lambda m: self.values[ord(m.group(0)) - _SENTINEL_BASE], text)


# Pattern tables are plain strings here and compiled once, on first use (_patterns()),
# so importing this module stays cheap.

# Tokens that decide the fix; never masked, wherever they appear.
_KEEP = (
    # shared library sonames: libcudart.so.11.0, libstdc++.so.6, ld-linux-x86-64.so.2
    r"(?<![\w+.-])[\w+-][\w+.-]*\.so(?:\.\d+)*(?![\w.])",
    # symbol versions: GLIBC_2.29, GLIBCXX_3.4.29, CXXABI_1.3.13, GCC_7.0.0, OMPI_2.0
    r"\b[A-Z][A-Z0-9]*_\d+(?:\.\d+)+\b",
    # module name/version: cuda/11.8, gcc/12.2.0, openmpi/4.1.5-gcc-12 (not inside a path,
    # and not a "host/10.0.0.1" address)
    r"(?<![\w/.:@-])[A-Za-z][\w.+-]*/(?!\d+\.\d+\.\d+\.\d+)\d[\w.+-]*(?![\w/])",
    # CUDA architectures: sm_80, compute_90, sm_90a
    r"\b(?:sm|compute|lto)_\d+[a-z]?\b",
    # exception and error class names, possibly dotted: torch.OutOfMemoryError
    r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning)\b",
    # C/C++/CUDA headers: hdf5.h, cuda_runtime.h
    r"\b[\w+-]+\.(?:h|hh|hpp|hxx|cuh)\b",
    # CPU architectures, instruction sets, numeric types, text encodings
    r"\b(?:x86_64|x86-64|aarch64|arm64|ppc64le|ppc64|i[3-6]86|amd64)\b",
    r"(?i)\b(?:avx512\w*|avx2|sse4[._]?[12]|fma3?)\b",
    r"\b(?:b?float|u?int|complex)(?:8|16|32|64|128)\b",
    # interpreter versions name the environment: python3, python3.11
    r"\bpython\d(?:\.\d+)?\b",
    r"(?i)\butf-?(?:8|16|32)\b",
)

# A path inside a Python or conda environment (conda envs, site-packages, a venv, pyenv,
# pip --user) masks to <ENV_PATH>, any other path to <PATH>: the same loader or import
# message has another cause, and another fix, when the library comes from the user's
# environment rather than from the system or a module tree (an old libstdc++ in a conda
# env is fixed in the env, an old /usr/lib64 one by loading a newer gcc). A conda-bld
# build tree names where a package was compiled, not where it runs: <PATH>.
_ENV_DIR = (
    r"(?i)(?:^|/)(?:envs|site-packages|dist-packages|\.pyenv|\.local/(?:lib/python[\d.]*|bin)|"
    r"[\w.+-]*(?:conda|venv|virtualenv|mamba|miniforge)[\w.+-]*|[\w.+-]+[-_]envs?)/"
)
_BUILD_TREE = r"(?i)\bconda-bld/"
ENV_PATH = "<ENV_PATH>"
# Pieces of one path around a kept token: "<PATH>/" + python3.10 + "<ENV_PATH>/..."
_PATH_CHAIN = r"<(?:ENV_)?PATH>(?:/?[\U000F0000-\U000FFFFD]+<(?:ENV_)?PATH>)+/?"

_URL = r"\b[A-Za-z][\w+.-]*://[^\s'\"<>()\[\]\U000F0000-\U000FFFFD]*"
# Absolute and ~/./.. paths. A protected basename (a soname or header) stops the match,
# so "/opt/x/lib/libstdc++.so.6" becomes "<PATH>/libstdc++.so.6".
_PATH = r"(?<![\w.~/-])(?!\./[\w.+-]+(?![\w.+/-]))(?:~|\.\.?)?/[^\s'\"`‘’:,;()\[\]{}<>|=\U000F0000-\U000FFFFD]+"

# Slurm and cluster contexts, applied in order before the generic rules.
_CONTEXT = (
    (r"\bslurmstepd-[\w.-]+:", "slurmstepd:"),
    (r"\b((?:JobId|StepId|JobID|JobIdRaw|job_id|jobid)[=:]\s*)[\w+\[\]-]+(?:\.\w+)?", r"\1<JOBID>"),
    (r"(?i)\b((?:job|step)s?\s+)\d+(?:_\d+|_\[[\d,-]+\])?(?:\+\d+)?(?:\.\w+)?\b", r"\1<JOBID>"),
    (r"\b(ON )[\w.\[\],-]+( CANCELLED| AT)", r"\1<NODE>\2"),
    (r"\b((?:srun|salloc|sbatch|slurmstepd): error: )[\w.\[\],-]+(: task)", r"\1<NODE>\2"),
    # node lists: d09n08s[01-02], cs[100,101,102]
    (r"\b[A-Za-z][\w.-]*\[[\d,-]+\][\w.-]*", "<NODE>"),
    (r"\b((?:NodeList|NodeName|BatchHost|Node|node)(?:=|:\s+))(?!<)[\w.-]+", r"\1<NODE>"),
    (r"\b([Nn]odes?\s+)(?!<)(?=[\w.-]*\d)[\w.\[\],-]+", r"\1<NODE>"),
    (r"\b((?:Host|host|rhost|hostname)(?:=|:\s+))(?!<)[\w.-]+", r"\1<HOST>"),
    # "[host:pid]" (Open MPI, PMIx, UCX; not "[file.c:123]") and NCCL's "host:pid:tid [gpu]"
    (
        r"\[(?![\w.-]*\.(?:c|cc|cpp|h|py|java|go|rs):)(?=[\w.-]*[A-Za-z])[\w.-]+:\d+(?::\d+)?\]",
        "[<NODE>:<PID>]",
    ),
    (r"^[A-Za-z][\w.-]*:\d+:\d+ (?=\[\d+\])", "<NODE>:<PID>:<PID> "),
    (r"(?i)\b(pid[=: ]\s*)\d+", r"\1<PID>"),
    # user names: "for user alice", "user=alice", "invalid user bob", "UserId=alice(1001)"
    (r"\b((?:[Uu]ser|USER)(?:Id)?(?:=|\s+))(?!<)[\w.-]+(?:\(\d+\))?", r"\1<USER>", "user_names"),
)

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"
_HOST_SUFFIX = (
    "com|org|net|edu|gov|mil|io|local|localdomain|lan|internal|cluster|arpa|info|biz|us|eu|"
    "uk|de|fr|jp|cn|au|ca|ch|nl|se|it|es|kr|ru|br|pl|be|at|dk|fi|no|tw|sg|in|il|nz|za|cz|"
    "ie|pt|gr|hu|mx|ar|cl|hk|ro|ua|tr"
)
_GENERIC = (
    # times and dates: 2021-08-17T15:09:00, 2005-06-03-15.42.50.675872, Sun Jul 10 03:12:31
    (
        r"\b\d{4}-\d{2}-\d{2}(?:[T ]|-(?=\d{2}\.))\d{2}[:.]\d{2}(?:[:.]\d{2}(?:[.,]\d+)?)?"
        r"(?:Z|[+-]\d{2}:?\d{2})?\b",
        "<TIME>",
    ),
    (
        rf"\b(?:{_DAY},?\s+)?{_MONTH}\.?\s+\d{{1,2}}(?:,?\s+\d{{4}})?"
        r"(?:\s+\d{1,2}:\d{2}(?::\d{2})?)?(?:\s+[A-Z]{3})?(?:\s+\d{4})?\b",
        "<TIME>",
    ),
    (r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b", "<TIME>"),
    (r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<TIME>"),
    # identifiers and addresses (an IP and a host name are the same field: <HOST>)
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "<UUID>"),
    (r"\b[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}\b", "<HEX>"),
    (r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\w.])", "<HOST>"),
    (rf"\b(?:[A-Za-z0-9-]+\.)+(?:{_HOST_SUFFIX})\b(?![\w.-])", "<HOST>", "dns_hosts"),
    (r"\b0[xX][0-9a-fA-F]+\b", "<HEX>"),
    # zero-padded fixed-width words are register/address dumps even when all digits
    (r"(?<![\w.])0(?:[0-9a-fA-F]{7}|[0-9a-fA-F]{15})(?![\w.])", "<HEX>", "zero_padded_hex"),
    # PCI addresses: 0000:3b:00.0
    (r"\b(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b", "<HEX>"),
    (r"\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b", "<HEX>"),
    # sizes: 300MB, 44064K, 2.00 GiB, 384.0 B
    (r"(?<![\w.])\d+(?:\.\d+)?\s?(?:[KMGTPE]i?B|[KMGTPE]|[kmgt]B|[KMGT]b|B|bytes?)(?!\w)", "<SIZE>"),
)

# Any remaining word that contains a digit: a number, or an id such as holy8a24101,
# c5-1, attempt_1445_0020, blk_-1608. Device names of a known kind (eth0, ib0, tty2,
# alt0, mlx5) are kept: they name a fixed piece of hardware rather than an instance. Other
# short names with a digit (cn7, gpu3, node12) are node names and are masked.
_TOKEN = r"(?<![A-Za-z0-9_-])-?[A-Za-z0-9_]+(?:[.\-+][A-Za-z0-9_]+)*"
_NUMBER = r"[-+]?\d+(?:[.,]\d+)*"
_DEVICE = r"(?:eth|ib|tty|lo|em|en|wlan|bond|hfi|mlx|qib|sd[a-z]?|nvme|md|dm|alt|cpu|irq|ttyS)\d{1,2}"
# A run of one placeholder ("<ID> <ID> <ID>", "<NUM>, <NUM>") is a list whose length varies.
_PLACEHOLDER_RUN = r"(<[A-Z]+>)(?:[ ,]+\1)+"
# "address (resolved name)": the name is empty when reverse DNS fails, still one field.
_OPTIONAL_VALUE = r"(<HOST>) \((?:<HOST>)?\)"


# Literals every match of a masking pattern contains (any one of them), keyed by the
# pattern's exact text: _mask skips a pattern whose literals are all absent from the text
# (a regex scan costs ~2 us even when nothing matches; most patterns match nothing in a
# given message). A pattern edited later no longer finds its entry here and simply always
# runs. Folded entries (case-insensitive patterns) are checked against the lower-cased
# text, and only for ASCII input: re's IGNORECASE also matches e.g. 'ſ' to 's'.
_NEEDLES: dict[str, tuple[tuple[str, ...], bool]] = {
    # _KEEP
    r"(?<![\w+.-])[\w+-][\w+.-]*\.so(?:\.\d+)*(?![\w.])": ((".so",), False),
    r"\b[A-Z][A-Z0-9]*_\d+(?:\.\d+)+\b": (("_",), False),
    r"(?<![\w/.:@-])[A-Za-z][\w.+-]*/(?!\d+\.\d+\.\d+\.\d+)\d[\w.+-]*(?![\w/])": (("/",), False),
    r"\b(?:sm|compute|lto)_\d+[a-z]?\b": (("_",), False),
    r"\b(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning)\b": (("Error", "Exception", "Warning"), False),
    r"\b[\w+-]+\.(?:h|hh|hpp|hxx|cuh)\b": ((".h", ".cuh"), False),
    r"\b(?:x86_64|x86-64|aarch64|arm64|ppc64le|ppc64|i[3-6]86|amd64)\b": (("64", "86"), False),
    r"(?i)\b(?:avx512\w*|avx2|sse4[._]?[12]|fma3?)\b": (("avx", "sse4", "fma"), True),
    r"\b(?:b?float|u?int|complex)(?:8|16|32|64|128)\b": (("float", "int", "complex"), False),
    r"\bpython\d(?:\.\d+)?\b": (("python",), False),
    r"(?i)\butf-?(?:8|16|32)\b": (("utf",), True),
    # _URL, _PATH
    _URL: (("://",), False),
    _PATH: (("/",), False),
    # _CONTEXT
    r"\bslurmstepd-[\w.-]+:": (("slurmstepd-",), False),
    r"\b((?:JobId|StepId|JobID|JobIdRaw|job_id|jobid)[=:]\s*)[\w+\[\]-]+(?:\.\w+)?":
        (("JobId", "StepId", "JobID", "job_id", "jobid"), False),
    r"(?i)\b((?:job|step)s?\s+)\d+(?:_\d+|_\[[\d,-]+\])?(?:\+\d+)?(?:\.\w+)?\b": (("job", "step"), True),
    r"\b(ON )[\w.\[\],-]+( CANCELLED| AT)": (("ON ",), False),
    r"\b((?:srun|salloc|sbatch|slurmstepd): error: )[\w.\[\],-]+(: task)": ((": task",), False),
    r"\b[A-Za-z][\w.-]*\[[\d,-]+\][\w.-]*": (("[",), False),
    r"\b((?:NodeList|NodeName|BatchHost|Node|node)(?:=|:\s+))(?!<)[\w.-]+": (("ode", "BatchHost"), False),
    r"\b([Nn]odes?\s+)(?!<)(?=[\w.-]*\d)[\w.\[\],-]+": (("ode",), False),
    r"\b((?:Host|host|rhost|hostname)(?:=|:\s+))(?!<)[\w.-]+": (("ost",), False),
    r"\[(?![\w.-]*\.(?:c|cc|cpp|h|py|java|go|rs):)(?=[\w.-]*[A-Za-z])[\w.-]+:\d+(?::\d+)?\]": (("[",), False),
    r"^[A-Za-z][\w.-]*:\d+:\d+ (?=\[\d+\])": (("[",), False),
    r"(?i)\b(pid[=: ]\s*)\d+": (("pid",), True),
    r"\b((?:[Uu]ser|USER)(?:Id)?(?:=|\s+))(?!<)[\w.-]+(?:\(\d+\))?": (("ser", "USER"), False),
    # _GENERIC
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]|-(?=\d{2}\.))\d{2}[:.]\d{2}(?:[:.]\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?\b":
        (("-",), False),
    rf"\b(?:{_DAY},?\s+)?{_MONTH}\.?\s+\d{{1,2}}(?:,?\s+\d{{4}})?"
    r"(?:\s+\d{1,2}:\d{2}(?::\d{2})?)?(?:\s+[A-Z]{3})?(?:\s+\d{4})?\b":
        (("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), False),
    r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b": (("-", "/"), False),
    r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b": ((":",), False),
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b": (("-",), False),
    r"\b[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}\b": ((":",), False),
    r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\w.])": ((".",), False),
    rf"\b(?:[A-Za-z0-9-]+\.)+(?:{_HOST_SUFFIX})\b(?![\w.-])": ((".",), False),
    r"\b0[xX][0-9a-fA-F]+\b": (("0x", "0X"), False),
    r"(?<![\w.])0(?:[0-9a-fA-F]{7}|[0-9a-fA-F]{15})(?![\w.])": (("0",), False),
    r"\b(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b": ((":",), False),
}
_NO_NEEDLES: tuple[tuple[str, ...], bool] = ((), False)


# Generic heuristics that were added after reading misses on the Loghub samples. They are
# named so that bench/grouping.py can fit a subset on half of those sets and report the
# other half; the shipped masker uses all of them.
HEURISTICS = (
    "user_names", "dns_hosts", "zero_padded_hex", "device_names", "placeholder_runs", "empty_resolved_name",
)


class _Compiled:
    """The pattern tables above, compiled (``without``: heuristics left out, for benchmarks)."""

    def __init__(self, without: frozenset[str] = frozenset()) -> None:
        unknown = without - set(HEURISTICS)
        if unknown:
            raise ValueError(f"unknown masking heuristics: {sorted(unknown)}")
        self.without = without
        # (regex, needles, folded): see _NEEDLES
        self.keep = [(re.compile(p), *_NEEDLES.get(p, _NO_NEEDLES)) for p in _KEEP]
        self.url = re.compile(_URL)
        self.path = re.compile(_PATH)
        self.env_dir = re.compile(_ENV_DIR)
        self.build_tree = re.compile(_BUILD_TREE)
        self.path_chain = re.compile(_PATH_CHAIN)
        self.substitutions = [
            (re.compile(entry[0]), entry[1], *_NEEDLES.get(entry[0], _NO_NEEDLES))
            for entry in _CONTEXT + _GENERIC
            if len(entry) < 3 or entry[2] not in without
        ]
        self.token = re.compile(_TOKEN)
        self.number = re.compile(_NUMBER)
        self.device = re.compile(r"(?!)" if "device_names" in without else _DEVICE)
        self.digit = re.compile(r"\d")
        self.spaces = re.compile(r"\s+")
        self.placeholder_run = re.compile(_PLACEHOLDER_RUN)
        self.optional_value = re.compile(_OPTIONAL_VALUE)
        self.sentinel = re.compile("[\U000F0000-\U000FFFFD]")
        self.ansi = re.compile(_ANSI)
        self.errorish = re.compile(_ERRORISH)
        self.rank_prefix = re.compile(_RANK_PREFIX)
        self.banner_noise = re.compile(_BANNER_NOISE)
        self.word = re.compile(r"[^\W_]{2,}")


_WITHOUT: frozenset[str] = frozenset()


@lru_cache(maxsize=4)
def _compiled(without: frozenset[str]) -> _Compiled:
    return _Compiled(without)


def _patterns() -> _Compiled:
    return _compiled(_WITHOUT)


@contextmanager
def heuristics_left_out(names: frozenset[str]) -> Iterator[None]:
    """Mask without the named ``HEURISTICS`` inside the block (benchmarks' ablations)."""
    global _WITHOUT
    _compiled(frozenset(names))  # validates the names before anything changes
    previous, _WITHOUT = _WITHOUT, frozenset(names)
    try:
        yield
    finally:
        _WITHOUT = previous


def _mask(text: str, rule: Rule | None) -> str:
    """The template of one line: variable parts replaced by placeholders."""
    c = _patterns()
    protected = _Protected()
    # the sentinel characters must not occur in the input itself
    text = c.spaces.sub(" ", c.sentinel.sub("", text)).strip()
    if rule is not None:
        for regex in rule.keep:
            text = protected.hide_matches(regex, text)
        for regex in rule.mask:
            placeholder = "<" + next(iter(regex.groupindex)).upper() + ">"
            text = _replace_group(regex, text, protected.hide(placeholder))
    # Only the sentinels (no case mappings) and ASCII placeholders are added below, so an
    # ASCII input keeps the lower-cased needle test exact for case-insensitive patterns.
    ascii_input = text.isascii() and _PREFILTER
    for regex, needles, folded in c.keep:
        if _absent(needles, folded, text, ascii_input):
            continue
        text = protected.hide_matches(regex, text)
    if not _PREFILTER or "://" in text:
        text = c.url.sub(lambda m: protected.hide("<URL>"), text)
    if not _PREFILTER or "/" in text:
        text = c.path.sub(lambda m: _path_placeholder(c, m.group(0)), text)
        if ENV_PATH in text:
            # a kept token inside a path (python3.10 in .../lib/python3.10/site-packages/...)
            # splits it in pieces: the whole path has one kind
            text = c.path_chain.sub(lambda m: m.group(0).replace("<PATH>", ENV_PATH)
                                    if ENV_PATH in m.group(0) else m.group(0), text)
    for regex, replacement, needles, folded in c.substitutions:
        if _absent(needles, folded, text, ascii_input):
            continue
        text = regex.sub(replacement, text)
    text = c.token.sub(lambda m: _mask_token(c, m.group(0)), text)
    if "placeholder_runs" not in c.without:
        text = c.placeholder_run.sub(r"\1", text)
    if "empty_resolved_name" not in c.without:
        text = c.optional_value.sub(r"\1 (<HOST>)", text)
    return protected.restore(text, c.sentinel)


_PREFILTER = True  # tests compare the masker with and without the needle tests


def path_kind(c: "_Compiled", path: str) -> str:
    """``<ENV_PATH>`` for a path inside a Python/conda environment, else ``<PATH>``."""
    if c.env_dir.search(path) and not c.build_tree.search(path):
        return ENV_PATH
    return "<PATH>"


def _path_placeholder(c: "_Compiled", path: str) -> str:
    kind = path_kind(c, path if path.endswith("/") else path + "/")
    return kind + "/" if path.endswith("/") else kind


def _absent(needles: tuple[str, ...], folded: bool, text: str, ascii_input: bool) -> bool:
    """True when no match of the pattern can exist: none of its needles is in ``text``."""
    if not needles or not _PREFILTER:
        return False
    if folded:
        if not ascii_input:
            return False
        text = text.lower()
    for needle in needles:
        if needle in text:
            return False
    return True


def _mask_token(c: _Compiled, token: str) -> str:
    if not c.digit.search(token):
        return token
    if c.number.fullmatch(token):
        return "<NUM>"
    if c.device.fullmatch(token):
        return token
    return "<ID>"


def _replace_group(regex: re.Pattern[str], text: str, replacement: str) -> str:
    """Replace only the (single) named group of each match of ``regex``."""
    name = next(iter(regex.groupindex))

    def sub(match: re.Match[str]) -> str:
        whole, start0 = match.group(0), match.start()
        if match.group(name) is None:
            return whole
        a, b = match.start(name) - start0, match.end(name) - start0
        return whole[:a] + replacement + whole[b:]

    return regex.sub(sub, text)


# --------------------------------------------------------------------------- classification

_ANSI = r"\x1b\[[0-9;?]*[A-Za-z]"
# Fallback decisive line when no rule matches: the last line that sounds like an error.
# Launchers prefix every line of a rank: torchrun "[rank3]: ", "[default0]:", Open MPI
# --tag-output "[1,0]<stderr>:", srun --label "0: ". The prefix is not part of the message.
_RANK_PREFIX = r"^(?:\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d{1,5}: (?=\S))\s*"
# Banner lines around a generic trailer: never the application's own error line.
_BANNER_NOISE = (
    r"(?i)^\s*(?:[-=*_#]{3,}|NOTE: invoking MPI_ABORT|You may or may not see output|exactly when Open MPI|"
    r"MPI_ABORT was invoked|with errorcode|Primary job\s+terminated|Child job \d+ terminated|"
    r"mpirun noticed|Process name:|Exit code:|application called MPI_Abort|[\w.]+ (?:failed|returned|exited)|"
    r"Root Cause|Failures:|<NO_OTHER_FAILURES>|time\s+:|host\s+:|rank\s+:|exitcode\s+:|error_file\s*:|"
    r"traceback\s*:|srun: error: .*(?:task|Exited)|srun: Job step aborted|slurmstepd: error: \*\*\*|\[\w.+-]+:\d+\] \d+ more process|"
    r".*\b\d+ more process(?:es)? ha(?:s|ve) sent help message|.*Set MCA parameter \"?orte_base_help_aggregate)"
)
_ERRORISH = (
    r"(?i)\b(?:error|fatal|fail(?:ed|ure)?|abort(?:ed)?|exception|denied|cannot|can't|unable|"
    r"killed|panic)\b"
)


def _clean(text: str) -> str:
    """Drop terminal colours, per-rank prefixes, and all but the last state of \\r-redrawn lines."""
    c = _patterns()
    text = c.ansi.sub("", text)
    lines = [line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(c.rank_prefix.sub("", line.rstrip()) for line in lines)


# Matching needs a word: two or more letters or digits in a row.
CONTENTLESS = ("the error text has no content to match on (no word of two or more letters or digits; "
               "whitespace, punctuation, terminal codes and redraws do not count): pass the error message itself")


def has_content(text: str) -> bool:
    """False for text with nothing to learn from: empty, or only escape codes, redraws, punctuation."""
    return bool(_patterns().word.search(_clean(text)))


def _line_at(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return text[start : end if end != -1 else len(text)]


def _find(rule: Rule, text: str, folded: str) -> re.Match[str] | None:
    """The deciding match of one rule: its first matching pattern, first or last occurrence."""
    for regex, needle in zip(rule.patterns, rule.needles):
        if needle is not None and needle[0] not in (folded if needle[1] else text):
            continue
        if rule.pick != "first" or rule.skip:
            matches = list(regex.finditer(text))
            kept = [m for m in matches if not any(s.search(_line_at(text, m.start())) for s in rule.skip)]
            matches = kept or matches  # a wrapper alone still decides
            if matches:
                if rule.pick == "highest":
                    return _highest_version(matches)
                return matches[-1] if rule.pick == "last" else matches[0]
        else:
            match = regex.search(text)
            if match is not None:
                return match
    return None


_VERSION_NAME = re.compile(r"^(.*?)[_-]?(\d+(?:\.\d+)*)$")


def _highest_version(matches: list[re.Match[str]]) -> re.Match[str]:
    """The match with the newest ``version`` among those named like the first one: the loader
    lists each symbol version a binary lacks (GLIBCXX_3.4.29, GLIBCXX_3.4.30, CXXABI_1.3.13);
    a runtime that provides the newest GLIBCXX_ one provides them all. First one on ties."""

    def split(match: re.Match[str]) -> tuple[str, tuple[int, ...]]:
        found = _VERSION_NAME.match(match.group("version") or "")
        if found is None:
            return match.group("version") or "", ()
        return found.group(1), tuple(int(n) for n in found.group(2).split("."))

    name = split(matches[0])[0]
    best, best_version = matches[0], split(matches[0])[1]
    for match in matches[1:]:
        other, version = split(match)
        if other == name and version > best_version:
            best, best_version = match, version
    return best


def _root_line_before(text: str, position: int) -> str | None:
    """The application's own last error line before a banner that starts at ``position``."""
    c = _patterns()
    for line in reversed(text[:position].split("\n")[:-1]):
        if line.strip() and c.errorish.search(line) and not c.banner_noise.search(line):
            return line
    return None


def _decide(text: str, rules: tuple[Rule, ...]) -> tuple[Rule | None, re.Match[str] | None, str]:
    """The rule that decides, its match and the decisive line.

    Rules are tried in precedence order and the first specific rule that matches anywhere
    decides. Generic trailers (``generic = true``) decide only when no specific rule
    matches: "MPI_ABORT was invoked" or "Aborted (core dumped)" say that a run ended, not
    why. A trailer with ``root_cause_before`` yields to the application's own last error
    line above it (then the match is None: the rule's template does not apply).
    """
    folded = text.lower()
    trailer = None
    for rule in rules:
        if trailer is not None and rule.generic:
            continue
        match = _find(rule, text, folded)
        if match is None:
            continue
        if not rule.generic:
            return rule, match, _line_at(text, match.start())
        trailer = (rule, match)
    if trailer is not None:
        rule, match = trailer
        root = _root_line_before(text, match.start()) if rule.root_cause_before else None
        if root is not None:
            return rule, None, root
        return rule, match, _line_at(text, match.start())
    # A separator or a launcher's "see all help messages" trailer is never the decisive
    # line while the output has one with words of its own.
    c = _patterns()
    lines = [line for line in text.split("\n") if line.strip()]
    telling = [line for line in lines if c.word.search(line) and not c.banner_noise.search(line)]
    errorish = [line for line in telling if c.errorish.search(line)]
    return None, None, (errorish or telling or lines or [""])[-1]


def _template_source(text: str, rule: Rule | None, match: re.Match[str] | None, line: str) -> str:
    """What the template is made from: the rule's canonical template, unless a group that
    decides the fix (one its ``keep`` patterns name) was not captured - a template without
    the module name would merge every unknown module into one failure. Then the decisive
    line is used, with the next line when it ends in ":" (Lmod wraps the value onto it)."""
    if rule is not None and rule.template is not None and match is not None:
        groups = {k: v for k, v in match.groupdict().items() if v}
        if "dir" in groups:
            # {dir} keeps only the kind of the directory: an environment's, or nothing (a
            # system or module directory, or none printed: one failure either way).
            groups["dir"] = ENV_PATH + "/" if path_kind(_patterns(), groups["dir"]) == ENV_PATH else ""
        deciding = {name for regex in rule.keep for name in regex.groupindex}
        needed = set(re.findall(r"\{(\w+)\}", rule.template)) & deciding
        if needed <= set(groups):
            return rule.template.format_map(_Groups(groups))
    if line.rstrip().endswith(":"):
        rest = text[text.find(line) + len(line):].lstrip("\n").split("\n", 1)[0]
        if rest.strip() and not _patterns().banner_noise.search(rest):
            return f"{line.rstrip()} {rest.strip()}"
    return line


# Masked canonical templates: every instance of a rule with a ``template`` (each OOM kill
# names its own StepId) masks the same string. Keyed by identity, checked on a hit, so a
# rule or masker that was replaced meanwhile is never served a stale result.
_MASKED_TEMPLATES: dict[tuple[str, int], tuple[Rule, _Compiled, str]] = {}


def _mask_template(source: str, rule: Rule) -> str:
    c = _patterns()
    hit = _MASKED_TEMPLATES.get((source, id(rule)))
    if hit is not None and hit[0] is rule and hit[1] is c:
        return hit[2]
    template = _mask(source, rule)
    if len(_MASKED_TEMPLATES) >= 4096:
        _MASKED_TEMPLATES.clear()
    _MASKED_TEMPLATES[(source, id(rule))] = (rule, c, template)
    return template


def _signature(text: str, rules: tuple[Rule, ...] | None) -> FailureSignature:
    rules = load_rules(site_rules_path()) if rules is None else rules  # the site's too
    cleaned = _clean(text)
    rule, match, line = _decide(cleaned, rules)
    source = _template_source(cleaned, rule, match, line)
    if rule is not None and rule.template is not None:
        template = _mask_template(source, rule)
    else:
        template = _mask(source, rule)
    category = rule.category if rule is not None else UNKNOWN
    return FailureSignature(fingerprint=template_fingerprint(category, template), template=template, category=category)


def template_fingerprint(category: str, template: str) -> str:
    """The fingerprint of a failure class and template (an import recomputes it from them)."""
    return hashlib.sha256(f"{category}\n{template}".encode()).hexdigest()[:FINGERPRINT_CHARS]


# --------------------------------------------------------------------------- public API


def signature_text(text: str) -> str:
    """The text a failure is fingerprinted from: escape, control and zero-width characters
    removed and %-escaped secrets decoded (``kb.safety.normalise.normalise``), then redacted.

    Record, recall, feedback and ``db refingerprint`` all fingerprint this, so a query that
    carries colour codes, a zero-width character or a secret computes the fingerprint of
    the clean text it was recorded from, and no secret reaches a template. Carriage returns
    stay: ``_clean`` keeps the last state of a redrawn line (as a lesson's excerpt does).
    Ingested failures are scrubbed before they are fingerprinted (``kb/jobs/write.py``)."""
    from hpcmem.kb.safety.normalise import normalise  # imported here: this module is stdlib-only
    from hpcmem.kb.safety.redact import redact_text

    return redact_text(normalise(text, keep_cr=True))


def fingerprint(text: str, rules: tuple[Rule, ...] | None = None) -> FailureSignature:
    """Signature of one error message (a multi-line text is treated as an excerpt)."""
    return _signature(text, rules)


def signature_of_block(text: str, rules: tuple[Rule, ...] | None = None) -> FailureSignature:
    """Signature of a log excerpt: the decisive line is chosen by rule precedence.

    Slurm's verdict (OOM, time limit) beats what the program printed; a traceback is
    represented by its final exception; with no rule matching, the last error-like line.
    """
    return _signature(text, rules)


def normalize(text: str, rules: tuple[Rule, ...] | None = None) -> str:
    """The template of ``text``: the same string ``fingerprint(text).template`` holds."""
    return _signature(text, rules).template


def categorize(text: str, rules: tuple[Rule, ...] | None = None) -> str:
    """The failure class of ``text`` (``"unknown"`` when no rule matches)."""
    rules = load_rules(site_rules_path()) if rules is None else rules  # the site's too
    rule, _match, _line = _decide(_clean(text), rules)
    return rule.category if rule is not None else UNKNOWN


def _specific_categories(text: str, rules: tuple[Rule, ...]) -> frozenset[str]:
    folded = text.lower()
    return frozenset(r.category for r in rules if not r.generic and _find(r, text, folded) is not None)


def failure_chain(excerpt: str, rules: tuple[Rule, ...] | None = None) -> tuple[frozenset[str], frozenset[str], str]:
    """(every failure class an excerpt reports, the ones reported on lines above its decisive
    line and not by it, the text above the decisive line): the ``module: command not found`` or
    ``module(s) are unknown`` above a missing library. An earlier failure is usually the cause
    of the later one, so two outputs that end on one line but began with different failures
    failed for different reasons."""
    return _failure_chain(excerpt, load_rules(site_rules_path()) if rules is None else rules)


@lru_cache(maxsize=4096)  # keyed by the rules too: a site's rules file may change them
def _failure_chain(excerpt: str, rules: tuple[Rule, ...]) -> tuple[frozenset[str], frozenset[str], str]:
    cleaned = _clean(excerpt)
    _rule, _match, decisive = _decide(cleaned, rules)
    lines = cleaned.split("\n")
    per_line = [_specific_categories(line, rules) if line.strip() else frozenset() for line in lines]
    every = frozenset().union(*per_line)
    at = lines.index(decisive) if decisive in lines else len(lines)
    earlier = frozenset().union(*per_line[:at]) - (per_line[at] if at < len(lines) else frozenset())
    return every, earlier, "\n".join(lines[:at])


EXCERPT_LINES = 40
EXCERPT_LINE_CHARS = 300


def excerpt_template(text: str) -> str:
    """The masked excerpt of an error text: its last non-empty lines, each one templated.

    Recall compares a new failure with the whole excerpt a lesson was recorded from (the
    surrounding output tells two causes behind one trailer apart); masking keeps ids,
    paths and users out of that comparison and out of what a lesson stores.
    """
    lines, previous = [], None
    for line in _clean(text).split("\n"):
        line = line.strip()[:EXCERPT_LINE_CHARS]
        if line and line != previous and _patterns().word.search(line):
            lines.append(line)
        previous = line
    return "\n".join(_mask(line, None) for line in lines[-EXCERPT_LINES:])


_WORDS = re.compile(r"<[A-Z_]+>|[A-Za-z_][A-Za-z0-9_]*(?:[.+-][A-Za-z0-9_]+)*|\d+(?:\.\d+)*")


def words(template: str) -> list[str]:
    """The words of a template, lower-cased, without placeholders: the one tokenizer that
    lexical matching (recall, benchmarks) uses. ``<ENV_PATH>`` counts, as ``env_path``: the
    kind of a path (inside a conda env, venv or site-packages) tells causes apart."""
    return [w.lower().strip("<>") for w in _WORDS.findall(template) if not w.startswith("<") or w == ENV_PATH]
