"""Build an environment snapshot from Lmod and partition listings, or the live cluster.

The snapshot type and its storage live in ``hpcmem.kb``; this module is the reader side.
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


def build_snapshot(modules_text: str | None, partitions_text: str | None, *, live: bool,
                   previous: StoredSnapshot | None, allow_empty: bool = False,
                   modules_from: str = "--modules", partitions_from: str = "--partitions") -> tuple[EnvSnapshot, str]:
    """An EnvSnapshot from files and/or the live cluster; a missing half carries over.

    Refused (InputError naming the input) unless ``allow_empty``: a listing without any
    module or partition, and one that has none of the modules or partitions of
    ``previous``; stored, either would expire every lesson tied to one of them.
    ``modules_from`` / ``partitions_from`` name the inputs in errors (e.g. the file).
    """
    sources = []
    if live:
        modules_from, partitions_from = "the live Lmod listing", "live `scontrol show partition`"
        modules = _named(modules_from, live_modules)
        partitions = _named(partitions_from, live_partitions)
        sources.append("live: Lmod spider/avail, scontrol show partition")
    else:
        if modules_text is None and partitions_text is None:
            raise InputError("give --modules FILE, --partitions FILE or --live")
        modules = partitions = None
        if modules_text is not None:
            modules = _named(modules_from, read_modules, modules_text, allow_empty=allow_empty)
        if partitions_text is not None:
            partitions = _named(partitions_from, read_partitions, partitions_text, allow_empty=allow_empty)
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
    return EnvSnapshot(dict(modules), dict(partitions)), "; ".join(sources)


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
