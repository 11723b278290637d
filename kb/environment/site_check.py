"""Does a job request fit the site? The checks Slurm makes at submission, done from a snapshot.

``check_request(request, snapshot, user)`` compares one request (the flat context of
``kb/jobs/request.py``: ``--script``, ``--sbatch-args``, a pasted ``sbatch`` line, a stored job)
with the site's limits in an environment snapshot (partitions, nodes, QOS, associations:
``kb/environment/site.py``) and says which limit is broken, by how much, and what would be
accepted instead. ``hpcmem check`` runs it before a submission; recall runs it to explain a
rejection (``explain_rejection``) - one rule set for both, so the prediction and the
explanation cannot disagree.

The rules follow Slurm 22.05 with ``EnforcePartLimits=ALL`` (what sites that reject at
submission run), checked against the project's real harness (tests/integration/
test_submission_checks.py):

- the partition asked for (or the default one) exists and is UP;
- the account (asked for, or the user's default) is one of the user's associations, and that
  association covers the partition; the partition's AllowAccounts/DenyAccounts allow it;
- the QOS (asked for, or the association's default) is in the association's QOS list and
  allowed by the partition; ``--time`` fits its MaxWall, the association's MaxWall and the
  partition's MaxTime;
- some node of the partition has, at once, the memory per node (``--mem``, or
  ``--mem-per-cpu`` x CPUs per node; RealMemory less MemSpecLimit, and MaxMemPerNode), the
  CPUs per node (``--cpus-per-task``, or all tasks when they must share a node) and the GRES
  (name known to the site, type, count); the job's CPUs fit the partition's TotalCPUs; its
  node count fits the partition.

A fact the snapshot lacks is never guessed: the check is listed as ``undecided`` with the
command that would decide it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import Any

from hpcmem.kb.environment.rejections import KINDS_FOR_MESSAGE, kinds_for_message
from hpcmem.kb.environment.site import Association, NodeInfo, gres_units
from hpcmem.kb.environment.snapshot import EnvSnapshot, PartitionInfo
from hpcmem.kb.slurm_units import format_time_limit

__all__ = ["Problem", "Undecided", "CheckResult", "check_request", "KINDS_FOR_MESSAGE", "kinds_for_message",
           "snapshot_from_stored", "age_text", "REQUEST_KEYS", "has_request", "fix_refusals"]

# The job context fields (kb/jobs/context.FIELDS) that are the request: what the checks read.
REQUEST_KEYS = ("partition", "account", "qos", "mem_mb", "mem_per_cpu_mb", "cpus", "gpus", "gres", "nodes",
                "time_limit_s", "constraint", "cpus_per_task", "ntasks", "ntasks_per_node", "mincpus", "exclusive")


def has_request(context: dict[str, Any] | None) -> bool:
    """Whether a job context says anything the checks read (without it there is nothing to check)."""
    return any(key in (context or {}) for key in REQUEST_KEYS)

@dataclass
class Problem:
    """One limit the request breaks."""

    kind: str
    message: str  # one line for people
    asked: str
    allowed: str
    accepted: list[str] = field(default_factory=list)  # sbatch options that would be accepted

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "asked": self.asked, "allowed": self.allowed,
                "accepted": list(self.accepted)}


@dataclass
class Undecided:
    """A check the snapshot cannot decide, and the command that would."""

    kind: str
    message: str
    command: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "command": self.command}


@dataclass
class CheckResult:
    user: str
    partition: str | None
    account: str | None
    qos: str | None
    problems: list[Problem] = field(default_factory=list)
    undecided: list[Undecided] = field(default_factory=list)
    # When it does not fit: the same request elsewhere, e.g. "--partition=bigmem --qos=long"
    fits_as_is: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"fits": self.fits, "user": self.user, "partition": self.partition, "account": self.account,
                "qos": self.qos, "problems": [p.as_dict() for p in self.problems],
                "undecided": [u.as_dict() for u in self.undecided], "fits_as_is": list(self.fits_as_is)}


# --------------------------------------------------------------------------- the snapshot used


def snapshot_from_stored(found: dict[str, Any], store: str | None = None) -> tuple[EnvSnapshot, dict[str, Any]]:
    """(EnvSnapshot, what it is) from a store's latest environment (``StoreReader.
    latest_environment``: the snapshot's JSON parts plus id, taken_at, source). "What it is"
    names the snapshot and its age, which every answer built on it shows."""
    document = {"format": "hpcmem-env-snapshot", "version": 1,
                **{k: found.get(k) or {} for k in ("modules", "partitions", "nodes", "qos", "default_accounts")},
                "associations": found.get("associations") or []}
    snapshot = EnvSnapshot.from_json(json.dumps(document))
    taken = taken_at(found)
    about = {"id": found.get("id"), "store": store or found.get("store"),
             "taken_at": taken.isoformat() if taken else None,
             "age_s": int((dt.datetime.now(dt.timezone.utc) - taken).total_seconds()) if taken else None,
             "source": found.get("source"), "site_limits": snapshot.has_site_limits}
    return snapshot, about


def taken_at(found: dict[str, Any]) -> dt.datetime | None:
    value = found.get("taken_at")
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)  # the store keeps UTC


def age_text(seconds: int | None) -> str:
    if seconds is None:
        return "age unknown"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} old"
    return f"{seconds} s old"


# --------------------------------------------------------------------------- values for people


def mem_text(mb: float) -> str:
    """MiB as sbatch takes it: 2000M, 32G."""
    mb = int(math.floor(mb))
    return f"{mb // 1024}G" if mb >= 1024 and mb % 1024 == 0 else f"{mb}M"


def time_text(seconds: int | None) -> str:
    return format_time_limit(seconds, "UNLIMITED")


def _names(items) -> str:
    return ", ".join(items)


# --------------------------------------------------------------------------- the site, seen by one user


class _Site:
    """The snapshot's facts, with the questions the checks ask of them."""

    def __init__(self, snapshot: EnvSnapshot, user: str):
        self.s = snapshot
        self.user = user
        self.assocs = [a for a in snapshot.associations if a.user == user]

    # partitions ---------------------------------------------------------------
    def default_partition(self) -> str | None:
        return next((name for name, p in self.s.partitions.items() if p.is_default), None)

    def nodes_of(self, partition: str) -> list[NodeInfo]:
        return [n for n in self.s.nodes.values() if partition in n.partitions]

    def usable_partitions(self, account: str | None) -> list[str]:
        """Partitions that are UP and that the user may use under ``account`` (any of the
        user's accounts when None); all UP partitions when associations are unknown."""
        names = []
        for name, p in self.s.partitions.items():
            if p.state not in (None, "UP"):
                continue
            if self.assocs:
                accounts = [account] if account else sorted({a.account for a in self.assocs})
                if not any(self.association(acc, name) and _account_allowed(p, acc) for acc in accounts):
                    continue
            names.append(name)
        return names

    # associations -------------------------------------------------------------
    def association(self, account: str, partition: str) -> Association | None:
        """The user's association for (account, partition): a partition-specific one first."""
        rows = [a for a in self.assocs if a.account == account and a.partition in (None, partition)]
        rows.sort(key=lambda a: a.partition is None)
        return rows[0] if rows else None

    def default_account(self) -> str | None:
        return self.s.default_accounts.get(self.user)


def _account_allowed(p: PartitionInfo, account: str) -> bool:
    if p.allow_accounts is not None and account not in p.allow_accounts:
        return False
    return account not in p.deny_accounts


def _qos_allowed(p: PartitionInfo, qos: str) -> bool:
    if p.allow_qos is not None and qos not in p.allow_qos:
        return False
    return qos not in p.deny_qos


# --------------------------------------------------------------------------- the request's shape


@dataclass
class _Shape:
    """What one node must give the job, and what the whole job asks."""

    nodes: int
    cpus_per_node: int
    cpus_total: int
    mem_per_node_mb: float | None
    gres: list[tuple[str, str | None, int]]  # per node
    mem_per_cpu_mb: float | None = None  # when memory was asked per CPU

    def mem_asked(self) -> str:
        if self.mem_per_cpu_mb is not None:
            return (f"--mem-per-cpu={mem_text(self.mem_per_cpu_mb)} x {self.cpus_per_node} CPUs = "
                    f"{mem_text(self.mem_per_node_mb)} per node")
        return f"--mem={mem_text(self.mem_per_node_mb)} per node"

    def mem_option(self, mb: float) -> str:
        """The option that asks ``mb`` per node the way the job asked its memory."""
        if self.mem_per_cpu_mb is not None:
            return f"--mem-per-cpu={mem_text(mb // self.cpus_per_node)}"
        return f"--mem={mem_text(mb)}"


def _shape(req: dict[str, Any]) -> _Shape:
    nodes = int(req.get("nodes") or 1)
    per_task = int(req.get("cpus_per_task") or 1)
    tasks = req.get("ntasks")
    per_node_tasks = req.get("ntasks_per_node")
    total = int(req.get("cpus") or per_task * int(tasks or 1))
    if per_node_tasks:
        cpn = per_task * int(per_node_tasks)
    elif tasks:
        # tasks are spread over the nodes; one node takes at least a whole task
        cpn = max(per_task, per_task * math.ceil(int(tasks) / nodes))
    else:
        cpn = max(per_task, math.ceil(total / nodes))
    cpn = max(cpn, int(req.get("mincpus") or 0))  # --mincpus: that many on each node
    mem, per_cpu = req.get("mem_mb"), None
    if mem is None and req.get("mem_per_cpu_mb") is not None:
        per_cpu = float(req["mem_per_cpu_mb"])
        mem = per_cpu * cpn
    gres = gres_units(req.get("gres") or [])
    if req.get("gpus") and not any(name == "gpu" for name, _, _ in gres):
        gres.append(("gpu", None, int(req["gpus"])))
    return _Shape(nodes, cpn, total, mem, gres, per_cpu)


def _gres_count(node: NodeInfo, name: str, kind: str | None) -> int:
    return sum(c for n, k, c in gres_units(node.gres) if n == name and (kind is None or k == kind))


# --------------------------------------------------------------------------- the checks


def check_request(request: dict[str, Any], snapshot: EnvSnapshot, user: str) -> CheckResult:
    """Every limit ``request`` breaks on the site of ``snapshot``, for ``user``; when it breaks
    one, where the same request would be accepted unchanged (another partition and/or QOS)."""
    result = _check(request, snapshot, user)
    if result.problems and not any(p.kind.startswith("account") for p in result.problems):
        result.fits_as_is = _elsewhere(request, snapshot, user, result)
    return result


def _elsewhere(request: dict[str, Any], snapshot: EnvSnapshot, user: str, result: CheckResult,
               most: int = 3) -> list[str]:
    """Up to ``most`` partition/QOS choices the user may use where ``request`` fits as it is."""
    site = _Site(snapshot, user)
    account = result.account
    found = []
    for name in site.usable_partitions(account):
        assoc = site.association(account, name) if account else None
        choices = [request.get("qos")] if request.get("qos") else [None]
        choices += [q for q in (assoc.qos if assoc else ()) if q not in choices]
        for qos in choices:
            if name == result.partition and qos in (None, request.get("qos")):
                continue  # the request as given
            trial = {**request, "partition": name, **({"qos": qos} if qos else {})}
            if not _check(trial, snapshot, user).problems:
                changed = [f"--partition={name}"] if name != result.partition else []
                changed += [f"--qos={qos}"] if qos and qos != result.qos else []
                if changed:
                    found.append(" ".join(changed))
                break
        if len(found) >= most:
            break
    return found


def _check(request: dict[str, Any], snapshot: EnvSnapshot, user: str) -> CheckResult:
    site = _Site(snapshot, user)
    name = request.get("partition") or site.default_partition()
    result = CheckResult(user=user, partition=name, account=request.get("account"), qos=request.get("qos"))
    if not snapshot.partitions:
        result.undecided.append(Undecided("partition", "the snapshot has no partitions",
                                          "hpcmem env snapshot --live"))
        return result
    if name is None:
        result.problems.append(Problem("partition_unknown", "no --partition given and the site has no default "
                                       "partition", "(none)", _names(snapshot.partitions),
                                       [f"--partition={p}" for p in site.usable_partitions(None)[:3]]))
        return result
    partition = snapshot.partitions.get(name)
    if partition is None:
        usable = site.usable_partitions(request.get("account"))
        result.problems.append(Problem("partition_unknown", f"partition {name} does not exist; the site has "
                                       f"{_names(snapshot.partitions)}", name, _names(snapshot.partitions),
                                       [f"--partition={p}" for p in usable[:3]]))
        return result
    if partition.state not in (None, "UP"):
        others = [p for p in site.usable_partitions(request.get("account")) if p != name]
        result.problems.append(Problem("partition_down", f"partition {name} is {partition.state}: it takes no "
                                       "jobs now", partition.state, "UP", [f"--partition={p}" for p in others[:3]]))
    if partition.allow_groups is not None:
        # the user's Unix groups are not in the snapshot: say so rather than guess
        result.undecided.append(Undecided(
            "partition_groups", f"partition {name} takes only the groups {_names(partition.allow_groups) or '(none)'}",
            f"id -Gn {user}"))
    _check_account_and_qos(request, site, partition, result)
    _check_time(request, site, partition, result)
    _check_tres_limits(request, site, partition, result)
    _check_resources(request, site, partition, result)
    return result


def _job_tres(shape: "_Shape") -> dict[str, float]:
    """The job's TRES as limits count them (per job): cpu, mem (MiB), node, gres/NAME."""
    tres = {"cpu": float(shape.cpus_total), "node": float(shape.nodes)}
    if shape.mem_per_node_mb:
        tres["mem"] = shape.mem_per_node_mb * shape.nodes
    for name, _, count in shape.gres:
        tres[f"gres/{name}"] = tres.get(f"gres/{name}", 0) + float(count * shape.nodes)
    return tres


def _tres_limit(key: str, value: str) -> float | None:
    from hpcmem.kb.slurm_units import parse_size_mb

    try:
        return parse_size_mb(value) if key == "mem" else float(value)
    except (ValueError, KeyError, TypeError):
        return None


def _check_tres_limits(req: dict[str, Any], site: _Site, p: PartitionInfo, result: CheckResult) -> None:
    """Per-job TRES limits of the QOS (MaxTRES) and of the association (MaxTRES)."""
    shape = _shape(req)
    job = _job_tres(shape)
    qos = site.s.qos.get(result.qos or "")
    assoc = site.association(result.account, p.name) if result.account else None
    for kind, owner, limits in (("qos_max_tres", f"QOS {result.qos}", qos.max_tres_per_job if qos else {}),
                                ("assoc_max_tres", f"association {site.user}/{result.account}",
                                 assoc.max_tres_per_job if assoc else {})):
        for key, text in sorted(limits.items()):
            limit = _tres_limit(key, text)
            asked = job.get(key)
            if limit is None or asked is None or asked <= limit:
                continue
            show = mem_text if key == "mem" else (lambda v: str(int(v)))
            accepted = {"cpu": [], "node": [f"--nodes={int(limit)}"], "mem": []}.get(key, [])
            if key.startswith("gres/") and shape.nodes == 1:
                accepted = [f"--gres={key[5:]}:{int(limit)}"]
            result.problems.append(Problem(
                kind, f"the job asks {key}={show(asked)}; {owner} allows at most {show(limit)} per job (MaxTRES)",
                f"{key}={show(asked)}", f"{key}={show(limit)}", accepted))


def _check_account_and_qos(req: dict[str, Any], site: _Site, p: PartitionInfo, result: CheckResult) -> None:
    account = req.get("account") or site.default_account()
    result.account = account
    if not site.assocs:
        result.undecided.append(Undecided(
            "account", f"the snapshot has no associations for user {site.user}",
            f"sacctmgr -P show assoc user={site.user} format=Account,Partition,QOS,DefaultQOS"))
        return
    accounts = sorted({a.account for a in site.assocs})
    if account is None:
        result.undecided.append(Undecided("account", f"no --account given and no default account of {site.user} "
                                          "in the snapshot", f"sacctmgr -P show user {site.user}"))
        account = accounts[0] if len(accounts) == 1 else None
        if account is None:
            return
    if account not in accounts:
        fitting = [a for a in accounts if site.association(a, p.name) and _account_allowed(p, a)]
        result.problems.append(Problem("account_unknown", f"user {site.user} has no association with account "
                                       f"{account}; theirs: {_names(accounts)}", account, _names(accounts),
                                       [f"--account={a}" for a in fitting]))
        return
    assoc = site.association(account, p.name)
    if assoc is None or not _account_allowed(p, account):
        other_accounts = [a for a in accounts if site.association(a, p.name) and _account_allowed(p, a)]
        other_partitions = [n for n in site.usable_partitions(account) if n != p.name]
        why = ("its associations cover only " + _names(sorted({a.partition for a in site.assocs
                                                               if a.account == account and a.partition})))
        if assoc is not None:
            why = f"partition {p.name} does not allow account {account} (AllowAccounts/DenyAccounts)"
        result.problems.append(Problem(
            "account_partition", f"account {account} may not use partition {p.name}: {why}",
            f"{account} on {p.name}", _names(other_accounts) or "(no account of yours)",
            [f"--account={a}" for a in other_accounts] + [f"--partition={n}" for n in other_partitions]))
        return
    qos = req.get("qos") or assoc.default_qos or ("normal" if "normal" in assoc.qos else None)
    result.qos = qos
    if qos is None:
        return
    allowed = [q for q in assoc.qos if _qos_allowed(p, q)]
    if (site.s.qos and qos not in site.s.qos) or (assoc.qos and qos not in assoc.qos):
        result.problems.append(Problem("qos_unknown", f"QOS {qos} is not one that {site.user}/{account} may use; "
                                       f"allowed: {_names(assoc.qos) or '(none)'}", qos, _names(assoc.qos),
                                       [f"--qos={q}" for q in allowed]))
        return
    if not _qos_allowed(p, qos):
        result.problems.append(Problem("qos_partition", f"partition {p.name} does not allow QOS {qos}", qos,
                                       _names(allowed), [f"--qos={q}" for q in allowed]))


def _check_time(req: dict[str, Any], site: _Site, p: PartitionInfo, result: CheckResult) -> None:
    asked = req.get("time_limit_s")
    if asked is None:
        return  # Slurm gives the partition's DefaultTime (or caps it at the QOS's MaxWall)
    if p.max_time_s is not None and asked > p.max_time_s:
        fitting = [n for n in site.usable_partitions(result.account)
                   if n != p.name and (site.s.partitions[n].max_time_s is None
                                       or site.s.partitions[n].max_time_s >= asked)]
        result.problems.append(Problem(
            "partition_max_time", f"--time={time_text(asked)} is longer than partition {p.name}'s MaxTime "
            f"{time_text(p.max_time_s)} (by {time_text(asked - p.max_time_s)})", time_text(asked),
            time_text(p.max_time_s), [f"--time={time_text(p.max_time_s)}"] + [f"--partition={n}" for n in fitting]))
    qos = site.s.qos.get(result.qos or "")
    if qos is not None and qos.max_wall_s is not None and asked > qos.max_wall_s:
        assoc = site.association(result.account, p.name) if result.account else None
        longer = [q for q in (assoc.qos if assoc else ()) if q in site.s.qos and _qos_allowed(p, q)
                  and (site.s.qos[q].max_wall_s is None or site.s.qos[q].max_wall_s >= asked)]
        result.problems.append(Problem(
            "qos_max_wall", f"--time={time_text(asked)} is longer than QOS {qos.name}'s MaxWall "
            f"{time_text(qos.max_wall_s)} (by {time_text(asked - qos.max_wall_s)})", time_text(asked),
            time_text(qos.max_wall_s), [f"--time={time_text(qos.max_wall_s)}"] + [f"--qos={q}" for q in longer]))
    if result.qos is not None and site.s.qos and qos is None and not any(
            pr.kind == "qos_unknown" for pr in result.problems):
        result.undecided.append(Undecided("qos_max_wall", f"QOS {result.qos} is not in the snapshot",
                                          f"sacctmgr -P show qos {result.qos} format=Name,MaxWall"))
    assoc = site.association(result.account, p.name) if result.account else None
    if assoc is not None and assoc.max_wall_s is not None and asked > assoc.max_wall_s:
        result.problems.append(Problem(
            "assoc_max_wall", f"--time={time_text(asked)} is longer than the MaxWall of association "
            f"{site.user}/{assoc.account} ({time_text(assoc.max_wall_s)})", time_text(asked),
            time_text(assoc.max_wall_s), [f"--time={time_text(assoc.max_wall_s)}"]))


def _check_resources(req: dict[str, Any], site: _Site, p: PartitionInfo, result: CheckResult) -> None:
    shape = _shape(req)
    nodes = site.nodes_of(p.name)
    known_gres = {n for node in site.s.nodes.values() for n, _, _ in gres_units(node.gres)}
    problems = result.problems
    others = [n for n in site.usable_partitions(result.account) if n != p.name]

    for gname, _, _ in shape.gres:
        if site.s.nodes and gname not in known_gres:
            problems.append(Problem("gres_unknown", f"no node of the site has GRES {gname!r}; the site's GRES: "
                                    f"{_names(sorted(known_gres)) or '(none)'}", gname,
                                    _names(sorted(known_gres)) or "(none)",
                                    [f"--gres={g}:1" for g in sorted(known_gres)]))
    total_nodes = p.total_nodes if p.total_nodes is not None else (len(nodes) or None)
    for limit, label in ((p.max_nodes, "MaxNodes"), (total_nodes, "TotalNodes")):
        if limit is not None and shape.nodes > limit:
            problems.append(Problem("nodes_count", f"--nodes={shape.nodes} is more than partition {p.name}'s "
                                    f"{label} {limit}", str(shape.nodes), str(limit), [f"--nodes={limit}"]))
            break
    if p.total_cpus is not None and shape.cpus_total > p.total_cpus:
        problems.append(Problem("cpus_total", f"the job asks {shape.cpus_total} CPUs; partition {p.name} has "
                                f"{p.total_cpus} in all", str(shape.cpus_total), str(p.total_cpus),
                                _bigger(site, others, "cpus_total", shape.cpus_total)))
    if p.max_mem_per_node_mb is not None and shape.mem_per_node_mb and shape.mem_per_node_mb > p.max_mem_per_node_mb:
        problems.append(Problem("memory_per_node", f"{shape.mem_asked()} is more than partition {p.name}'s "
                                f"MaxMemPerNode {mem_text(p.max_mem_per_node_mb)}",
                                mem_text(shape.mem_per_node_mb), mem_text(p.max_mem_per_node_mb),
                                [shape.mem_option(p.max_mem_per_node_mb)]))
    if shape.mem_per_node_mb is None and p.max_mem_per_node_mb is not None:
        _check_default_memory(req, p, nodes, result)
    if not nodes:
        if not site.s.nodes:
            result.undecided.append(Undecided("nodes", "the snapshot has no nodes: memory, CPUs and GRES per node "
                                              "are not checked", f"sinfo -N -p {p.name} -o '%N %c %m %G %f'"))
        return
    _check_per_node(shape, req, site, p, nodes, others, result)


def _check_default_memory(req: dict[str, Any], p: PartitionInfo, nodes: list[NodeInfo], result: CheckResult) -> None:
    """No --mem: Slurm gives the partition's default, checked against MaxMemPerNode only when
    the job is scheduled - and refused then with "Requested partition configuration not
    available now" (job_mgr.c, job_limits_check). CPUs per node as that check counts them:
    cpus-per-task x ntasks-per-node, or the whole node with --exclusive."""
    if p.def_mem_per_cpu_mb is not None:
        if req.get("exclusive"):
            cpus = min((n.cpus or 0) for n in nodes) if nodes else None
            if not cpus:
                return
            how = f"--exclusive: all {cpus} CPUs of a node"
        else:
            cpus = int(req.get("cpus_per_task") or 1) * int(req.get("ntasks_per_node") or 1)
            cpus = max(cpus, int(req.get("mincpus") or 0))
            how = f"{cpus} CPU{'s' if cpus > 1 else ''} per node"
        default = p.def_mem_per_cpu_mb * cpus
        text = f"DefMemPerCPU {mem_text(p.def_mem_per_cpu_mb)} x {how} = {mem_text(default)}"
    elif p.def_mem_per_node_mb is not None:
        default, text = p.def_mem_per_node_mb, f"DefMemPerNode {mem_text(p.def_mem_per_node_mb)}"
    else:
        return  # the cluster's own default (slurm.conf) is not in the partition listing
    if default > p.max_mem_per_node_mb:
        result.problems.append(Problem(
            "memory_per_node", f"no --mem given: partition {p.name} gives {text}, more than its MaxMemPerNode "
            f"{mem_text(p.max_mem_per_node_mb)}", f"(default) {mem_text(default)}", mem_text(p.max_mem_per_node_mb),
            [f"--mem={mem_text(p.max_mem_per_node_mb)}"]))


def _check_per_node(shape: _Shape, req: dict[str, Any], site: _Site, p: PartitionInfo, nodes: list[NodeInfo],
                    others: list[str], result: CheckResult) -> None:
    problems = result.problems
    largest_mem = max((n.job_memory_mb or 0) for n in nodes)
    capped = any(pr.kind == "memory_per_node" for pr in problems)  # MaxMemPerNode said it already
    if shape.mem_per_node_mb and shape.mem_per_node_mb > largest_mem and not capped:
        by = shape.mem_per_node_mb - largest_mem
        problems.append(Problem(
            "memory_per_node", f"{shape.mem_asked()}: the largest node of partition {p.name} has "
            f"{mem_text(largest_mem)} for jobs (short by {mem_text(by)})"
            + _where(site, others, "memory", shape.mem_per_node_mb), mem_text(shape.mem_per_node_mb),
            mem_text(largest_mem), [shape.mem_option(largest_mem)]
            + _bigger(site, others, "memory", shape.mem_per_node_mb)))
    most_cpus = max((n.cpus or 0) for n in nodes)
    if shape.cpus_per_node > most_cpus:
        problems.append(Problem(
            "cpus_per_node", f"{shape.cpus_per_node} CPUs on one node: the largest node of partition {p.name} has "
            f"{most_cpus}" + _where(site, others, "cpus", shape.cpus_per_node), str(shape.cpus_per_node),
            str(most_cpus), [f"--cpus-per-task={most_cpus}" if not req.get("ntasks") else f"--ntasks={most_cpus}"]
            + _bigger(site, others, "cpus", shape.cpus_per_node)))
    for gname, kind, count in shape.gres:
        if gname not in {n for node in site.s.nodes.values() for n, _, _ in gres_units(node.gres)}:
            continue  # gres_unknown, reported above
        label = f"{gname}:{kind}" if kind else gname
        have = max(_gres_count(n, gname, kind) for n in nodes)
        if kind and have == 0:
            types = sorted({k for node in nodes for n, k, _ in gres_units(node.gres) if n == gname and k})
            elsewhere = [n for n in others if any(_gres_count(x, gname, kind) >= count for x in site.nodes_of(n))]
            problems.append(Problem(
                "gres_type", f"no node of partition {p.name} has GRES {label}; its {gname} types: "
                f"{_names(types) or '(untyped)'}", label, _names(types) or gname,
                [f"--gres={gname}:{t}:{count}" for t in types] + [f"--partition={n}" for n in elsewhere]))
        elif count > have:
            elsewhere = [n for n in others if any(_gres_count(x, gname, kind) >= count for x in site.nodes_of(n))]
            problems.append(Problem(
                "gres_count", f"{count} x {label} per node: the nodes of partition {p.name} have at most {have}"
                + (f"; partitions with {count}: {_names(elsewhere)}" if elsewhere else ""), f"{label}:{count}",
                str(have), ([f"--gres={label}:{have}"] if have else []) + [f"--partition={n}" for n in elsewhere]))
    constraint = req.get("constraint")
    if constraint and not any(_features_match(constraint, n.features) for n in nodes):
        features = sorted({f for n in nodes for f in n.features})
        problems.append(Problem("feature_unknown", f"no node of partition {p.name} has the features "
                                f"{constraint!r}; they have {_names(features) or '(none)'}", constraint,
                                _names(features) or "(none)", [f"--constraint={f}" for f in features[:3]]))
    resource_problem = any(pr.kind in _RESOURCE_KINDS for pr in problems)
    if not resource_problem and not any(_node_fits(n, shape, constraint) for n in nodes):
        problems.append(Problem("node_combination", f"no single node of partition {p.name} has all of it at once "
                                f"({_shape_text(shape)})", _shape_text(shape), "see sinfo",
                                _bigger(site, others, "all", shape)))


_RESOURCE_KINDS = frozenset({"memory_per_node", "cpus_per_node", "cpus_total", "nodes_count", "gres_unknown",
                             "gres_type", "gres_count", "feature_unknown"})


def _node_fits(node: NodeInfo, shape: _Shape, constraint: str | None) -> bool:
    if shape.mem_per_node_mb and shape.mem_per_node_mb > (node.job_memory_mb or 0):
        return False
    if shape.cpus_per_node > (node.cpus or 0):
        return False
    if any(_gres_count(node, n, k) < c for n, k, c in shape.gres):
        return False
    return not constraint or _features_match(constraint, node.features)


def _features_match(constraint: str, features: tuple[str, ...]) -> bool:
    """Slurm's simple constraint forms: a&b (all), a|b (any), a,b (all); brackets and counts
    are read as their plain names."""
    text = constraint.replace("[", "").replace("]", "")
    have = set(features)
    return any(all(term.split("*", 1)[0] in have for term in group.replace(",", "&").split("&") if term)
               for group in text.split("|"))


def _shape_text(shape: _Shape) -> str:
    parts = [f"{shape.cpus_per_node} CPUs"]
    if shape.mem_per_node_mb:
        parts.append(mem_text(shape.mem_per_node_mb))
    parts += [f"{n}:{k}:{c}" if k else f"{n}:{c}" for n, k, c in shape.gres]
    return ", ".join(parts)


def _bigger(site: _Site, partitions: list[str], what: str, need) -> list[str]:
    """``--partition=X`` for the partitions (the user may use) where ``need`` fits."""
    fits = []
    for name in partitions:
        nodes = site.nodes_of(name)
        p = site.s.partitions[name]
        if what == "memory":
            ok = any((n.job_memory_mb or 0) >= need for n in nodes) and (
                p.max_mem_per_node_mb is None or p.max_mem_per_node_mb >= need)
        elif what == "cpus":
            ok = any((n.cpus or 0) >= need for n in nodes)
        elif what == "cpus_total":
            ok = p.total_cpus is not None and p.total_cpus >= need
        else:
            ok = any(_node_fits(n, need, None) for n in nodes)
        if ok:
            fits.append(f"--partition={name}")
    return fits


def _where(site: _Site, partitions: list[str], what: str, need: float) -> str:
    names = [option.split("=", 1)[1] for option in _bigger(site, partitions, what, need)]
    return f"; partitions with nodes that large: {_names(names)}" if names else "; no partition you may use has one"


# --------------------------------------------------------------------------- a lesson's fix, today


# What each sbatch option of a fix can run into: a limit of another kind is not the fix's business.
_FIX_KINDS = {
    "--mem": {"memory_per_node", "node_combination", "qos_max_tres", "assoc_max_tres"},
    "--time": {"partition_max_time", "qos_max_wall", "assoc_max_wall"},
    "--partition": {"partition_unknown", "partition_down", "account_partition", "memory_per_node", "cpus_per_node",
                    "cpus_total", "gres_count", "gres_type", "node_combination", "partition_max_time", "nodes_count"},
    "--qos": {"qos_unknown", "qos_partition", "qos_max_wall", "qos_max_tres"},
    "--account": {"account_unknown", "account_partition", "assoc_max_wall", "assoc_max_tres"},
    "--gres": {"gres_unknown", "gres_type", "gres_count", "node_combination"},
    "--cpus-per-task": {"cpus_per_node", "cpus_total", "node_combination"},
    "--nodes": {"nodes_count"}, "--constraint": {"feature_unknown"},
}
for _option, _same in (("--mem-per-cpu", "--mem"), ("--gpus", "--gres"), ("--gpus-per-node", "--gres"),
                       ("--ntasks", "--cpus-per-task"), ("--mincpus", "--cpus-per-task")):
    _FIX_KINDS[_option] = _FIX_KINDS[_same]
# Limits that depend on who submits: judged only for a user the snapshot knows.
_PER_USER = {"account_unknown", "account_partition", "qos_unknown", "qos_partition", "assoc_max_wall",
             "assoc_max_tres"}


def fix_refusals(job_context: dict[str, Any] | None, actions: list[dict[str, Any]], snapshot: EnvSnapshot,
                 user: str | None) -> list[Problem]:
    """The limits the job of a lesson, resubmitted with its fix's sbatch options, would break on
    the site of ``snapshot`` - only those the fix's options bear on (a lesson raising --time
    to 12 h on a partition whose MaxTime is now 8 h). Empty when the fix has no sbatch option."""
    from hpcmem.kb.jobs.request import from_options  # the one request parser (jobs is below us)

    pairs = [(str(a["option"]), str(a.get("to") or "")) for a in actions or []
             if a.get("type") == "sbatch" and str(a.get("option") or "") in _FIX_KINDS]
    if not pairs:
        return []
    request = {k: v for k, v in (job_context or {}).items() if k in REQUEST_KEYS}
    try:
        fixed = from_options(pairs)
    except Exception:  # noqa: BLE001 - a fix value we cannot read is not a reason to expire
        return []
    if "mem_mb" in fixed:
        request.pop("mem_per_cpu_mb", None)
    if "mem_per_cpu_mb" in fixed:
        request.pop("mem_mb", None)
    request.update(fixed)
    if "cpus_per_task" in fixed or "ntasks" in fixed:
        request["cpus"] = int(request.get("cpus_per_task") or 1) * int(request.get("ntasks") or 1)
    known_user = bool(user) and any(a.user == user for a in snapshot.associations)
    kinds = set().union(*(_FIX_KINDS[option] for option, _ in pairs))
    if not known_user:
        kinds -= _PER_USER
    result = check_request(request, snapshot, user or "")
    return [p for p in result.problems if p.kind in kinds]
