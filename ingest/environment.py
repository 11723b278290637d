"""Build an environment snapshot from Lmod, partition and site-limit listings, or the live cluster.

The snapshot type and its storage live in ``hpcmem.kb``; this module is the reader side.
Modules and partitions are required (given, read live or carried over); the site's other
limits (nodes, QOS, associations, default accounts; ``ingest/site_limits.py``) are optional:
a part not given carries over from the previous snapshot, and with ``live`` a part that
cannot be read (no slurmdbd, sacctmgr missing) carries over too, with a warning in the
sources text, so a cron job keeps recording partitions on a site without accounting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hpcmem.ingest.lmod import live_modules, read_modules
from hpcmem.ingest.partitions import live_partitions, read_partitions
from hpcmem.kb.environment.snapshot import EnvSnapshot
from hpcmem.kb.environment.history import StoredSnapshot
from hpcmem.kb.errors import InputError

WIPE_HINT = ("a failed or cut-off capture (scontrol, module avail) looks like this; check it, and if they "
             "really are all gone, rerun with --allow-empty")
GIVE_HINT = "give --modules FILE, --partitions FILE or --live"
# The site-limit parts of an EnvSnapshot -> what messages call them
SITE_PARTS = {"nodes": "nodes", "qos": "QOS", "associations": "associations", "default_accounts": "default accounts"}


def build_snapshot(modules_text: str | None, partitions_text: str | None, *, live: bool,
                   previous: StoredSnapshot | None, allow_empty: bool = False,
                   modules_from: str = "--modules", partitions_from: str = "--partitions",
                   nodes_text: str | None = None, qos_text: str | None = None, assoc_text: str | None = None,
                   users_text: str | None = None, nodes_from: str = "--nodes", qos_from: str = "--qos",
                   assoc_from: str = "--assoc", users_from: str = "--users",
                   assoc_user: str | None = None) -> tuple[EnvSnapshot, str]:
    """An EnvSnapshot from files and/or the live cluster; a missing part carries over.

    Refused (InputError naming the input) unless ``allow_empty``: a listing without any
    module, partition, node, QOS, association or user, and a module, partition, node or QOS
    listing that has none of those of ``previous``; stored, either would expire every
    lesson tied to one of them. ``*_from`` name the inputs in errors (e.g. the file).
    ``assoc_user`` limits the live association and default-account reads to one user
    (default: every user, so snapshots taken by different users of a shared store agree).
    Returns the snapshot and a text saying where its parts came from (with warnings).
    """
    sources = []
    site: dict[str, Mapping | tuple | None] = dict.fromkeys(SITE_PARTS)
    if live:
        modules_from, partitions_from = "the live Lmod listing", "live `scontrol show partition`"
        modules = _named(modules_from, live_modules)
        partitions = _named(partitions_from, live_partitions)
        site, read, warnings = _live_site(assoc_user, previous)
        sources.append("live: Lmod spider/avail, " + ", ".join(["scontrol show partition", *read]))
        sources.extend(warnings)
    else:
        texts = (modules_text, partitions_text, nodes_text, qos_text, assoc_text, users_text)
        if all(text is None for text in texts):
            raise InputError(f"{GIVE_HINT} (and --nodes, --qos, --assoc, --users FILE for the site's limits)")
        modules = partitions = None
        if modules_text is not None:
            modules = _named(modules_from, read_modules, modules_text, allow_empty=allow_empty)
        if partitions_text is not None:
            partitions = _named(partitions_from, read_partitions, partitions_text, allow_empty=allow_empty)
        from hpcmem.ingest import site_limits

        for part, text, named, reader in (
            ("nodes", nodes_text, nodes_from, site_limits.parse_scontrol_nodes),
            ("qos", qos_text, qos_from, site_limits.parse_sacctmgr_qos),
            ("associations", assoc_text, assoc_from, site_limits.parse_sacctmgr_assoc),
            ("default_accounts", users_text, users_from, site_limits.parse_sacctmgr_users),
        ):
            if text is not None:
                site[part] = _named(named, reader, text, allow_empty=allow_empty)
        if not allow_empty:
            for part, kind, named in (("nodes", "node", nodes_from), ("qos", "QOS", qos_from)):
                if site[part] is not None:
                    _refuse_wipe(kind, site[part], named, _part(previous, part), previous)
    before = previous.snapshot if previous is not None else None
    if modules is None:
        if previous is None:
            raise InputError("no modules given and no earlier snapshot to carry them over from")
        modules = before.modules
        sources.append(f"modules carried over from snapshot {previous.id}")
    elif not allow_empty:
        _refuse_wipe("module", modules, modules_from, before.modules if before else {}, previous)
    if partitions is None:
        if previous is None:
            raise InputError("no partitions given and no earlier snapshot to carry them over from")
        partitions = before.partitions
        sources.append(f"partitions carried over from snapshot {previous.id}")
    elif not allow_empty:
        _refuse_wipe("partition", partitions, partitions_from, before.partitions if before else {}, previous)
    carried = [name for part, name in SITE_PARTS.items() if site[part] is None and _part(previous, part)]
    if carried:
        sources.append(f"{', '.join(carried)} carried over from snapshot {previous.id}")
    site = {part: _part(previous, part) if found is None else found for part, found in site.items()}
    snapshot = EnvSnapshot(dict(modules), dict(partitions), nodes=dict(site["nodes"]), qos=dict(site["qos"]),
                           associations=tuple(site["associations"]),
                           default_accounts=dict(site["default_accounts"]))
    return snapshot, "; ".join(sources)


def _part(previous: StoredSnapshot | None, part: str) -> Mapping | tuple:
    """One part of the site limits of the previous snapshot (empty when there is none)."""
    return getattr(previous.snapshot, part) if previous is not None else ()


def _live_site(user: str | None, previous: StoredSnapshot | None) -> tuple[dict, list[str], list[str]]:
    """(site parts read live, None for a part that could not be; the commands that were
    read; warnings). Nodes come from scontrol; QOS, associations and default accounts from
    sacctmgr, which a site without slurmdbd does not have. A listing that shares no node or
    QOS with ``previous`` is not used either (a wrong cluster, a cut-off capture)."""
    from hpcmem.ingest import site_limits

    site: dict = dict.fromkeys(SITE_PARTS)
    read, warnings = [], []

    def warn(what: str, exc: InputError) -> None:
        # one "; "-separated piece of the sources text each (the CLI prints them one a line)
        warnings.append(f"warning: {what} not read ({str(exc).replace('; ', ', ')})")

    try:
        site["nodes"] = site_limits.live_nodes()
        _refuse_wipe("node", site["nodes"], "scontrol show node", _part(previous, "nodes"), previous)
        read.append("scontrol show node")
    except InputError as exc:
        site["nodes"] = None
        warn("nodes", exc)
    try:
        site["qos"] = site_limits.live_qos()
        _refuse_wipe("QOS", site["qos"], "sacctmgr show qos", _part(previous, "qos"), previous)
        site["associations"] = site_limits.live_associations(user)
        site["default_accounts"] = site_limits.live_default_accounts(user)
        read.append("sacctmgr show qos/assoc/user")
    except InputError as exc:
        site["qos"] = site["associations"] = site["default_accounts"] = None
        warn("accounting", exc)
    return site, read, warnings


def _named(what: str, reader: Callable, *args, **kwargs) -> Mapping:
    """``reader``'s result; its InputError names the input it read."""
    try:
        return reader(*args, **kwargs)
    except InputError as exc:
        raise InputError(f"{what}: {exc}", hint=exc.hint) from None


def _refuse_wipe(kind: str, found: Mapping, what: str, before: Mapping, previous: StoredSnapshot | None) -> None:
    """InputError when ``found`` is empty or shares no name with ``before`` (the latest
    stored snapshot's), the shape of a failed or cut-off capture."""
    if not found:
        raise InputError(f"{what}: no {kind} in the listing", hint=WIPE_HINT)
    if before and set(found).isdisjoint(before):
        names = ", ".join(sorted(before)[:5]) + (", ..." if len(before) > 5 else "")
        raise InputError(f"{what}: none of the {len(before)} {kind}s of snapshot {previous.id} ({names}) is in "
                         f"the listing; refusing to record them all as removed", hint=WIPE_HINT)
