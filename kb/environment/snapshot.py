"""A snapshot of a cluster's environment (modules and partitions) and the diff of two.

Lessons depend on conditions such as "module cuda/11.8 exists" or "partition gpu_test
MaxTime >= 8:00:00"; a revalidator compares the snapshot a lesson was learnt under
with today's and looks at what changed. ``EnvSnapshot.to_json`` is the form the store
keeps: sorted keys and lists, so the same environment always gives the same text and
the same ``content_hash``. A snapshot holds no capture time; the store records that.

Diff rules worth knowing:

- modules are compared per name/version; a default change is reported only for a
  module present on both sides (a removed module is reported as removed versions);
- partition fields are reported in Slurm's spelling (MaxTime, DefMemPerCPU, ...),
  with values formatted as scontrol prints them; TRES changes are one entry per key;
- when one side was read from sinfo, only what sinfo knows is compared (state, time
  limit, node count, default flag), so a change of source is not a change of limits;
- module defaults are only as good as the listing: Lmod 8.6's ``module -t avail``
  does not show a .modulerc default, so compare snapshots taken the same way
  (``live_modules`` uses spider-json whenever $LMOD_DIR is set);
- site limits (nodes, QOS, associations, default accounts) are compared part by part
  only when both snapshots hold that part; when one side has none, the diff says the
  part was first recorded (or no longer recorded) instead of listing every node as added
  or removed. Node fields are RealMemory, MemSpecLimit, CPUTot, Gres and AvailableFeatures
  (a node's load or state is not a limit); QOS fields MaxWall and MaxTRES (one entry per
  TRES key); association fields QOS, Def QOS, MaxWall and MaxTRES. ``SnapshotDiff.to_json``
  writes these lists only when non-empty, so a diff without site limits keeps its text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields

from hpcmem.kb.errors import InputError
from hpcmem.kb.environment.lmod_versions import sort_versions
from hpcmem.kb.environment.site import (Association, NodeInfo, QosInfo, record_from_dict,
                                        record_to_dict)
from hpcmem.kb.slurm_units import format_time_limit

__all__ = [
    "EnvSnapshot",
    "SnapshotDiff",
    "ModuleVersionChange",
    "DefaultChange",
    "PartitionPresenceChange",
    "PartitionLimitChange",
    "SitePartChange",
    "NodePresenceChange",
    "NodeChange",
    "QosPresenceChange",
    "QosLimitChange",
    "AssociationPresenceChange",
    "AssociationLimitChange",
    "DefaultAccountChange",
    "diff_snapshots",
]


# The parts of a snapshot, as the readers in ingest.lmod and ingest.partitions build them.

@dataclass(frozen=True)
class ModuleInfo:
    """One module name. ``versions`` is in Lmod order (lowest first); ``default`` is
    the version ``module load name`` picks (None when the module has no versions);
    ``marked_default`` is True when a site marked it rather than Lmod picking the
    highest version."""

    name: str
    versions: tuple[str, ...]
    default: str | None
    marked_default: bool

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "versions": list(self.versions),
            "default": self.default,
            "marked_default": self.marked_default,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> ModuleInfo:
        try:
            return cls(
                name=str(data["name"]),
                versions=tuple(str(v) for v in data["versions"]),
                default=None if data["default"] is None else str(data["default"]),
                marked_default=bool(data["marked_default"]),
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"not a module record: {exc}") from exc


class ModuleSnapshot(Mapping[str, ModuleInfo]):
    """Module name -> ModuleInfo, sorted by name, plus the format it was read from
    (``source``: 'terse-avail', 'avail', 'spider-json' or 'software-page')."""

    def __init__(self, modules: Mapping[str, ModuleInfo], source: str):
        self._modules = {name: modules[name] for name in sorted(modules)}
        self.source = source

    def __getitem__(self, name: str) -> ModuleInfo:
        return self._modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __repr__(self) -> str:
        return f"ModuleSnapshot({len(self)} modules, source={self.source!r})"


# Fields a PartitionInfo read from sinfo really knows; the rest are None there.
SINFO_FIELDS = ("state", "max_time_s", "total_nodes", "is_default")


@dataclass(frozen=True)
class PartitionInfo:
    """One partition. Times in seconds, memory in MB (Slurm's MB = MiB)."""

    name: str
    state: str | None  # UP, DOWN, DRAIN, INACTIVE
    max_time_s: int | None  # None: UNLIMITED
    default_time_s: int | None  # None: NONE (MaxTime applies)
    max_mem_per_node_mb: int | None  # None: UNLIMITED or not set
    max_mem_per_cpu_mb: int | None
    def_mem_per_cpu_mb: int | None
    def_mem_per_node_mb: int | None
    max_nodes: int | None  # None: UNLIMITED
    total_cpus: int | None
    total_nodes: int | None
    tres: dict[str, str] = field(default_factory=dict)
    allow_accounts: tuple[str, ...] | None = None  # None: ALL
    deny_accounts: tuple[str, ...] = ()
    allow_qos: tuple[str, ...] | None = None
    deny_qos: tuple[str, ...] = ()
    allow_groups: tuple[str, ...] | None = None
    qos: str | None = None  # the partition QoS; None: N/A
    is_default: bool = False
    raw: dict[str, str] = field(default_factory=dict)
    source: str = "scontrol"  # 'scontrol' or 'sinfo'

    def to_dict(self) -> dict:
        return record_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> PartitionInfo:
        values = {}
        try:
            for f in fields(cls):
                value = data[f.name]
                values[f.name] = tuple(value) if isinstance(value, list) else value
            return cls(**values)
        except (KeyError, TypeError) as exc:
            raise InputError(f"not a partition record: missing or bad {exc}") from exc


SNAPSHOT_FORMAT = "hpcmem-env-snapshot"
SNAPSHOT_VERSION = 1


def site_from_json(data: Mapping) -> dict:
    """The EnvSnapshot keyword arguments for the site limits in a snapshot's JSON."""
    return {
        "nodes": {name: record_from_dict(NodeInfo, n) for name, n in (data.get("nodes") or {}).items()},
        "qos": {name: record_from_dict(QosInfo, q) for name, q in (data.get("qos") or {}).items()},
        "associations": tuple(record_from_dict(Association, a) for a in data.get("associations") or ()),
        "default_accounts": dict(data.get("default_accounts") or {}),
    }


def _dumps(data: object) -> str:
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class EnvSnapshot:
    """Modules (name -> ModuleInfo) and partitions (name -> PartitionInfo), and the site's
    other limits (``kb/environment/site.py``, issue 27): nodes, QOS, associations and users'
    default accounts. Those are empty in a snapshot taken without them."""

    modules: Mapping[str, ModuleInfo]
    partitions: Mapping[str, PartitionInfo]
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    qos: Mapping[str, QosInfo] = field(default_factory=dict)
    associations: tuple[Association, ...] = ()
    default_accounts: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Plain dicts sorted by name, whatever mapping was passed (a ModuleSnapshot).
        for name in ("modules", "partitions", "nodes", "qos", "default_accounts"):
            value = getattr(self, name)
            object.__setattr__(self, name, {k: value[k] for k in sorted(value)})
        object.__setattr__(self, "associations", tuple(sorted(
            self.associations, key=lambda a: (a.cluster or "", a.account, a.user or "", a.partition or ""))))

    @property
    def has_site_limits(self) -> bool:
        return bool(self.nodes or self.qos or self.associations)

    def to_json(self) -> str:
        document = {
            "format": SNAPSHOT_FORMAT,
            "version": SNAPSHOT_VERSION,
            "modules": {name: info.to_dict() for name, info in self.modules.items()},
            "partitions": {name: p.to_dict() for name, p in self.partitions.items()},
        }
        # Written only when present, so a snapshot without them keeps its text and its hash.
        document.update(self.site_json())
        return _dumps(document)

    def site_json(self) -> dict:
        """The site limits as the store keeps them (only the parts present)."""
        parts = {
            "nodes": {name: record_to_dict(n) for name, n in self.nodes.items()},
            "qos": {name: record_to_dict(q) for name, q in self.qos.items()},
            "associations": [record_to_dict(a) for a in self.associations],
            "default_accounts": dict(self.default_accounts),
        }
        return {key: value for key, value in parts.items() if value}

    @classmethod
    def from_json(cls, text: str) -> EnvSnapshot:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"not an environment snapshot: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT:
            raise InputError("not an environment snapshot: no 'hpcmem-env-snapshot' format")
        if data.get("version") != SNAPSHOT_VERSION:
            raise InputError(f"unsupported environment snapshot version {data.get('version')!r}")
        modules = {name: ModuleInfo.from_dict(m) for name, m in data.get("modules", {}).items()}
        partitions = {
            name: PartitionInfo.from_dict(p) for name, p in data.get("partitions", {}).items()
        }
        return cls(modules, partitions, **site_from_json(data))

    def content_hash(self) -> str:
        """SHA-256 (hex) of ``to_json()``: equal environments, equal hashes."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------
# Changes


@dataclass(frozen=True)
class ModuleVersionChange:
    name: str
    version: str | None  # None for a module without versions
    change: str  # 'added' or 'removed'

    def describe(self) -> str:
        full = self.name if self.version is None else f"{self.name}/{self.version}"
        return f"module {full} {self.change}"


@dataclass(frozen=True)
class DefaultChange:
    name: str
    old: str | None
    new: str | None
    old_marked: bool
    new_marked: bool

    def describe(self) -> str:
        return f"module {self.name}: default {self.old} -> {self.new}"


@dataclass(frozen=True)
class PartitionPresenceChange:
    name: str
    change: str  # 'added' or 'removed'

    def describe(self) -> str:
        return f"partition {self.name} {self.change}"


@dataclass(frozen=True)
class PartitionLimitChange:
    partition: str
    field: str  # Slurm's key: MaxTime, DefMemPerCPU, AllowAccounts, TRES, ...
    old: str
    new: str

    def describe(self) -> str:
        text = f"partition {self.partition}: {self.field} {self.old} -> {self.new}"
        if self.field in _LIST_FIELDS and "ALL" not in (self.old, self.new):
            # Long account lists are unreadable side by side: name what moved.
            before, after = _list_items(self.old), _list_items(self.new)
            moved = [f"+{n}" for n in sorted(after - before)]
            moved += [f"-{n}" for n in sorted(before - after)]
            text += f" ({' '.join(moved)})"
        return text


_LIST_FIELDS = frozenset({"AllowAccounts", "DenyAccounts", "AllowQos", "DenyQos", "AllowGroups"})


def _list_items(text: str) -> set[str]:
    return set() if text == "(none)" else set(text.split(","))


@dataclass(frozen=True)
class SitePartChange:
    """A part of the site limits held by one snapshot only: its records are not compared."""

    part: str  # 'nodes', 'QOS', 'associations', 'default accounts'
    change: str  # 'recorded' (only in the newer) or 'dropped' (only in the older)
    count: int  # records on the side that has them

    def describe(self) -> str:
        if self.change == "recorded":
            return f"{self.part} first recorded ({self.count})"
        return f"{self.part} no longer recorded (the older snapshot had {self.count})"


@dataclass(frozen=True)
class NodePresenceChange:
    name: str
    change: str  # 'added' or 'removed'

    def describe(self) -> str:
        return f"node {self.name} {self.change}"


@dataclass(frozen=True)
class NodeChange:
    node: str
    field: str  # Slurm's key: RealMemory, MemSpecLimit, CPUTot, Gres, AvailableFeatures
    old: str
    new: str

    def describe(self) -> str:
        return f"node {self.node}: {self.field} {self.old} -> {self.new}"


@dataclass(frozen=True)
class QosPresenceChange:
    name: str
    change: str  # 'added' or 'removed'

    def describe(self) -> str:
        return f"QOS {self.name} {self.change}"


@dataclass(frozen=True)
class QosLimitChange:
    qos: str
    field: str  # MaxWall or MaxTRES
    old: str
    new: str

    def describe(self) -> str:
        return f"QOS {self.qos}: {self.field} {self.old} -> {self.new}"


def association_label(account: str, user: str | None, partition: str | None) -> str:
    """'alice/research on main', 'alice/research', 'research' (an account's own row)."""
    who = f"{user}/{account}" if user else account
    return who + (f" on {partition}" if partition else "")


@dataclass(frozen=True)
class AssociationPresenceChange:
    cluster: str | None
    account: str
    user: str | None
    partition: str | None
    change: str  # 'added' or 'removed'

    def describe(self) -> str:
        return f"association {association_label(self.account, self.user, self.partition)} {self.change}"


@dataclass(frozen=True)
class AssociationLimitChange:
    cluster: str | None
    account: str
    user: str | None
    partition: str | None
    field: str  # QOS, Def QOS, MaxWall, MaxTRES
    old: str
    new: str

    def describe(self) -> str:
        text = (f"association {association_label(self.account, self.user, self.partition)}: "
                f"{self.field} {self.old} -> {self.new}")
        if self.field == "QOS":
            before, after = _list_items(self.old), _list_items(self.new)
            moved = [f"+{n}" for n in sorted(after - before)] + [f"-{n}" for n in sorted(before - after)]
            text += f" ({' '.join(moved)})"
        return text


@dataclass(frozen=True)
class DefaultAccountChange:
    user: str
    old: str | None  # None: the user had none (or was not listed)
    new: str | None

    def describe(self) -> str:
        return f"user {self.user}: default account {self.old or '(none)'} -> {self.new or '(none)'}"


# SnapshotDiff fields written by to_json only when non-empty (see the module docstring).
_SITE_DIFF_FIELDS = frozenset({
    "site_parts", "nodes_added", "nodes_removed", "node_changes", "qos_added", "qos_removed", "qos_changes",
    "associations_added", "associations_removed", "association_changes", "default_account_changes",
})


@dataclass(frozen=True)
class SnapshotDiff:
    modules_added: tuple[ModuleVersionChange, ...] = ()
    modules_removed: tuple[ModuleVersionChange, ...] = ()
    defaults_changed: tuple[DefaultChange, ...] = ()
    partitions_added: tuple[PartitionPresenceChange, ...] = ()
    partitions_removed: tuple[PartitionPresenceChange, ...] = ()
    partition_changes: tuple[PartitionLimitChange, ...] = ()
    site_parts: tuple[SitePartChange, ...] = ()
    nodes_added: tuple[NodePresenceChange, ...] = ()
    nodes_removed: tuple[NodePresenceChange, ...] = ()
    node_changes: tuple[NodeChange, ...] = ()
    qos_added: tuple[QosPresenceChange, ...] = ()
    qos_removed: tuple[QosPresenceChange, ...] = ()
    qos_changes: tuple[QosLimitChange, ...] = ()
    associations_added: tuple[AssociationPresenceChange, ...] = ()
    associations_removed: tuple[AssociationPresenceChange, ...] = ()
    association_changes: tuple[AssociationLimitChange, ...] = ()
    default_account_changes: tuple[DefaultAccountChange, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in self.__dataclass_fields__)

    def changes(self) -> list:
        """Every change, modules first, in a fixed order."""
        return [change for name in self.__dataclass_fields__ for change in getattr(self, name)]

    def describe(self) -> list[str]:
        return [change.describe() for change in self.changes()]

    def to_json(self) -> str:
        return _dumps(
            {
                name: [asdict(change) for change in getattr(self, name)]
                for name in self.__dataclass_fields__
                if getattr(self, name) or name not in _SITE_DIFF_FIELDS
            }
        )


# ---------------------------------------------------------------------------
# Diffing


def _module_diff(a: Mapping[str, ModuleInfo], b: Mapping[str, ModuleInfo]):
    added: list[ModuleVersionChange] = []
    removed: list[ModuleVersionChange] = []
    defaults: list[DefaultChange] = []
    for name in sorted(set(a) | set(b)):
        old, new = a.get(name), b.get(name)
        old_versions = set(old.versions) if old is not None else set()
        new_versions = set(new.versions) if new is not None else set()
        # A module without versions ('TACC') has only its name to add or remove.
        if old is None and not new.versions:
            added.append(ModuleVersionChange(name, None, "added"))
        if new is None and not old.versions:
            removed.append(ModuleVersionChange(name, None, "removed"))
        for version in sort_versions(new_versions - old_versions):
            added.append(ModuleVersionChange(name, version, "added"))
        for version in sort_versions(old_versions - new_versions):
            removed.append(ModuleVersionChange(name, version, "removed"))
        if old is not None and new is not None and old.default != new.default:
            defaults.append(
                DefaultChange(
                    name, old.default, new.default, old.marked_default, new.marked_default
                )
            )
    return tuple(added), tuple(removed), tuple(defaults)


def _names_text(names: tuple[str, ...] | None) -> str:
    if names is None:
        return "ALL"
    return ",".join(names) if names else "(none)"


def _memory_text(mb: int | None) -> str:
    return "UNLIMITED" if mb is None else str(mb)


def _count_text(n: int | None) -> str:
    return "UNLIMITED" if n is None else str(n)


# (Slurm key, attribute, how scontrol would print the value)
_COMPARED: tuple[tuple[str, str, Callable[[object], str]], ...] = (
    ("State", "state", lambda v: "(none)" if v is None else str(v)),
    ("Default", "is_default", lambda v: "YES" if v else "NO"),
    ("MaxTime", "max_time_s", lambda v: format_time_limit(v, "UNLIMITED")),
    ("DefaultTime", "default_time_s", lambda v: format_time_limit(v, "NONE")),
    ("MaxMemPerNode", "max_mem_per_node_mb", _memory_text),
    ("MaxMemPerCPU", "max_mem_per_cpu_mb", _memory_text),
    ("DefMemPerNode", "def_mem_per_node_mb", _memory_text),
    ("DefMemPerCPU", "def_mem_per_cpu_mb", _memory_text),
    ("MaxNodes", "max_nodes", _count_text),
    ("TotalNodes", "total_nodes", _count_text),
    ("TotalCPUs", "total_cpus", _count_text),
    ("QoS", "qos", lambda v: "N/A" if v is None else str(v)),
    ("AllowAccounts", "allow_accounts", _names_text),
    ("DenyAccounts", "deny_accounts", _names_text),
    ("AllowQos", "allow_qos", _names_text),
    ("DenyQos", "deny_qos", _names_text),
    ("AllowGroups", "allow_groups", _names_text),
)


def _partition_changes(old: PartitionInfo, new: PartitionInfo) -> list[PartitionLimitChange]:
    both_scontrol = old.source != "sinfo" and new.source != "sinfo"
    changes = []
    for key, attribute, text in _COMPARED:
        if not both_scontrol and attribute not in SINFO_FIELDS:
            continue
        before, after = getattr(old, attribute), getattr(new, attribute)
        if before != after:
            changes.append(PartitionLimitChange(old.name, key, text(before), text(after)))
    if both_scontrol:
        for key in sorted(set(old.tres) | set(new.tres)):
            before, after = old.tres.get(key), new.tres.get(key)
            if before != after:
                changes.append(
                    PartitionLimitChange(
                        old.name,
                        "TRES",
                        "(none)" if before is None else f"{key}={before}",
                        "(none)" if after is None else f"{key}={after}",
                    )
                )
    return changes


def _null_text(names: tuple[str, ...]) -> str:
    return ",".join(names) if names else "(null)"


def _none_text(value: object) -> str:
    return "(none)" if value is None else str(value)


# (Slurm key, NodeInfo attribute, how scontrol prints it)
_NODE_COMPARED: tuple[tuple[str, str, Callable[[object], str]], ...] = (
    ("RealMemory", "real_memory_mb", _none_text),
    ("MemSpecLimit", "mem_spec_limit_mb", _none_text),
    ("CPUTot", "cpus", _none_text),
    ("Gres", "gres", _null_text),
    ("AvailableFeatures", "features", _null_text),
)


def _tres_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[tuple[str, str]]:
    """(old, new) per TRES key that differs: 'gres/gpu=8' -> 'gres/gpu=4', '(none)' for absent."""
    changes = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            changes.append(tuple("(none)" if side.get(key) is None else f"{key}={side[key]}"
                                 for side in (before, after)))
    return changes


def _parts_compared(a: EnvSnapshot, b: EnvSnapshot, attribute: str, part: str,
                    notes: list[SitePartChange]) -> bool:
    """True when both snapshots hold this part of the site limits; else a note when one does."""
    old, new = getattr(a, attribute), getattr(b, attribute)
    if old and new:
        return True
    if new:
        notes.append(SitePartChange(part, "recorded", len(new)))
    elif old:
        notes.append(SitePartChange(part, "dropped", len(old)))
    return False


def _site_diff(a: EnvSnapshot, b: EnvSnapshot) -> dict[str, tuple]:
    """SnapshotDiff's site fields (empty ones left out)."""
    notes: list[SitePartChange] = []
    found: dict[str, list] = {}
    if _parts_compared(a, b, "nodes", "nodes", notes):
        found["nodes_added"] = [NodePresenceChange(n, "added") for n in sorted(set(b.nodes) - set(a.nodes))]
        found["nodes_removed"] = [NodePresenceChange(n, "removed") for n in sorted(set(a.nodes) - set(b.nodes))]
        found["node_changes"] = [
            NodeChange(name, key, text(getattr(a.nodes[name], attribute)), text(getattr(b.nodes[name], attribute)))
            for name in sorted(set(a.nodes) & set(b.nodes))
            for key, attribute, text in _NODE_COMPARED
            if getattr(a.nodes[name], attribute) != getattr(b.nodes[name], attribute)
        ]
    if _parts_compared(a, b, "qos", "QOS", notes):
        found["qos_added"] = [QosPresenceChange(n, "added") for n in sorted(set(b.qos) - set(a.qos))]
        found["qos_removed"] = [QosPresenceChange(n, "removed") for n in sorted(set(a.qos) - set(b.qos))]
        changes = []
        for name in sorted(set(a.qos) & set(b.qos)):
            old, new = a.qos[name], b.qos[name]
            if old.max_wall_s != new.max_wall_s:
                changes.append(QosLimitChange(name, "MaxWall", format_time_limit(old.max_wall_s),
                                              format_time_limit(new.max_wall_s)))
            changes += [QosLimitChange(name, "MaxTRES", before, after)
                        for before, after in _tres_changes(old.max_tres_per_job, new.max_tres_per_job)]
        found["qos_changes"] = changes
    if _parts_compared(a, b, "associations", "associations", notes):
        def keyed(snapshot: EnvSnapshot) -> dict[tuple, Association]:
            return {(x.cluster, x.account, x.user, x.partition): x for x in snapshot.associations}

        old_rows, new_rows = keyed(a), keyed(b)
        order = lambda key: (key[0] or "", key[1], key[2] or "", key[3] or "")  # noqa: E731 - None sorts first
        found["associations_added"] = [AssociationPresenceChange(*key, "added")
                                       for key in sorted(set(new_rows) - set(old_rows), key=order)]
        found["associations_removed"] = [AssociationPresenceChange(*key, "removed")
                                         for key in sorted(set(old_rows) - set(new_rows), key=order)]
        changes = []
        for key in sorted(set(old_rows) & set(new_rows), key=order):
            old, new = old_rows[key], new_rows[key]
            for field_name, before, after in (
                ("QOS", _names_text(old.qos), _names_text(new.qos)),
                ("Def QOS", _none_text(old.default_qos), _none_text(new.default_qos)),
                ("MaxWall", format_time_limit(old.max_wall_s), format_time_limit(new.max_wall_s)),
            ):
                if before != after:
                    changes.append(AssociationLimitChange(*key, field_name, before, after))
            changes += [AssociationLimitChange(*key, "MaxTRES", before, after)
                        for before, after in _tres_changes(old.max_tres_per_job, new.max_tres_per_job)]
        found["association_changes"] = changes
    if _parts_compared(a, b, "default_accounts", "default accounts", notes):
        found["default_account_changes"] = [
            DefaultAccountChange(user, a.default_accounts.get(user), b.default_accounts.get(user))
            for user in sorted(set(a.default_accounts) | set(b.default_accounts))
            if a.default_accounts.get(user) != b.default_accounts.get(user)
        ]
    found["site_parts"] = notes
    return {name: tuple(changes) for name, changes in found.items() if changes}


def diff_snapshots(a: EnvSnapshot, b: EnvSnapshot) -> SnapshotDiff:
    """What changed from ``a`` (older) to ``b`` (newer)."""
    added, removed, defaults = _module_diff(a.modules, b.modules)
    changes: list[PartitionLimitChange] = []
    for name in sorted(set(a.partitions) & set(b.partitions)):
        changes.extend(_partition_changes(a.partitions[name], b.partitions[name]))
    return SnapshotDiff(
        modules_added=added,
        modules_removed=removed,
        defaults_changed=defaults,
        partitions_added=tuple(
            PartitionPresenceChange(name, "added")
            for name in sorted(set(b.partitions) - set(a.partitions))
        ),
        partitions_removed=tuple(
            PartitionPresenceChange(name, "removed")
            for name in sorted(set(a.partitions) - set(b.partitions))
        ),
        partition_changes=tuple(changes),
        **_site_diff(a, b),
    )
