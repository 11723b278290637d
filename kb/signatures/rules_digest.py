"""The fingerprint rules in effect in this process, and a digest of them.

A failure's fingerprint depends on the masking patterns, the decisive-line logic and the
category rules (the built-in ``kb/signatures/categories.toml`` plus a site's own file, config key
``signatures.rules_file``). A store remembers the digest of the rules its fingerprints
were computed under (store_meta ``signatures.rules_digest``); when that differs from
``current_digest()``, its stored fingerprints may no longer equal what this code computes
for the same text and ``hpcmem db refingerprint`` recomputes them.

    use_site_rules(path)  -> set the site rules file of this process (the CLI does, from config)
    site_rules_path()     -> that file, or None
    active_rules()        -> the rules every fingerprint of this process is computed with
    current_digest()      -> sha256 over FINGERPRINT_VERSION, masking pattern sources, rules,
                             the rules files' bytes and the redaction's files; computed once per
                             process and path

Only the standard library is imported here: recall reads the digest on its hot path.
"""

from __future__ import annotations

import hashlib
import os
import re

from hpcmem.kb.errors import ConfigError

DIGEST_KEY = "signatures.rules_digest"  # store_meta key
RULES_FILE_ENV = "HPCMEM_RULES_FILE"

_site_rules: str | None = None
_digests: dict[str | None, str] = {}


def use_site_rules(path: str | os.PathLike[str] | None) -> None:
    """Use ``path`` (a rules file of categories.toml's layout) besides the built-in rules."""
    global _site_rules
    _site_rules = os.fspath(path) if path else None


def site_rules_path() -> str | None:
    return _site_rules


def active_rules():  # -> tuple[Rule, ...]; cached per path by load_rules
    from hpcmem.kb.signatures.fingerprint import load_rules

    return load_rules(_site_rules)


def current_digest() -> str:
    """The digest of the fingerprint rules in effect (cached per process and site file)."""
    found = _digests.get(_site_rules)
    if found is None:
        found = _digests[_site_rules] = rules_digest(_site_rules)
    return found


def rules_digest(site_path: str | None) -> str:
    """sha256 over what decides a fingerprint: FINGERPRINT_VERSION, the masking patterns'
    sources, every rule (the compiled form the loader made), both files' bytes and the
    redaction's files (``redaction_files``)."""
    from hpcmem.kb.signatures import fingerprint as signatures

    h = hashlib.sha256()

    def add(label: str, value: object) -> None:
        data = value if isinstance(value, bytes) else repr(value).encode()
        h.update(f"{label}:{len(data)}:".encode())
        h.update(data)

    add("version", signatures.FINGERPRINT_VERSION)
    add("chars", signatures.FINGERPRINT_CHARS)
    compiled = signatures._patterns()  # the masker's compiled pattern object
    for name in sorted(vars(compiled)):
        add(f"mask.{name}", _sources(getattr(compiled, name)))
    for rule in signatures.load_rules(site_path):
        add("rule", (rule.name, rule.category, _sources(rule.patterns), rule.priority, rule.pick,
                     _sources(rule.keep), _sources(rule.mask), rule.template, rule.generic,
                     rule.root_cause_before, _sources(rule.skip)))
    add("builtin", _read(signatures.BUILTIN_RULES))
    add("site", _read(site_path) if site_path else b"")
    for path in redaction_files():
        add(f"redaction.{os.path.basename(path)}", _read(path))
    from hpcmem.kb.safety.redact import rules_digest as redaction_digest

    add("redaction.rules", redaction_digest())  # gitleaks' config from the wheel (or none), the scanner's version
    return h.hexdigest()


def redaction_files() -> list[str]:
    """What decides the redaction every fingerprinted text goes through first
    (``fingerprint.signature_text``): the normaliser's and the redactor's modules and the
    rule data beside them. The spans it removes and the ``[REDACTED:<kind>]`` markers it
    leaves are part of a template, so new redaction rules are new fingerprint rules."""
    from hpcmem.kb.safety import normalise, redact

    folder = os.path.dirname(redact.__file__)
    data = sorted(os.path.join(folder, name) for name in os.listdir(folder)
                  if not name.endswith((".py", ".pyc")) and os.path.isfile(os.path.join(folder, name)))
    return [normalise.__file__, redact.__file__, *data]


def _sources(value: object) -> object:
    """Pattern objects as (source, flags); containers walked; anything else as it is."""
    if isinstance(value, re.Pattern):
        return (value.pattern, value.flags)
    if isinstance(value, (list, tuple)):
        return tuple(_sources(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return tuple(sorted(map(repr, value)))
    return value


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read rules file {path}: {exc.strerror}") from None


_warned = False


def stale_stores(readers) -> list[str]:  # readers: hpcmem.kb.store.reader.StoreReader
    """Names of the stores whose fingerprints were computed under other rules than these:
    a recorded digest that differs, or none recorded in a store that has lessons (made
    before hpcmem recorded digests). Reads only; a store that cannot say is left out."""
    digest = current_digest()
    stale = []
    for reader in readers:
        try:
            stored = reader.meta(DIGEST_KEY)
            if stored == digest:
                continue
            if stored is None and not reader.query("SELECT 1 FROM lessons LIMIT 1"):
                continue
        except Exception:  # noqa: BLE001 - a check, never a reason for recall to fail
            continue
        stale.append(reader.name)
    return stale


def warn_if_stale(readers, stream=None) -> None:
    """One stderr line per process when a store's fingerprints predate these rules."""
    global _warned
    if _warned:
        return
    stale = stale_stores(readers)
    if not stale:
        return
    _warned = True
    import sys

    names = ", ".join(f"'{n}'" for n in stale)
    (stream or sys.stderr).write(
        f"Warning: store {names} holds fingerprints computed under other failure rules, so exact matches "
        f"can be missed; its maintainer should run `hpcmem db refingerprint`\n")
