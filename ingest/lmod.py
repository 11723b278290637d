"""Read what Lmod says is installed: module names, their versions and their defaults.

Four outputs are understood (see data/samples/env/README.md for real examples):

- ``module -t avail`` (terse; Lmod writes it on stderr): ``dir:`` lines, ``name/``
  lines, ``name/version`` lines, ``#    ext/1.0`` extension lines, optional markers
  ``(D)``, ``(default)``, ``(L)``, ``<H>``;
- ``module avail`` (columns under ``---- /path ----`` headers, markers such as
  ``(D)``, ``(L)``, ``(L,D)``, ``(H)``, then a ``Where:`` legend and help text);
- ``$LMOD_DIR/spider -o spider-json $MODULEPATH``: name -> modulefile -> record;
- ``$LMOD_DIR/spider -o jsonSoftwarePage $MODULEPATH``: a list of packages.

Defaults. Lmod loads the *marked* default (``.modulerc``/``.version``/``default``
link) or else the highest version. Only the two spider formats say which one applies:
spider-json marks it with a ``wV`` starting with ``^``, jsonSoftwarePage with
``markedDefault``. ``module avail`` prints ``(D)`` on the implicit default too (our
real tree v1 has no .modulerc and still shows ``gcc/13.1.0 (D)``), so a ``(D)`` counts
as marked only when it is not on the highest version. Lmod 8.6's terse listing prints
no markers at all (real tree v2 marks gcc/12.2.0 and ``-t avail`` does not show it):
its defaults are only a guess, which is why ``live_modules`` prefers spider-json.

Versions are ordered the way Lmod orders them (``lmod_version_key``): numbers compare
as numbers (9 < 10) and ``1.4-dbg`` or ``2.0rc1`` come before ``1.4`` / ``2.0``.
Hidden modules are left out unless ``include_hidden`` is set: users do not see them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from hpcmem.kb.environment.snapshot import ModuleInfo, ModuleSnapshot
from hpcmem.kb.errors import InputError
from hpcmem.kb.environment.lmod_versions import lmod_version_key, sort_versions

__all__ = [
    "ModuleInfo",
    "ModuleSnapshot",
    "lmod_version_key",
    "sort_versions",
    "parse_terse_avail",
    "parse_avail",
    "parse_spider_json",
    "parse_software_page_json",
    "read_modules",
    "live_modules",
]


# ---------------------------------------------------------------------------
# Building a snapshot from (name, version, markers) sightings.


class _Collector:
    """Gathers versions per module and the default each listing points at.

    ``explicit`` defaults come from spider data and are known to be marked; ``shown``
    defaults come from a (D)-style marker that Lmod also prints on implicit defaults.
    """

    def __init__(self) -> None:
        self.versions: dict[str, set[str]] = {}
        self.explicit: dict[str, str] = {}
        self.shown: dict[str, str] = {}

    def add(self, name: str, version: str | None) -> None:
        found = self.versions.setdefault(name, set())
        if version is not None:
            found.add(version)

    def snapshot(self, source: str) -> ModuleSnapshot:
        modules = {}
        for name, found in self.versions.items():
            versions = sort_versions(found)
            default, marked = self._default(name, versions)
            modules[name] = ModuleInfo(name, versions, default, marked)
        return ModuleSnapshot(modules, source)

    def _default(self, name: str, versions: tuple[str, ...]) -> tuple[str | None, bool]:
        if not versions:
            return None, False
        highest = versions[-1]
        if self.explicit.get(name) in versions:
            return self.explicit[name], True
        shown = self.shown.get(name)
        if shown in versions:
            return shown, shown != highest
        return highest, False


_MARKER = re.compile(r"\s*(\([^()]*\)|<[^<>]*>)$")


def _split_markers(entry: str) -> tuple[str, set[str]]:
    """'gcc/12.2.0 (L,D)' -> ('gcc/12.2.0', {'L', 'D'}); also '(default)', '<H>',
    '(default:loaded)'. Markers are compared case-sensitively: 'D' and 'default'."""
    markers: set[str] = set()
    while match := _MARKER.search(entry):
        inner = match.group(1)[1:-1]
        markers.update(m.strip() for m in re.split(r"[,:]", inner) if m.strip())
        entry = entry[: match.start()]
    return entry.strip(), markers


def _is_default(markers: set[str]) -> bool:
    return "D" in markers or "default" in markers


def _is_hidden(markers: set[str]) -> bool:
    return "H" in markers or "hidden" in markers


def _raise_on_lmod_error(text: str) -> None:
    marker = "Lmod has detected the following error"
    at = text.find(marker)
    if at >= 0:
        message = " ".join(text[at:].split())[:300]
        raise InputError(message, hint="check MODULEPATH and that `module avail` works")


def _is_dir_header(stripped: str) -> bool:
    """A terse listing's MODULEPATH directory line, '/apps/modulefiles/Core:'."""
    return stripped.endswith(":") and "/" in stripped and not any(c.isspace() for c in stripped)


def _listing_lines(text: str) -> list[str]:
    """The lines of a listing without Lmod's messages around it.

    Lmod may print a warning ('Lmod Warning: ...') or a notice ending in ':' ('The
    following have been reloaded ...:') before the listing, each followed by indented
    detail lines; a shell that loads modules at login adds such notices too.
    """
    lines = []
    in_message = False
    for line in text.splitlines():
        stripped = line.strip()
        starts_message = line.startswith("Lmod Warning") or (
            stripped
            and not line[0].isspace()
            and stripped.endswith(":")
            and any(c.isspace() for c in stripped)
        )
        if starts_message:
            in_message = True
            continue
        if in_message and line[:1].isspace() and not _is_dir_header(stripped):
            continue
        in_message = False
        lines.append(line)
    return lines


def _split_name(entry: str) -> tuple[str, str | None]:
    # Without a 'name/' line the last '/' separates name and version (junk/a/c/1.0).
    if "/" in entry:
        name, _, version = entry.rpartition("/")
        return name, version
    return entry, None


# ---------------------------------------------------------------------------
# module -t avail


def parse_terse_avail(text: str, include_hidden: bool = False) -> ModuleSnapshot:
    """Read ``module -t avail`` (Lmod prints it on stderr).

    A ``name/`` line names the module of the ``name/version`` lines after it, so
    'junk/a/c/' then 'junk/a/c/1.0' is module 'junk/a/c' version '1.0'. A line without
    '/' is a module without versions ('TACC'). Raises InputError on Lmod's error text
    or on a line that cannot be a module (it contains spaces).
    """
    _raise_on_lmod_error(text)
    collector = _Collector()
    name_prefix = ""
    for line in _listing_lines(text):
        line = line.strip()
        if not line or line.startswith("#"):  # blank, or an extension '#    CC/3.1'
            continue
        if line.endswith(":"):  # a directory of MODULEPATH
            name_prefix = ""
            continue
        entry, markers = _split_markers(line)
        if not entry or any(c.isspace() for c in entry):
            raise InputError(f"not a line of `module -t avail`: {line[:80]!r}")
        if entry.endswith("/"):
            name_prefix = entry
            continue
        if _is_hidden(markers) and not include_hidden:
            continue
        if name_prefix and entry.startswith(name_prefix):
            name, version = name_prefix[:-1], entry[len(name_prefix) :]
        else:
            name_prefix = ""
            name, version = _split_name(entry)
        collector.add(name, version)
        if version is not None and _is_default(markers):
            collector.shown[name] = version
    return collector.snapshot("terse-avail")


# ---------------------------------------------------------------------------
# module avail

_DASH_HEADER = re.compile(r"^-+\s+(.*?)\s+-+$")


def parse_avail(text: str, include_hidden: bool = False) -> ModuleSnapshot:
    """Read the column layout of ``module avail``.

    Module entries are the indented lines under a modulepath header (``---- /path
    ----``, or a bare path as in Lmod's own test output). Aliases (``a -> b``), the
    'Global Aliases' and extension sections, the ``Where:`` legend and the help text
    are skipped. Raises InputError on Lmod's error text.
    """
    _raise_on_lmod_error(text)
    collector = _Collector()
    in_modules = False
    for line in _listing_lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        header = _DASH_HEADER.match(stripped)
        if header:
            in_modules = "Aliases" not in header.group(1)
            continue
        if not line[0].isspace():
            # An unindented path is a header in Lmod's plain (no dashes) style; any
            # other unindented text (help, extension notice) ends the module section.
            in_modules = "/" in stripped and not any(c.isspace() for c in stripped)
            continue
        if stripped == "Where:":
            in_modules = False
            continue
        if in_modules:
            for entry, markers in _avail_entries(stripped):
                if _is_hidden(markers) and not include_hidden:
                    continue
                name, version = _split_name(entry)
                collector.add(name, version)
                if version is not None and _is_default(markers):
                    collector.shown[name] = version
    return collector.snapshot("avail")


def _avail_entries(line: str) -> list[tuple[str, set[str]]]:
    """The (entry, markers) pairs on one line of columns. A marker may sit several
    spaces after its entry because Lmod aligns the marker column."""
    entries: list[tuple[str, set[str]]] = []
    # 'name -> target (markers)' is an alias, not a modulefile: drop all of it.
    alias_part = None  # None, then 'target', then 'markers'
    for token in line.split():
        is_marker = (token[0] == "(" and token[-1] == ")") or (token[0] == "<" and token[-1] == ">")
        if token == "->":
            if entries:
                entries.pop()
            alias_part = "target"
            continue
        if alias_part == "target":
            alias_part = "markers"
            continue
        if alias_part == "markers" and is_marker:
            continue
        alias_part = None
        if is_marker:
            if entries:
                entries[-1][1].update(_split_markers(token)[1])
        else:
            entries.append(_split_markers(token))  # also 'gcc/9.4(default)'
    return entries


# ---------------------------------------------------------------------------
# spider -o spider-json / -o jsonSoftwarePage


def _load_json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not {what} JSON: {exc}") from exc


def _version_of(name: str, full_name: str) -> str | None:
    if full_name == name:
        return None
    if full_name.startswith(name + "/"):
        return full_name[len(name) + 1 :]
    return _split_name(full_name)[1]


def parse_spider_json(text: str, include_hidden: bool = False) -> ModuleSnapshot:
    """Read ``spider -o spider-json``: {name: {modulefile: {fullName, wV, hidden, ...}}}.

    The version comes from ``fullName`` (``Version`` can come from the modulefile's
    own text). A module reachable under several parents (hierarchy, ``parentAA``) is
    one module; its versions are merged. A ``wV`` starting with '^' marks the default.
    """
    data = _load_json(text, "spider-json")
    if not isinstance(data, dict):
        raise InputError("not spider-json output: expected a JSON object of module names")
    collector = _Collector()
    for name, records in data.items():
        if not isinstance(records, dict):
            raise InputError(f"spider-json entry {name!r} is not an object of modulefiles")
        for path, record in records.items():
            full_name = record.get("fullName") if isinstance(record, dict) else None
            if not isinstance(full_name, str):
                raise InputError(f"spider-json record {path!r} has no fullName")
            if record.get("hidden") is True and not include_hidden:
                continue
            version = _version_of(name, full_name)
            collector.add(name, version)
            if version is not None and str(record.get("wV", "")).startswith("^"):
                collector.explicit[name] = version
    return collector.snapshot("spider-json")


def parse_software_page_json(text: str, include_hidden: bool = False) -> ModuleSnapshot:
    """Read ``spider -o jsonSoftwarePage``: [{package, defaultVersionName,
    versions: [{full, versionName, markedDefault, hidden?}]}]."""
    data = _load_json(text, "jsonSoftwarePage")
    if not isinstance(data, list):
        raise InputError("not jsonSoftwarePage output: expected a JSON list of packages")
    collector = _Collector()
    for package in data:
        if not isinstance(package, dict) or not isinstance(package.get("package"), str):
            raise InputError("jsonSoftwarePage entry without a package name")
        name = package["package"]
        by_version_name: dict[str, str] = {}
        for record in package.get("versions", []):
            full_name = record.get("full") if isinstance(record, dict) else None
            if not isinstance(full_name, str):
                raise InputError(f"jsonSoftwarePage version of {name!r} has no 'full' name")
            if record.get("hidden") is True and not include_hidden:
                continue
            version = _version_of(name, full_name)
            collector.add(name, version)
            if version is None:
                continue
            by_version_name.setdefault(str(record.get("versionName", version)), version)
            if record.get("markedDefault") is True:
                collector.explicit[name] = version
        # defaultVersionName is a versionName (modulefile text), not always the path's
        # version: map it back through the versions listed above.
        shown = by_version_name.get(str(package.get("defaultVersionName")))
        if shown is not None:
            collector.shown[name] = shown
        elif name not in collector.versions:
            collector.add(name, None)
    return collector.snapshot("software-page")


# ---------------------------------------------------------------------------
# Sniffing and running Lmod


def read_modules(text: str, include_hidden: bool = False, allow_empty: bool = False) -> ModuleSnapshot:
    """Read any of the four formats, recognised by their shape: a JSON object is
    spider-json, a JSON list jsonSoftwarePage; text with ``----`` headers is ``module
    avail``, text with ``/dir:`` lines ``module -t avail``, otherwise indented entries
    mean ``module avail`` and plain lines ``module -t avail``. Empty input, or a
    listing without any module, raises InputError unless ``allow_empty``: an empty
    capture is more likely a failed one than an empty site, and would read as
    "everything was removed"."""
    empty_hint = "capture `module -t avail 2>&1`; if the site really has none, pass --allow-empty"
    if not text.strip():
        if allow_empty:
            return ModuleSnapshot({}, "empty")
        raise InputError("empty module listing", hint=empty_hint)
    snapshot = _parser_for(text)(text, include_hidden)
    if not snapshot and not allow_empty:
        raise InputError(f"no modules in the {snapshot.source} listing", hint=empty_hint)
    return snapshot


def _parser_for(text: str) -> Callable[[str, bool], ModuleSnapshot]:
    first = text.lstrip()[0]
    if first == "{":
        return parse_spider_json
    if first == "[":
        return parse_software_page_json
    lines = [line for line in _listing_lines(text) if line.strip()]
    if any(_DASH_HEADER.match(line.strip()) for line in lines):
        return parse_avail
    if any(_is_dir_header(line.strip()) for line in lines):
        return parse_terse_avail
    if any(line[0].isspace() for line in lines):
        return parse_avail
    return parse_terse_avail


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    from hpcmem.ingest.commands import run_command

    return run_command(argv, timeout)


def _failed(what: str, proc: subprocess.CompletedProcess) -> InputError:
    message = (proc.stderr or proc.stdout or "").strip().splitlines()
    detail = message[-1] if message else "no message"
    return InputError(
        f"{what} failed (exit {proc.returncode}): {detail}",
        hint="run on a node where `module avail` works, or read a saved capture",
    )


def live_modules(timeout: float = 300.0, include_hidden: bool = False) -> ModuleSnapshot:
    """Ask this machine's Lmod what is installed.

    Tries, in order: ``$LMOD_DIR/spider -o spider-json $MODULEPATH`` (sees marked
    defaults), ``$LMOD_CMD bash -t avail`` (listing on stderr), and ``bash -lc 'module
    -t avail'`` (a login shell defines ``module``). Raises InputError when none works.
    """
    env = os.environ
    lmod_dir, lmod_cmd = env.get("LMOD_DIR", ""), env.get("LMOD_CMD", "")
    modulepath = env.get("MODULEPATH", "")
    spider = os.path.join(lmod_dir, "spider") if lmod_dir else ""
    if spider and modulepath and os.access(spider, os.X_OK):
        proc = _run([spider, "-o", "spider-json", modulepath], timeout)
        if proc.returncode != 0:
            raise _failed("spider -o spider-json", proc)
        return parse_spider_json(proc.stdout, include_hidden)
    if lmod_cmd and os.access(lmod_cmd, os.X_OK):
        proc = _run([lmod_cmd, "bash", "-t", "avail"], timeout)
        if proc.returncode != 0:
            raise _failed("lmod -t avail", proc)
        return read_modules(proc.stderr, include_hidden)
    bash = shutil.which("bash")
    if bash is None:
        raise InputError(
            "Lmod not found: LMOD_DIR and LMOD_CMD are not set and there is no bash",
            hint="run on a login node where `module avail` works, or read a saved capture",
        )
    proc = _run([bash, "-lc", "module -t avail"], timeout)
    if proc.returncode != 0 or "command not found" in proc.stderr:
        raise InputError(
            "Lmod not found: LMOD_DIR and LMOD_CMD are not set and a login shell has "
            "no `module` command",
            hint="run on a login node where `module avail` works, or read a saved capture",
        )
    return read_modules(proc.stderr, include_hidden)
