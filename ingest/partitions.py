"""Read Slurm partition definitions: limits a job must fit and who may use them.

Formats (real examples in data/samples/env/, see its README.md):

- ``scontrol show partition --oneliner``: one record per line of ``Key=Value`` pairs;
- ``scontrol show partition``: the same pairs spread over indented lines. Records
  are usually separated by blank lines, but not always (reportseff issue 11), so a
  ``PartitionName=`` pair always starts a new record;
- ``sinfo`` (default columns PARTITION AVAIL TIMELIMIT NODES STATE NODELIST): one row
  per partition and node state; ``*`` marks the default partition. It knows far less
  than scontrol: state, time limit, node count and the default flag only.

Values keep Slurm's meaning: None is "no limit" (``UNLIMITED``, ``infinite``, a
memory limit of 0) for limits, and "not set" for DefaultTime=NONE and QoS=N/A.
``allow_*`` lists are None when everyone is allowed (``ALL`` or no such key); other
lists are sorted and free of duplicates, because Slurm's order carries no meaning.
Every pair as printed stays in ``raw``.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from hpcmem.kb.environment.snapshot import SINFO_FIELDS, PartitionInfo
from hpcmem.kb.slurm_units import format_time_limit, parse_duration, parse_size_mb, parse_tres
from hpcmem.kb.errors import InputError

__all__ = [
    "PartitionInfo",
    "parse_time_limit",
    "parse_memory_mb",
    "format_time_limit",
    "parse_scontrol_partitions",
    "parse_sinfo",
    "read_partitions",
    "live_partitions",
]

# ---------------------------------------------------------------------------
# Values

_NO_TIME_LIMIT = frozenset({"UNLIMITED", "INFINITE", "NONE"})


def parse_time_limit(text: str) -> int | None:
    """Seconds in a partition time limit; None for UNLIMITED, infinite (sinfo) or NONE.

    Accepts Slurm's forms: MM (minutes, as in slurm.conf), MM:SS, HH:MM:SS, D-HH,
    D-HH:MM and D-HH:MM:SS.
    """
    if text.upper() in _NO_TIME_LIMIT:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise InputError(f"not a Slurm time limit: {text!r}") from exc
    if seconds is None:
        raise InputError("empty Slurm time limit")
    return int(seconds)


def parse_memory_mb(text: str) -> int | None:
    """MB in a partition memory limit such as MaxMemPerNode; None for UNLIMITED and 0
    (Slurm's "no limit"). scontrol prints MB; a K/M/G/T suffix is also accepted."""
    if text.upper() == "UNLIMITED":
        return None
    try:
        mb = parse_size_mb(text, bare_unit="M")
    except (ValueError, KeyError) as exc:
        raise InputError(f"not a Slurm memory size: {text!r}") from exc
    if mb is None:
        raise InputError("empty Slurm memory size")
    return round(mb) or None


def _count(text: str | None, key: str) -> int | None:
    if text is None or text.upper() == "UNLIMITED":
        return None
    if not text.isdigit():
        raise InputError(f"{key}={text!r} is not a number")
    return int(text)


def _names(text: str | None) -> tuple[str, ...]:
    if not text or text == "(null)":
        return ()
    return tuple(sorted({name for name in text.split(",") if name}))


def _allowed(text: str | None) -> tuple[str, ...] | None:
    if text is None or text.upper() == "ALL":
        return None
    return _names(text)


# ---------------------------------------------------------------------------
# scontrol show partition


def _from_scontrol(raw: dict[str, str]) -> PartitionInfo:
    def memory(key: str) -> int | None:
        return parse_memory_mb(raw[key]) if key in raw else None

    tres_text = raw.get("TRES", "")
    try:
        tres = {} if tres_text in ("", "(null)") else parse_tres(tres_text)
    except ValueError as exc:
        raise InputError(f"partition {raw['PartitionName']}: {exc}") from exc
    qos = raw.get("QoS")
    return PartitionInfo(
        name=raw["PartitionName"],
        state=raw.get("State"),
        max_time_s=parse_time_limit(raw.get("MaxTime", "UNLIMITED")),
        default_time_s=parse_time_limit(raw.get("DefaultTime", "NONE")),
        max_mem_per_node_mb=memory("MaxMemPerNode"),
        max_mem_per_cpu_mb=memory("MaxMemPerCPU"),
        def_mem_per_cpu_mb=memory("DefMemPerCPU"),
        def_mem_per_node_mb=memory("DefMemPerNode"),
        max_nodes=_count(raw.get("MaxNodes"), "MaxNodes"),
        total_cpus=_count(raw.get("TotalCPUs"), "TotalCPUs"),
        total_nodes=_count(raw.get("TotalNodes"), "TotalNodes"),
        tres=tres,
        allow_accounts=_allowed(raw.get("AllowAccounts")),
        deny_accounts=_names(raw.get("DenyAccounts")),
        allow_qos=_allowed(raw.get("AllowQos")),
        deny_qos=_names(raw.get("DenyQos")),
        allow_groups=_allowed(raw.get("AllowGroups")),
        qos=None if qos in (None, "N/A", "(null)") else qos,
        is_default=raw.get("Default") == "YES",
        raw=raw,
        source="scontrol",
    )


def parse_scontrol_partitions(text: str) -> dict[str, PartitionInfo]:
    """Read ``scontrol show partition`` in either layout (``--oneliner`` or multi-line,
    with or without blank lines between records). Keys: partition names, in order.

    Values are split at the first '=' only (``TRES=cpu=1,mem=1000M``,
    ``JobDefaults=DefMemPerGPU=1024``). Raises InputError on anything that is not a
    ``Key=Value`` pair, on a pair before the first PartitionName and on a repeated name.
    """
    records: list[dict[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for pair in line.split():
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise InputError(
                    f"line {number}: {pair[:60]!r} is not a Key=Value pair of scontrol"
                )
            if key == "PartitionName":
                if not value:  # a cut-off listing; a partition needs a name
                    raise InputError(f"line {number}: PartitionName= has no name")
                records.append({})
            elif not records:
                raise InputError(f"line {number}: {key}= comes before any PartitionName=")
            records[-1][key] = value
    partitions: dict[str, PartitionInfo] = {}
    for raw in records:
        info = _from_scontrol(raw)
        if info.name in partitions:
            raise InputError(f"partition {info.name!r} appears twice")
        partitions[info.name] = info
    return partitions


# ---------------------------------------------------------------------------
# sinfo

_SINFO_STATES = {"up": "UP", "down": "DOWN", "drain": "DRAIN", "inact": "INACTIVE"}


def parse_sinfo(text: str) -> dict[str, PartitionInfo]:
    """Read ``sinfo`` fixed-width output with its header line (any column order).

    Rows of one partition (one per node state) are merged: node counts are added and
    node lists joined. ``NODES(A/I/O/T)`` (``sinfo -s``) gives the total after the
    last '/'. Fields sinfo does not print are None (see ``SINFO_FIELDS``).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].split()[0] != "PARTITION":
        raise InputError("not sinfo output: the first line is not a PARTITION header")
    header = lines[0].split()
    rows: dict[str, list[dict[str, str]]] = {}
    for number, line in enumerate(lines[1:], 2):
        cells = line.split()
        if len(cells) != len(header):
            raise InputError(
                f"sinfo line {number} has {len(cells)} columns, the header {len(header)}"
            )
        row = dict(zip(header, cells))
        rows.setdefault(row["PARTITION"], []).append(row)
    partitions: dict[str, PartitionInfo] = {}
    for label, group in rows.items():
        info = _from_sinfo(label, group)
        partitions[info.name] = info
    return partitions


def _from_sinfo(label: str, rows: list[dict[str, str]]) -> PartitionInfo:
    first = rows[0]
    raw = dict(first)
    del raw["PARTITION"]
    total_nodes = None
    if "NODES" in first:
        total_nodes = sum(_count(row["NODES"], "NODES") or 0 for row in rows)
        raw["NODES"] = str(total_nodes)
    elif "NODES(A/I/O/T)" in first:
        total_nodes = sum(int(row["NODES(A/I/O/T)"].rpartition("/")[2]) for row in rows)
    for column in ("STATE", "NODELIST"):
        if column in first:
            raw[column] = ",".join(dict.fromkeys(row[column] for row in rows))
    avail = first.get("AVAIL")
    time_limit = first.get("TIMELIMIT")
    return PartitionInfo(
        name=label.rstrip("*"),
        state=None if avail is None else _SINFO_STATES.get(avail, avail.upper()),
        max_time_s=None if time_limit is None else parse_time_limit(time_limit),
        default_time_s=None,
        max_mem_per_node_mb=None,
        max_mem_per_cpu_mb=None,
        def_mem_per_cpu_mb=None,
        def_mem_per_node_mb=None,
        max_nodes=None,
        total_cpus=None,
        total_nodes=total_nodes,
        is_default=label.endswith("*"),
        raw=raw,
        source="sinfo",
    )


# ---------------------------------------------------------------------------
# Sniffing and running Slurm


def read_partitions(text: str, allow_empty: bool = False) -> dict[str, PartitionInfo]:
    """Read scontrol (either layout) or sinfo output, told apart by the first line.

    A listing without any partition (empty text, a bare sinfo header) raises InputError
    unless ``allow_empty``: a failed or cut-off capture looks exactly like that, and
    would read as "every partition was removed"."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith("PartitionName="):
        return parse_scontrol_partitions(text)
    if first and first.split()[:1] != ["PARTITION"]:
        raise InputError(f"not partition output: {first[:80]!r}",
                         hint="capture `scontrol show partition --oneliner` (or `sinfo`)")
    partitions = parse_sinfo(text) if first else {}
    if not partitions and not allow_empty:
        raise InputError("no partition in the listing" if first else "empty partition listing",
                         hint="capture `scontrol show partition --oneliner` (or `sinfo`); "
                              "if the cluster really has none, pass --allow-empty")
    return partitions


def live_partitions(timeout: float = 60.0) -> dict[str, PartitionInfo]:
    """Run ``scontrol --oneliner show partition`` here; InputError when scontrol is
    missing or fails (its message is kept, e.g. 'Unable to contact slurm controller')."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        raise InputError(
            "scontrol not found", hint="run on a Slurm login node, or read a saved capture"
        )
    from hpcmem.ingest.commands import run_command

    proc = run_command([scontrol, "--oneliner", "show", "partition"], timeout)
    if proc.returncode != 0:
        # The last line is the verdict ('fatal: Could not establish a configuration
        # source'); lines before it are the steps that led there.
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise InputError(
            f"scontrol show partition failed (exit {proc.returncode}): "
            f"{lines[-1] if lines else 'no message'}",
            hint="check that slurmctld is reachable (`scontrol ping`)",
        )
    return parse_scontrol_partitions(proc.stdout)
