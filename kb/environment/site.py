"""A site's limits beyond its partitions: nodes, QOS and associations (issue 27).

A submission is refused when it asks what no node has (memory, CPUs, GRES), more time than a
QOS allows, or an account/partition/QOS the user's associations do not grant. These records
hold exactly the facts that decide it, read by ``ingest/site_limits.py`` from

- ``scontrol show node --oneliner``   -> ``NodeInfo``
- ``sacctmgr show qos -P``            -> ``QosInfo``
- ``sacctmgr show assoc -P``          -> ``Association``
- ``sacctmgr show user -P``           -> ``default_accounts`` (user -> Def Acct)

and kept in the environment snapshot beside modules and partitions, so revalidation sees
them change and checks work offline from the latest snapshot. Units are Slurm's: memory in
MiB, times in seconds; None is "no limit" (or "not printed"). The pairs as printed stay in
``raw``, so a later reader can use a field this one ignores - for nodes, apart from what
changes while jobs run (CPULoad, FreeMem, AllocMem, ...), which would make every hourly
snapshot of a busy cluster a new one.

GRES are kept as Slurm prints them per node without socket bindings: ``gpu:a100:4``,
``gpu:2``, ``shard:8`` (``gres_units`` splits them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from hpcmem.kb.errors import InputError

__all__ = ["NodeInfo", "QosInfo", "Association", "gres_units", "record_to_dict", "record_from_dict"]


def gres_units(items: tuple[str, ...] | list[str]) -> list[tuple[str, str | None, int]]:
    """(name, type or None, count) for GRES strings: 'gpu:a100:4' -> ('gpu', 'a100', 4),
    'gpu:2' -> ('gpu', None, 2), 'gpu' -> ('gpu', None, 1). A trailing '(S:0-1)' or
    '(IDX:0-1)' is dropped."""
    units = []
    for item in items:
        text = item.split("(", 1)[0].strip()
        if not text or text == "(null)":
            continue
        parts = text.split(":")
        count = 1
        if len(parts) > 1 and parts[-1].isdigit():
            count = int(parts.pop())
        name = parts[0]
        kind = parts[1] if len(parts) > 1 and parts[1] else None
        units.append((name, kind, count))
    return units


@dataclass(frozen=True)
class NodeInfo:
    """One node: what a single job can get on it."""

    name: str
    cpus: int | None  # CPUTot
    real_memory_mb: int | None  # RealMemory
    mem_spec_limit_mb: int | None = None  # MemSpecLimit: kept for the system, not for jobs
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    gres: tuple[str, ...] = ()  # 'gpu:a100:4'
    features: tuple[str, ...] = ()  # AvailableFeatures
    partitions: tuple[str, ...] = ()
    state: str | None = None  # whether it takes jobs: UP (idle, mixed, allocated), DOWN, DRAIN, FUTURE...
    raw: dict[str, str] = field(default_factory=dict)

    @property
    def job_memory_mb(self) -> int | None:
        """Memory one job may ask on this node: RealMemory less MemSpecLimit."""
        if self.real_memory_mb is None:
            return None
        return self.real_memory_mb - (self.mem_spec_limit_mb or 0)


@dataclass(frozen=True)
class QosInfo:
    """One QOS: the per-job limits it puts on jobs that run under it."""

    name: str
    max_wall_s: int | None = None  # MaxWall (per job)
    max_tres_per_job: dict[str, str] = field(default_factory=dict)  # MaxTRES
    max_tres_per_node: dict[str, str] = field(default_factory=dict)  # MaxTRESPerNode
    max_tres_per_user: dict[str, str] = field(default_factory=dict)  # MaxTRESPU
    max_jobs_per_user: int | None = None  # MaxJobsPU
    max_submit_per_user: int | None = None  # MaxSubmitPU
    flags: tuple[str, ...] = ()  # DenyOnLimit, ...
    raw: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Association:
    """One association: ``user`` may submit under ``account`` (on ``partition``, or on every
    partition when None) with one of ``qos``. Account-level rows have ``user`` None."""

    cluster: str | None
    account: str
    user: str | None
    partition: str | None = None
    qos: tuple[str, ...] = ()
    default_qos: str | None = None
    max_wall_s: int | None = None  # MaxWall of the association
    max_tres_per_job: dict[str, str] = field(default_factory=dict)  # MaxTRES
    raw: dict[str, str] = field(default_factory=dict)


def record_to_dict(record) -> dict:
    """A record as JSON: tuples become lists (sorted keys come from the snapshot's dump)."""
    data = {}
    for f in fields(record):
        value = getattr(record, f.name)
        data[f.name] = list(value) if isinstance(value, tuple) else value
    return data


def record_from_dict(cls, data: Mapping):
    """The inverse of ``record_to_dict``; InputError naming the record kind when a field is
    missing or the data is not a mapping. Fields added later take their defaults."""
    if not isinstance(data, Mapping):
        raise InputError(f"not a {cls.__name__} record")
    values = {}
    for f in fields(cls):
        if f.name not in data:
            continue  # a required field left out is a TypeError below
        value = data[f.name]
        values[f.name] = tuple(value) if isinstance(value, list) else value
    try:
        return cls(**values)
    except TypeError as exc:
        raise InputError(f"not a {cls.__name__} record: {exc}") from exc
