"""Built-in advice for a refused submission, from the site's own limits (issue 27).

Slurm's rejections say little (``Requested node configuration is not available`` is memory,
CPUs or GRES alike). When recall knows the request (``--script``, ``--sbatch-args``, MCP's
``context``, a pasted ``sbatch`` line, a stored job) and the store has an environment snapshot
with the site's limits, ``kb/environment/site_check.py`` says which limit was broken, by how much and
what would be accepted - the same checks `hpcmem check` makes before a submission. Every item
names the snapshot it used and its age. Where the facts cannot decide, the item says which
command would.
"""

from __future__ import annotations

from typing import Any

from hpcmem.kb.environment.site_check import (Problem, age_text, check_request, has_request, kinds_for_message,
                                              snapshot_from_stored)

__all__ = ["submission_advice", "is_rejection"]

DATA_CONFIDENCE = 0.6  # the site's own numbers: above general advice, below a confirmed lesson


def is_rejection(text: str) -> bool:
    return bool(kinds_for_message(text))


def submission_advice(text: str, request: dict[str, Any], env: dict[str, Any] | None, user: str,
                      category: str) -> list[dict[str, Any]]:
    """Advice items for the rejection ``text`` of ``request`` (empty when ``text`` is none of
    Slurm's rejections)."""
    kinds = kinds_for_message(text)
    if not kinds:
        return []
    if not has_request(request):
        return [_item(category, "Slurm refused the submission; without the job's request recall cannot say "
                      "which limit it broke.",
                      "Pass the job script (`hpcmem recall --script job.sh ...`) or its options (`--sbatch-args "
                      "\"...\"`), or check it before submitting: `hpcmem check job.sh`.", [], None, None)]
    snapshot, about = _snapshot(env)
    if snapshot is None:
        return [_item(category, "Slurm refused the submission; no environment snapshot of the site is stored, "
                      "so its limits are not known here.",
                      "Check the request against the live site: `hpcmem check --live job.sh` (or take a snapshot "
                      "with `hpcmem env snapshot --live`).", [], None, None)]
    result = check_request(request, snapshot, user)
    relevant = [p for p in result.problems if p.kind in kinds]
    shown = relevant or result.problems
    source = _source_text(about)
    items = [_problem_item(category, p, source, about, explains=bool(relevant)) for p in shown]
    if result.fits_as_is and items:
        items[0]["fix"] += f" The request as it is fits with: {' or '.join(f'`{o}`' for o in result.fits_as_is)}."
    for u in result.undecided:
        items.append(_item(category, f"Not decided from the snapshot: {u.message}.",
                           f"Run `{u.command}` to see the limit.", [], None, about))
    if not shown:
        where = "" if snapshot.has_site_limits else " (it has partitions only: no nodes, QOS or associations)"
        items.insert(0, _item(category, f"The request fits the site as {source} describes it{where}, yet Slurm "
                              "refused it: the site may have changed since.",
                              "Check against the live site: `hpcmem check --live` with the same script or "
                              "--sbatch-args, or `scontrol show partition` and `sinfo -N -o '%N %c %m %G %f'`.",
                              [], None, about))
    return items


def _problem_item(category: str, p: Problem, source: str, about: dict[str, Any], explains: bool) -> dict[str, Any]:
    cause = f"Slurm refused the job: {p.message} ({source})."
    if not explains:
        cause = (f"The request breaks a limit ({source}), though not one that gives this message: {p.message}.")
    fix = ("Accepted instead: " + " or ".join(f"`{a}`" for a in p.accepted) + "."
           if p.accepted else f"Allowed: {p.allowed}.")
    actions = [_action(a, p.asked) for a in p.accepted[:1]]
    return _item(category, cause, fix, [a for a in actions if a], p, about)


def _action(option: str, asked: str) -> dict[str, Any] | None:
    if not option.startswith("--") or "=" not in option:
        return None
    name, _, value = option.partition("=")
    return {"type": "sbatch", "option": name, "to": value, "from": asked}


def _item(category: str, cause: str, fix: str, actions: list[dict[str, Any]], problem: Problem | None,
          about: dict[str, Any] | None) -> dict[str, Any]:
    item = {"rule": f"{category}.site_limits", "cause": cause, "fix": fix, "actions": actions,
            "confidence": DATA_CONFIDENCE if problem else 0.35}
    if problem is not None:
        item["check"] = problem.as_dict()
    if about is not None:
        item["snapshot"] = about
    return item


def _snapshot(env: dict[str, Any] | None):
    """(EnvSnapshot, about) from the store's latest environment, or (None, None)."""
    if not env or not env.get("partitions"):
        return None, None
    return snapshot_from_stored(env)


def _source_text(about: dict[str, Any]) -> str:
    name = f"snapshot {about['id']}" if about.get("id") is not None else "the latest snapshot"
    return f"{name}, {age_text(about.get('age_s'))}"


def pending_site_advice(job_id: str, reason: str, request: dict[str, Any], env: dict[str, Any] | None,
                        user: str) -> list[dict[str, Any]]:
    """For a job held with a Reason it can never start with (QOSMaxWallDurationPerJobLimit,
    PartitionConfig, AssocMaxCpuPerJobLimit...): the limit it breaks on the site, by how much,
    and what would let it start - lowered in place where Slurm lets a user do that (its time
    limit), else cancelled and resubmitted with what the site accepts."""
    if reason == "PartitionTimeLimit":
        return []  # the general pending advice reads the partitions live for it already
    kinds = kinds_for_message(reason)
    snapshot, about = _snapshot(env)
    if not kinds or snapshot is None or not snapshot.has_site_limits or not has_request(request):
        return []
    result = check_request(request, snapshot, user)
    items = []
    for p in (p for p in result.problems if p.kind in kinds):
        cause = f"Job {job_id} is pending and will never start as it is: {p.message} ({_source_text(about)})."
        actions = [a for a in (_action(option, p.asked) for option in p.accepted[:1]) if a]
        if p.kind in ("qos_max_wall", "assoc_max_wall", "partition_max_time") and p.accepted[0].startswith("--time="):
            limit = p.accepted[0].split("=", 1)[1]
            fix = (f"Lower its limit in place: `scontrol update JobId={job_id} TimeLimit={limit}` (you may lower "
                   f"your job's limit, not raise it)")
            actions = [{"type": "command", "command": f"scontrol update JobId={job_id} TimeLimit={limit}"}]
            others = [o for o in p.accepted[1:]] + list(result.fits_as_is)
            if others:
                fix += f"; or `scancel {job_id}` and resubmit with " + " or ".join(f"`{o}`" for o in others)
            fix += "."
        else:
            options = list(p.accepted) + list(result.fits_as_is)
            fix = (f"`scancel {job_id}` and resubmit with " + " or ".join(f"`{o}`" for o in options) + "."
                   if options else f"`scancel {job_id}`: the site allows at most {p.allowed}.")
        item = _item("pending", cause, fix, actions, p, about)
        items.append(item)
    return items
