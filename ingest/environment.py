"""Build an environment snapshot from Lmod and partition listings, or the live cluster.

The snapshot type and its storage live in ``hpcmem.kb``; this module is the reader side.
"""

from __future__ import annotations

from hpcmem.ingest.lmod import live_modules, read_modules
from hpcmem.ingest.partitions import live_partitions, read_partitions
from hpcmem.kb.environment.snapshot import EnvSnapshot
from hpcmem.kb.environment.history import StoredSnapshot
from hpcmem.kb.errors import InputError


def build_snapshot(modules_text: str | None, partitions_text: str | None, *, live: bool,
                   previous: StoredSnapshot | None) -> tuple[EnvSnapshot, str]:
    """An EnvSnapshot from files and/or the live cluster; a missing half carries over."""
    sources = []
    if live:
        modules, partitions = live_modules(), live_partitions()
        sources.append("live: Lmod spider/avail, scontrol show partition")
    else:
        if modules_text is None and partitions_text is None:
            raise InputError("give --modules FILE, --partitions FILE or --live")
        modules = read_modules(modules_text) if modules_text is not None else None
        partitions = read_partitions(partitions_text) if partitions_text is not None else None
        if modules is None:
            if previous is None:
                raise InputError("no modules given and no earlier snapshot to carry them over from")
            modules = previous.snapshot.modules
            sources.append(f"modules carried over from snapshot {previous.id}")
        if partitions is None:
            if previous is None:
                raise InputError("no partitions given and no earlier snapshot to carry them over from")
            partitions = previous.snapshot.partitions
            sources.append(f"partitions carried over from snapshot {previous.id}")
    return EnvSnapshot(dict(modules), dict(partitions)), "; ".join(sources)
