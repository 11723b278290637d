"""Read a site's limits beyond its partitions: nodes, QOS, associations, default accounts.

Formats (real examples in data/samples/env/real-slurm-limits/, see data/samples/env/README.md):

- ``scontrol show node --oneliner``: one record per line of ``Key=Value`` pairs;
- ``scontrol show node``: the same pairs spread over indented lines; a ``NodeName=`` pair
  always starts a new record, blank lines or not. Some values hold spaces (``OS=Linux
  6.1.0-13-amd64 #1 SMP ...``): a token without '=' continues the value before it. ``Reason=``
  (also ``Comment=``, ``Extra=``) is free text, '=' included, printed near the end: it runs to
  the end of its line, or on a ``--oneliner`` line to the next of those keys;
- ``sacctmgr show qos|assoc|user -P`` (``--parsable2``; ``-p`` adds a trailing '|', also
  read): a header line naming the columns, then one row per record. The header is
  required, because the columns differ between versions and ``format=`` lists; output taken
  with ``-n`` (no header) is refused with a one-line error.

Values keep Slurm's units (``kb/environment/site.py``): memory in MiB, times in seconds, and
None for "no limit" or "not printed". Lists whose order carries no meaning (GRES, features,
partitions, QOS) are sorted and free of duplicates, so the same site gives the same snapshot.
Every field as printed stays in ``raw``, except a node's runtime fields (load, memory in use,
busy times...): an hourly snapshot of a busy cluster must not differ from the last one only
because jobs ran. For the same reason a node's ``state`` keeps only what says whether it takes
jobs: ``UP`` for IDLE/MIXED/ALLOCATED, else the words DOWN, DRAIN, NOT_RESPONDING, ... as printed
(``node_availability``).

A listing with nothing in it is refused unless ``allow_empty``: a failed or cut-off capture
looks exactly like that, and stored it would read as "every node/QOS was removed".
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

from hpcmem.kb.environment.site import Association, NodeInfo, QosInfo
from hpcmem.kb.errors import InputError
from hpcmem.kb.slurm_units import parse_duration, parse_size_mb, parse_tres

__all__ = [
    "parse_scontrol_nodes",
    "node_availability",
    "parse_sacctmgr_qos",
    "parse_sacctmgr_assoc",
    "parse_sacctmgr_users",
    "live_nodes",
    "live_qos",
    "live_associations",
    "live_default_accounts",
]

# What scontrol and sacctmgr print for "nothing here".
_NULL = frozenset({"", "(null)", "N/A", "n/a", "none", "None"})
# Free text that Slurm prints near the end of a record: it may hold spaces and '=' ("Reason=
# epilog error exit=1 [root@2026-12-01T10:00:00]"), so it runs to the end of its line, or to
# the next of the keys that may follow it on a --oneliner line.
_FREE_TEXT = frozenset({"Reason", "Comment", "Extra"})
_AFTER_FREE_TEXT = frozenset({"Reason", "Comment", "Extra", "InstanceId", "InstanceType", "NodeName"})
# What changes while jobs run (load, memory and CPUs in use, power readings, busy and boot
# times, the node's owner): left out of ``raw``, so an hourly snapshot of a busy cluster
# stays the same one and is not stored again.
_RUNTIME_KEYS = frozenset({
    "CPUAlloc", "CPULoad", "AllocMem", "FreeMem", "State", "Owner", "MCS_label", "BootTime",
    "SlurmdStartTime", "LastBusyTime", "ResumeAfterTime", "AllocTRES", "GresUsed", "CapWatts",
    "CurrentWatts", "AveWatts", "LowestJoules", "ConsumedJoules", "ExtSensorsJoules",
    "ExtSensorsWatts", "ExtSensorsTemp",
})
# Words of a node State that say whether it takes jobs; the rest (IDLE, MIXED, ALLOCATED,
# COMPLETING, POWERED_DOWN, ...) say how busy it is or was a moment ago.
_AVAILABILITY_WORDS = ("DOWN", "DRAIN", "FAIL", "FUTURE", "MAINTENANCE", "NOT_RESPONDING", "RESERVED",
                       "INVALID_REG", "UNKNOWN", "CLOUD")


# ---------------------------------------------------------------------------
# Values


def _int(text: str | None, what: str) -> int | None:
    if text is None or text in _NULL or text.upper() == "UNLIMITED":
        return None
    if not text.isdigit():
        raise InputError(f"{what}={text!r} is not a number")
    return int(text)


def _memory_mb(text: str | None, what: str) -> int | None:
    """MiB in a node memory value (scontrol prints bare MiB; a suffix is also read)."""
    if text is None or text in _NULL:
        return None
    try:
        mb = parse_size_mb(text, bare_unit="M")
    except (ValueError, KeyError):
        raise InputError(f"{what}={text!r} is not a memory size") from None
    return None if mb is None else round(mb)


def _wall_s(text: str | None, what: str) -> int | None:
    """Seconds in a sacctmgr MaxWall (``01:00:00``, ``2-00:00:00``, bare minutes); empty or
    UNLIMITED is no limit."""
    if text is None or text in _NULL or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise InputError(f"{what}={text!r} is not a Slurm time limit") from None
    return None if seconds is None else int(seconds)


def _tres(text: str | None, what: str) -> dict[str, str]:
    if text is None or text in _NULL:
        return {}
    try:
        return parse_tres(text)
    except ValueError:
        raise InputError(f"{what}={text!r} is not a TRES list") from None


def _names(text: str | None) -> tuple[str, ...]:
    if text is None or text in _NULL:
        return ()
    return tuple(sorted({name for name in text.split(",") if name and name not in _NULL}))


def _gres(text: str | None) -> tuple[str, ...]:
    """``gpu:a100:4(S:0-1),shard:8`` -> ('gpu:a100:4', 'shard:8'). Commas inside the socket
    binding ``(S:0,2)`` do not split; ``(null)`` is none."""
    if text is None or text in _NULL:
        return ()
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    cleaned = {item.split("(", 1)[0].strip() for item in items}
    return tuple(sorted(item for item in cleaned if item and item not in _NULL))


# ---------------------------------------------------------------------------
# scontrol show node


def _node_records(text: str) -> list[tuple[int, dict[str, str]]]:
    """(line number of NodeName=, raw pairs) per node record, in either layout."""
    records: list[tuple[int, dict[str, str]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        last_key, free_text = None, False
        for token in line.split():
            key, sep, value = token.partition("=")
            starts_pair = bool(sep and key) and (not free_text or key in _AFTER_FREE_TEXT)
            if not starts_pair:
                if last_key is None:
                    raise InputError(f"line {number}: {token[:60]!r} is not a Key=Value pair of scontrol")
                records[-1][1][last_key] += " " + token  # OS=Linux 6.1.0 #1 SMP ...
                continue
            if key == "NodeName":
                if not value:  # a cut-off listing; a node needs a name
                    raise InputError(f"line {number}: NodeName= has no name")
                records.append((number, {}))
            elif not records:
                raise InputError(f"line {number}: {key}= comes before any NodeName=")
            records[-1][1][key] = value
            last_key, free_text = key, key in _FREE_TEXT
    return records


def node_availability(state: str | None) -> str | None:
    """A node State without the words that change with its load: ``DOWN+DRAIN+NOT_RESPONDING``
    stays, ``MIXED+DRAIN`` -> ``DRAIN``, and a node that takes jobs (``IDLE``, ``MIXED``,
    ``ALLOCATED``, ``IDLE+POWERED_DOWN``) is ``UP``. None when not printed."""
    if not state:
        return None
    words = [word for word in state.rstrip("*~#%$@^-!").split("+") if word in _AVAILABILITY_WORDS]
    return "+".join(words) or "UP"


def _node_from_raw(number: int, raw: dict[str, str]) -> NodeInfo:
    name = raw["NodeName"]

    def count(key: str) -> int | None:
        try:
            return _int(raw.get(key), key)
        except InputError as exc:
            raise InputError(f"line {number}: node {name}: {exc}") from None

    def memory(key: str) -> int | None:
        try:
            return _memory_mb(raw.get(key), key)
        except InputError as exc:
            raise InputError(f"line {number}: node {name}: {exc}") from None

    return NodeInfo(
        name=name,
        cpus=count("CPUTot"),
        real_memory_mb=memory("RealMemory"),
        mem_spec_limit_mb=memory("MemSpecLimit") or None,  # 0: nothing kept back
        sockets=count("Sockets"),
        cores_per_socket=count("CoresPerSocket"),
        threads_per_core=count("ThreadsPerCore"),
        gres=_gres(raw.get("Gres")),
        features=_names(raw.get("AvailableFeatures")),
        partitions=_names(raw.get("Partitions")),
        state=node_availability(raw.get("State")),
        raw={key: value for key, value in raw.items() if key not in _RUNTIME_KEYS},
    )


def parse_scontrol_nodes(text: str, allow_empty: bool = False) -> dict[str, NodeInfo]:
    """Read ``scontrol show node`` in either layout (``--oneliner`` or multi-line). Keys: node
    names, in order. InputError, naming the line, on anything that is not a ``Key=Value``
    pair, a pair before the first NodeName, a bad number and a repeated node; an empty
    listing (or scontrol's ``No nodes in the system``) unless ``allow_empty``."""
    if text.strip() == "No nodes in the system":
        text = ""
    nodes: dict[str, NodeInfo] = {}
    for number, raw in _node_records(text):
        info = _node_from_raw(number, raw)
        if info.name in nodes:
            raise InputError(f"line {number}: node {info.name!r} appears twice")
        nodes[info.name] = info
    if not nodes and not allow_empty:
        raise InputError("empty node listing" if not text.strip() else "no node in the listing",
                         hint="capture `scontrol show node --oneliner`; if the cluster really has none, "
                              "pass --allow-empty")
    return nodes


# ---------------------------------------------------------------------------
# sacctmgr -P tables


def _table(text: str, what: str, required: tuple[str, ...], command: str,
           allow_empty: bool) -> list[tuple[int, dict[str, str]]]:
    """(line number, column -> cell) per row of a ``sacctmgr -P`` listing with its header.

    The header must name every ``required`` column; ``-p``'s trailing '|' is dropped. A row
    with another number of cells than the header is an error naming its line."""
    lines = [(n, line.rstrip("\r")) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    hint = f"capture `{command}` (with its header line: no -n)"
    if not lines:
        if allow_empty:
            return []
        raise InputError(f"empty {what} listing", hint=hint)
    header_number, header_line = lines[0]
    trailing = header_line.endswith("|")
    header = (header_line[:-1] if trailing else header_line).split("|")
    header = [name.strip() for name in header]
    missing = [name for name in required if name not in header]
    if missing:
        raise InputError(f"line {header_number}: not a `{command}` header: {header_line[:80]!r} "
                         f"(no {', '.join(missing) or 'columns'})", hint=hint)
    if len(set(header)) != len(header):
        raise InputError(f"line {header_number}: a column appears twice in the header")
    rows = []
    for number, line in lines[1:]:
        if trailing and line.endswith("|"):
            line = line[:-1]
        cells = line.split("|")
        if len(cells) != len(header):
            raise InputError(f"line {number}: {len(cells)} cells, the header has {len(header)}: {line[:80]!r}")
        rows.append((number, dict(zip(header, cells))))
    if not rows and not allow_empty:
        raise InputError(f"no {what} in the listing",
                         hint=f"{hint}; if there really is none, pass --allow-empty")
    return rows


def _cell(number: int, reader: Callable, row: dict[str, str], column: str, what: str | None = None):
    try:
        return reader(row.get(column), what or column)
    except InputError as exc:
        raise InputError(f"line {number}: {exc}") from None


def parse_sacctmgr_qos(text: str, allow_empty: bool = False) -> dict[str, QosInfo]:
    """Read ``sacctmgr show qos -P`` (any column set that has ``Name``). Keys: QOS names."""
    qos: dict[str, QosInfo] = {}
    for number, row in _table(text, "QOS", ("Name",), "sacctmgr show qos -P", allow_empty):
        name = row["Name"].strip()
        if not name:
            raise InputError(f"line {number}: a QOS without a name")
        if name in qos:
            raise InputError(f"line {number}: QOS {name!r} appears twice")
        qos[name] = QosInfo(
            name=name,
            max_wall_s=_cell(number, _wall_s, row, "MaxWall"),
            max_tres_per_job=_cell(number, _tres, row, "MaxTRES"),
            max_tres_per_node=_cell(number, _tres, row, "MaxTRESPerNode"),
            max_tres_per_user=_cell(number, _tres, row, "MaxTRESPU"),
            max_jobs_per_user=_cell(number, _int, row, "MaxJobsPU"),
            max_submit_per_user=_cell(number, _int, row, "MaxSubmitPU"),
            flags=_names(row.get("Flags")),
            raw=row,
        )
    return qos


def parse_sacctmgr_assoc(text: str, allow_empty: bool = False) -> tuple[Association, ...]:
    """Read ``sacctmgr show assoc -P``: the default columns, or a ``format=`` list in any
    order that has ``Account``. Empty User/Partition are None (an account's own row, or an
    association valid on every partition); QOS is a comma list."""
    associations = []
    seen: dict[tuple, int] = {}
    for number, row in _table(text, "association", ("Account",), "sacctmgr show assoc -P", allow_empty):
        account = row["Account"].strip()
        if not account:
            raise InputError(f"line {number}: an association without an account")
        association = Association(
            cluster=row.get("Cluster") or None,
            account=account,
            user=row.get("User") or None,
            partition=row.get("Partition") or None,
            qos=_names(row.get("QOS")),
            default_qos=row.get("Def QOS") or None,
            max_wall_s=_cell(number, _wall_s, row, "MaxWall"),
            max_tres_per_job=_cell(number, _tres, row, "MaxTRES"),
            raw=row,
        )
        key = (association.cluster, association.account, association.user, association.partition)
        if key in seen:
            raise InputError(f"line {number}: association {_assoc_name(association)} appears twice "
                             f"(first on line {seen[key]})")
        seen[key] = number
        associations.append(association)
    return tuple(associations)


def _assoc_name(a: Association) -> str:
    who = f"{a.user}/{a.account}" if a.user else a.account
    return who + (f" on {a.partition}" if a.partition else "")


def parse_sacctmgr_users(text: str, allow_empty: bool = False) -> dict[str, str]:
    """Read ``sacctmgr show user -P`` (``User|Def Acct|Admin``): user -> default account.
    A user without a default account is left out; with ``-s`` (one row per association)
    a user's repeated rows must agree."""
    defaults: dict[str, str] = {}
    for number, row in _table(text, "user", ("User", "Def Acct"), "sacctmgr show user -P", allow_empty):
        user, account = row["User"].strip(), row["Def Acct"].strip()
        if not user:
            raise InputError(f"line {number}: a row without a user")
        if not account:
            continue
        if defaults.get(user, account) != account:
            raise InputError(f"line {number}: user {user!r} has two default accounts "
                             f"({defaults[user]}, {account})")
        defaults[user] = account
    return defaults


# ---------------------------------------------------------------------------
# Running Slurm


def _run(tool: str, args: list[str], what: str, timeout: float) -> str:
    """stdout of ``tool args``; InputError with the tool's last stderr line when it is missing
    or fails ('sacctmgr: error: Problem talking to the database: Connection refused')."""
    path = shutil.which(tool)
    if path is None:
        raise InputError(f"{tool} not found", hint="run on a Slurm login node, or read a saved capture")
    from hpcmem.ingest.commands import run_command

    proc = run_command([path, *args], timeout)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise InputError(f"{what} failed (exit {proc.returncode}): {lines[-1] if lines else 'no message'}",
                         hint="check that slurmctld (scontrol) or slurmdbd (sacctmgr) is reachable")
    return proc.stdout


def live_nodes(timeout: float = 60.0) -> dict[str, NodeInfo]:
    """Run ``scontrol --oneliner --future show node`` here: ``--future`` adds the nodes defined
    with State=FUTURE, which plain ``show node`` hides (they exist for submission checks)."""
    return parse_scontrol_nodes(_run("scontrol", ["--oneliner", "--future", "show", "node"], "scontrol show node",
                                     timeout))


def live_qos(timeout: float = 60.0) -> dict[str, QosInfo]:
    """Run ``sacctmgr -P show qos`` here."""
    return parse_sacctmgr_qos(_run("sacctmgr", ["-P", "show", "qos"], "sacctmgr show qos", timeout))


def live_associations(user: str | None = None, timeout: float = 60.0) -> tuple[Association, ...]:
    """Run ``sacctmgr -P show assoc`` here: every association, or ``user``'s only."""
    args = ["-P", "show", "assoc"] + ([f"user={user}"] if user else [])
    text = _run("sacctmgr", args, "sacctmgr show assoc", timeout)
    try:
        return parse_sacctmgr_assoc(text)
    except InputError as exc:
        if user and "no association" in str(exc):
            raise InputError(f"user {user} has no association in Slurm's accounting",
                             hint="ask the site to add one (`sacctmgr add user`), or check the name") from None
        raise


def live_default_accounts(user: str | None = None, timeout: float = 60.0) -> dict[str, str]:
    """Run ``sacctmgr -P show user`` here: every user's default account, or ``user``'s."""
    args = ["-P", "show", "user"] + ([user] if user else [])
    return parse_sacctmgr_users(_run("sacctmgr", args, "sacctmgr show user", timeout))
