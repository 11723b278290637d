"""A job still in the queue, read live: why Slurm is holding it, and what it asked.

``recall --job`` answers from a stored failure. A job that never started has none: it is
*pending*, and ``scontrol show job`` gives its Reason (``PartitionTimeLimit``,
``QOSMaxWallDurationPerJobLimit``, ``ReqNodeNotAvail``...). Some reasons mean the job will
never start as it is; recall explains those from the job's own request and the partitions.
"""

from __future__ import annotations

import shutil
from typing import Any

from hpcmem.ingest.epilog import parse_scontrol_job
from hpcmem.kb.jobs.context import clean_context
from hpcmem.kb.slurm_units import parse_size_mb, parse_timelimit


def live_job(job_id: str, timeout: float = 10.0) -> dict[str, str] | None:
    """``scontrol show job -o JOB`` as a dict, or None when there is no scontrol here or
    Slurm does not know the job (any more)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None or not job_id.replace("_", "").isdigit():
        return None
    from hpcmem.ingest.commands import run_command

    try:
        proc = run_command([scontrol, "--oneliner", "show", "job", job_id], timeout)
    except Exception:  # noqa: BLE001 - a controller that does not answer: recall says "not stored"
        return None
    if proc.returncode != 0:
        return None
    info = parse_scontrol_job(proc.stdout)
    return info or None


def pending(info: dict[str, str] | None) -> bool:
    return bool(info) and info.get("JobState") == "PENDING"


def pending_text(info: dict[str, str]) -> str:
    """The words recall looks the reason up by (as squeue prints them)."""
    return f"JobId={info.get('JobId')} JobState=PENDING Reason={info.get('Reason') or 'None'}"


def pending_context(info: dict[str, str]) -> dict[str, Any]:
    """The queued job's request, as kb/jobs/context.FIELDS."""
    ctx: dict[str, Any] = {"partition": info.get("Partition"), "account": info.get("Account"),
                           "qos": info.get("QOS"), "job_name": info.get("JobName"), "workdir": info.get("WorkDir")}
    try:
        ctx["time_limit_s"] = parse_timelimit(info.get("TimeLimit") or "")
    except ValueError:
        pass
    for key, field in (("NumCPUs", "cpus"), ("NumNodes", "nodes")):
        head = (info.get(key) or "").split("-", 1)[0]
        if head.isdigit():
            ctx[field] = int(head)
    mem = info.get("MinMemoryNode")
    try:
        if mem:
            ctx["mem_mb"] = parse_size_mb(mem)
    except (ValueError, KeyError):
        pass
    command = (info.get("Command") or "").split(" ", 1)[0]
    if command and command != "(null)":
        ctx["command"] = command.rsplit("/", 1)[-1]
    return clean_context({k: v for k, v in ctx.items() if v not in (None, "(null)")})


def answer_pending(recaller: Any, job_id: str, query: Any) -> dict[str, Any] | None:
    """The recall document for a job that is still queued (None when it is not): what is
    known about its Reason, and what to do about it, from its request and the partitions."""
    import dataclasses

    from hpcmem.kb.jobs.context import Facts, merge_contexts
    from hpcmem.kb.recall.advice import pending_advice

    info = live_job(job_id)
    if not pending(info):
        return None
    context = merge_contexts(query.context, pending_context(info))
    result = recaller.recall(dataclasses.replace(query, text=pending_text(info), job_id=None, context=context))
    result["query"]["job_id"] = job_id
    reason = info.get("Reason") or "None"
    result["pending"] = {"job_id": job_id, "reason": reason, "partition": info.get("Partition"),
                         "time_limit": info.get("TimeLimit"), "qos": info.get("QOS")}
    facts = {"req_time_s": context.get("time_limit_s"), "partition": context.get("partition"),
             "qos": context.get("qos"), "req_mem_mb": context.get("mem_mb"), "req_cpus": context.get("cpus")}
    site = _site_advice(recaller, job_id, reason, context, info)
    general = [] if site else pending_advice(job_id, reason, Facts(facts, _partitions(recaller)))
    advice = [{**item, "category": result["query"]["category"], "source": "rule", "trust_level": "rule"}
              for item in site + general]
    keys = ("cause", "fix", "actions", "category", "source", "trust_level", "check", "snapshot")
    result["advice"] = [{k: a[k] for k in keys if k in a} for a in advice] + result["advice"]
    return result


def _site_advice(recaller: Any, job_id: str, reason: str, context: dict[str, Any],
                 info: dict[str, str]) -> list[dict[str, Any]]:
    """The limit the queued job breaks, from the site's limits in the newest snapshot."""
    from hpcmem.kb.recall.submission_advice import pending_site_advice
    from hpcmem.kb.store.reader import newest_environment

    env = newest_environment(recaller.readers, recaller.config.get("cluster.name"))
    user = (info.get("UserId") or "").split("(", 1)[0]
    if not user:
        import getpass

        user = getpass.getuser()
    return pending_site_advice(job_id, reason, context, env, user)


def _partitions(recaller: Any) -> dict[str, Any]:
    """The partitions as Slurm has them now, else as the newest snapshot saw them."""
    try:
        from hpcmem.ingest.partitions import live_partitions

        return {"partitions": {name: p.to_dict() for name, p in live_partitions(timeout=10).items()}}
    except Exception:  # noqa: BLE001 - no controller: the stored snapshot, if any
        try:
            return recaller.readers[0].latest_environment() or {}
        except Exception:  # noqa: BLE001
            return {}
