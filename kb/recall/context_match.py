"""Context as evidence: does a stored lesson's job look like the new one, and can its fix
still help?

The same message has different causes in different jobs (an OOM at 8G and at 32G share a
fingerprint; ``Requested node configuration is not available`` is memory, CPUs or GPUs), so
recall compares the query's job context with the context the lesson was born with
(``kb/jobs/context.FIELDS``). Only the fields that matter to the lesson count:

- the fields its fix changes (``--mem`` -> memory, ``module load`` -> modules, ``-p`` -> partition);
- the fields its failure category depends on (``DECISIVE``, ``SOFT``: an OOM depends on memory, a
  rejected GRES request on the GPUs asked for);
- the same script (digest) or program, which says it is the same job; a lesson whose fix is
  sized for another program's job (its ``--mem``, ``--time``, CPUs) is at most related unless
  a fact its fix or failure decisively depends on agrees and none of those differs.

Each counted field either *agrees* or *differs* (``{"field": "mem", "query": "32G", "lesson":
"8G"}``); a field one side does not know is no evidence either way. Amounts agree within a
twentieth, the gap between binary and decimal units (8G and 8000M ask the same, 90M and 100M
do not); memory is what a node gave the job
(``--mem``, or ``--mem-per-cpu`` x CPUs). For a refused request (``Requested node configuration
is not available``) what counts is the shape of the request - GPUs or none, and of which type
- not the amounts, which only the site's node sizes could judge (issue 27). Agreement and difference move the probability in log-odds
(``ContextVerdict.adjust``); a difference also keeps the lesson out of the match band (the
scorer, ``scoring._judged``): the facts contradict it, so it is shown as related, never applied.

Some facts make a lesson *inapplicable*: it is then at most related, with the reason.

- the job already satisfies the fix: ``--mem=32G`` for a job that asked 32G or more; a longer
  time limit, more CPUs, the partition, a module it already has loaded;
- the lesson's cause depends on a partition or GPU type (a ``partition`` condition, a GPU
  type in a GPU failure's context) that the job does not have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hpcmem.kb.jobs.context import show_value as show
from hpcmem.kb.slurm_units import parse_duration, parse_size_mb

# sbatch option of a fix -> the context field it sets, and how to read its value
_OPTION_FIELD = {
    "--mem": ("mem_mb", "size"), "--mem-per-cpu": ("mem_per_cpu_mb", "size"), "--time": ("time_limit_s", "time"),
    "--cpus-per-task": ("cpus", "count"), "--ntasks": ("cpus", "count"), "--nodes": ("nodes", "count"),
    "--partition": ("partition", "text"), "--qos": ("qos", "text"), "--account": ("account", "text"),
    "--gres": ("gres", "gres"), "--gpus": ("gpus", "count"), "--gpus-per-node": ("gpus", "count"),
    "--constraint": ("constraint", "text"),
}
_SUBMISSION = ("partition", "account", "qos")
# request fields a fix sizes for one job
_SIZED = frozenset({"memory_mb", "mem_mb", "mem_per_cpu_mb", "time_limit_s", "cpus", "gpus", "nodes"})
# the request fields that say which resource a rejected request asked for
_ASKED = ("mem_mb", "mem_per_cpu_mb", "cpus", "gpus", "gres")
_ENVIRONMENT = ("conda_env", "venv")
# failure category (kb/signatures/categories.toml) -> the context fields its cause depends on.
# A *decisive* field that differs contradicts the lesson (at most related); a *soft* one only
# lowers its probability: a module tree or a driver may differ by partition, or may not.
DECISIVE: dict[str, tuple[str, ...]] = {
    # the memory a node gave the job (--mem, or --mem-per-cpu x CPUs): the fix is relative to it
    "host_oom": ("memory_mb",), "host_oom_killed": ("memory_mb",), "host_oom_worker_killed": ("memory_mb",),
    "jvm_out_of_memory": ("memory_mb",),
    # more time is bounded by the QOS's MaxWall: a timeout under another QOS has another fix.
    # The job's state is Slurm's own verdict on how it ended: for a failure that *is* that
    # verdict, another state is another failure (a preempted job is not a cancelled one).
    "time_limit": ("time_limit_s", "qos", "state"), "deadline": ("time_limit_s", "qos", "state"),
    "preempted": ("state",), "job_cancelled": ("state",), "node_failure": ("state",),
    # a refused request: whether it asked GPUs, and of which type, tells the causes apart; the
    # amounts cannot, without the site's node sizes (issue 27)
    "memory_request_too_large": ("gpu_shape",), "submission_rejected": ("gpu_shape",),
    "invalid_gres": ("gpu_shape",),
    "time_limit_exceeds_partition": ("partition",),
    "qos_limit_exceeded": ("qos",), "qos_policy_violation": ("qos",),
    "cuda_oom": ("gres",), "gpu_unavailable": ("gres",), "cuda_arch_mismatch": ("gres",), "cuda_error": ("gres",),
    "glibc_version_not_found": ("modules",) + _ENVIRONMENT, "symbol_version_not_found": ("modules",) + _ENVIRONMENT,
    "missing_shared_library": ("modules",) + _ENVIRONMENT, "undefined_symbol": ("modules",) + _ENVIRONMENT,
    "python_import_error": ("modules",) + _ENVIRONMENT,
}
SOFT: dict[str, tuple[str, ...]] = {
    "time_limit": ("partition",), "deadline": ("partition",),
    "memory_request_too_large": ("partition", "memory_asked", "many_cpus"), "cpu_request_too_large": ("partition",),
    "invalid_gres": ("partition",),
    "submission_rejected": ("partition", "account", "qos", "memory_asked", "many_cpus"),
    "time_limit_exceeds_partition": ("time_limit_s",),
    # the names alone cannot say whether an account or QOS exists or may be used (issue 27
    # reads the associations); the same names still rank a lesson higher
    "invalid_partition": _SUBMISSION, "invalid_partition_unnamed": _SUBMISSION,
    "partition_access_denied": _SUBMISSION, "invalid_account": _SUBMISSION, "invalid_qos": _SUBMISSION,
    "qos_limit_exceeded": ("partition", "account", "time_limit_s"),
    "qos_policy_violation": ("partition", "account", "time_limit_s"),
    "cuda_oom": ("gpus", "partition"), "gpu_unavailable": ("gpus", "partition"),
    "cuda_arch_mismatch": ("partition", "modules"), "cuda_error": ("partition", "modules"),
    "glibc_version_not_found": ("python",), "symbol_version_not_found": ("python",), "python_import_error": ("python",),
    "lmod_not_available": ("partition",), "module_not_loadable": ("partition",), "unknown_module": ("partition",),
    "illegal_instruction": ("partition", "constraint", "modules"),
    "nccl_error": ("modules", "gpus", "nodes", "launcher"), "mpi_error": ("modules", "launcher", "nodes"),
    "pmix_error": ("modules", "launcher"), "ucx_error": ("modules", "launcher"),
}
# Failures about a library or environment: there a module matters when the failure or the fix
# names it (``hpcfft/2.0`` for ``libhpcfft.so.1``), loaded on one side only or in another version.
_LOADER = frozenset({"glibc_version_not_found", "symbol_version_not_found", "missing_shared_library",
                     "undefined_symbol", "python_import_error"})
_GPU_CATEGORIES = frozenset({"cuda_oom", "gpu_unavailable", "cuda_arch_mismatch", "cuda_error", "invalid_gres",
                             "nccl_error"})
# Log-odds each counted field moves the probability by (``recall_model.json`` "context"
# overrides them). A field the fix changes says more than one the category depends on; the
# same script says the job is the one the lesson was learnt from.
DEFAULT_WEIGHTS = {"agree_fix": 1.0, "differs_fix": 1.0, "agree_relevant": 0.5, "differs_relevant": 0.5,
                   "same_script": 0.75, "same_command": 0.25, "most": 2.5}


@dataclass
class ContextVerdict:
    agree: list[str] = field(default_factory=list)
    differs: list[dict[str, Any]] = field(default_factory=list)
    inapplicable: list[str] = field(default_factory=list)
    # differences on a field the fix changes or the failure decisively depends on: the facts
    # contradict the lesson, which is then at most related
    contradicts: bool = False
    contradicting: list[str] = field(default_factory=list)  # the fields that made it contradict
    shift: float = 0.0  # log-odds, already weighted and capped

    @property
    def decided(self) -> bool:
        return bool(self.agree or self.differs or self.inapplicable)

    def adjust(self, probability: float) -> float:
        if not self.shift:
            return probability
        p = min(max(probability, 1e-9), 1 - 1e-9)
        return 1.0 / (1.0 + math.exp(-(math.log(p / (1 - p)) + self.shift)))

    def as_dict(self) -> dict[str, Any]:
        return {"agrees": list(self.agree), "differs": list(self.differs), "inapplicable": list(self.inapplicable),
                "log_odds": round(self.shift, 4)}




def _asked(ctx: dict[str, Any]) -> bool:
    return any(k in ctx for k in _ASKED + ("partition", "time_limit_s", "nodes"))


def _derived(ctx: dict[str, Any]) -> dict[str, Any]:
    """``ctx`` with the facts compared that no source states directly: the memory a node gave
    the job, whether it asked memory or more than one CPU, and the shape of its GPU request."""
    out = dict(ctx)
    if ctx.get("state"):
        out["state"] = str(ctx["state"]).split()[0].upper()  # "CANCELLED by 1001" ended as CANCELLED
    cpus = ctx.get("cpus") or 1
    if ctx.get("mem_mb") is not None:
        out["memory_mb"] = float(ctx["mem_mb"])
    elif ctx.get("mem_per_cpu_mb") is not None:
        out["memory_mb"] = float(ctx["mem_per_cpu_mb"]) * cpus
    if _asked(ctx):
        out["memory_asked"] = "yes" if "memory_mb" in out else "no"
        out["many_cpus"] = "yes" if cpus > 1 else "no"
        types = _gpu_types(ctx.get("gres"))
        gpus = ctx.get("gpus") or sum(1 for g in ctx.get("gres") or [] if str(g).startswith("gpu"))
        out["gpu_shape"] = f"gpu:{','.join(sorted(types))}" if types else ("gpu" if gpus else "none")
    return out


def _name(key: str) -> str:
    """A field as ``differs`` and ``context_agrees`` name it: mem, time_limit, gres."""
    return {"memory_mb": "mem", "gpu_shape": "gpus"}.get(key) or key.removesuffix("_mb").removesuffix("_s")


def _read(kind: str, value: str | None) -> Any:
    if value is None:
        return None
    try:
        if kind == "size":
            return parse_size_mb(value.upper() if value[-1:].isalpha() else value)
        if kind == "time":
            return None if value.lower() in ("unlimited", "infinite") else parse_duration(value)
        if kind == "count":
            head = value.rsplit(":", 1)[-1].split("-", 1)[0]
            return int(head) if head.isdigit() else None
    except (ValueError, KeyError, IndexError):
        return None
    return value


def _same(key: str, a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        # within 5 %: the same request in binary or decimal units (8G = 8192M and 8000M, 1000M
        # and 1G differ by 2.4 %) agrees; 90M and 100M, or 150M and 160M, are other requests
        return abs(a - b) <= 0.05 * max(abs(a), abs(b), 1e-9)
    if key == "gres":  # the resources and GPU types asked; counts are compared as gpus
        return _gpu_types(a) == _gpu_types(b) and _gres_names(a) == _gres_names(b)
    return a == b


def _gpu_types(gres: Any) -> frozenset[str]:
    """The GPU types of a gres list: ["gpu:a100:2"] -> {"a100"}; untyped requests name none."""
    out = set()
    for item in gres or []:
        parts = str(item).split(":")
        if parts[0] == "gpu" and len(parts) == 3:
            out.add(parts[1].lower())
    return frozenset(out)


def _gres_names(gres: Any) -> frozenset[str]:
    return frozenset(str(item).split(":", 1)[0].lower() for item in gres or [])


def _module_versions(modules: Any) -> dict[str, str]:
    out = {}
    for m in modules or []:
        name, _, version = str(m).partition("/")
        out[name.lower()] = version
    return out


def _compare_modules(q: Any, l: Any, category: str, actions: list[dict[str, Any]], mentioned: str,
                     agree, differ, strong: bool, on_fix: bool) -> None:
    """Modules on both sides: the same name in another version differs; for a library or
    environment failure, a module the failure or the fix names that one side lacks differs
    too (both sides' module lists are known: an empty list is "none loaded")."""
    q_mods, l_mods = _module_versions(q), _module_versions(l)
    names = set(q_mods) & set(l_mods)
    if category in _LOADER or on_fix:
        named = {str(a.get("name") or a.get("from") or "").split("/", 1)[0].lower() for a in actions
                 if a.get("type") == "module"}
        text = mentioned.lower()
        names |= {n for n in set(q_mods) | set(l_mods) if n in named or (len(n) >= 3 and n in text)}
    if not names:
        if category in _LOADER:
            agree("modules", strong)  # both lists known, neither loads a module the failure names
        return
    changed = [n for n in sorted(names) if q_mods.get(n) != l_mods.get(n)
               and not (n in q_mods and n in l_mods and not (q_mods[n] and l_mods[n]))]
    if changed:
        def side(mods: dict[str, str]) -> str:
            return ",".join(f"{n}/{mods[n]}".rstrip("/") if n in mods else f"no {n}" for n in changed)

        differ("modules", side(q_mods), side(l_mods), strong, on_fix)
    else:
        agree("modules", strong)


def _fix_fields(actions: list[dict[str, Any]]) -> set[str]:
    named = set()
    for a in actions or []:
        if a.get("type") == "sbatch" and a.get("option") in _OPTION_FIELD:
            key = _OPTION_FIELD[a["option"]][0]
            named.add("memory_mb" if key in ("mem_mb", "mem_per_cpu_mb") else key)
        elif a.get("type") == "module":
            named.add("modules")
    return named


def _lowered_to(key: str, actions: list[dict[str, Any]], lesson_value: Any) -> float | None:
    """The value a fix brings ``key`` down to (None when no fix lowers it)."""
    for action in actions:
        if action.get("type") != "sbatch" or action.get("option") not in _OPTION_FIELD:
            continue
        field, kind = _OPTION_FIELD[action["option"]]
        if (field if field not in ("mem_mb", "mem_per_cpu_mb") else "memory_mb") != key or kind == "text":
            continue
        wanted = _read(kind, action.get("to"))
        before = _read(kind, action.get("from")) if action.get("from") else lesson_value
        if isinstance(wanted, (int, float)) and isinstance(before, (int, float)) and wanted < before:
            return float(wanted)
    return None


def _already_satisfied(action: dict[str, Any], query: dict[str, Any], lesson: dict[str, Any]) -> str | None:
    """Why the job already has what this action asks for, or None."""
    if action.get("type") == "sbatch" and action.get("option") in _OPTION_FIELD:
        key, kind = _OPTION_FIELD[action["option"]]
        wanted, have = _read(kind, action.get("to")), query.get(key)
        if key == "mem_mb" and have is None:
            have = query.get("memory_mb")  # asked per CPU: what the node gave it in all
        if wanted is None or have is None:
            return None
        if kind in ("size", "time", "count") and isinstance(have, (int, float)):
            before = _read(kind, action.get("from")) if action.get("from") else lesson.get(key)
            lowers = isinstance(before, (int, float)) and wanted < before  # e.g. fewer CPUs than a node has
            if (have <= wanted * 1.01) if lowers else (have >= wanted * 0.99):
                return (f"the job already asked {action['option']}={show(key, have)}; "
                        f"the fix asks {show(key, wanted)}")
        if kind == "text" and str(have) == str(wanted):
            return f"the job already ran with {action['option']}={have}"
        return None
    if action.get("type") == "module" and action.get("op", "load") in ("load", "swap") and action.get("name"):
        loaded = {str(m) for m in query.get("modules") or []}
        if str(action["name"]) in loaded:
            return f"module {action['name']} is already loaded"
    return None


def compare(query: dict[str, Any], lesson: dict[str, Any], *, actions: list[dict[str, Any]] | None = None,
            conditions: list[dict[str, Any]] | None = None, category: str = "unknown",
            weights: dict[str, float] | None = None, mentioned: str = "") -> ContextVerdict:
    """How the query job's context bears on a lesson (its context, fix actions and conditions).
    ``mentioned``: the failure's and the fix's text, which say which modules matter."""
    verdict = ContextVerdict()
    if not query:
        return verdict
    w = {**DEFAULT_WEIGHTS, **(weights or {})}
    fix_fields = _fix_fields(actions or [])
    decisive = fix_fields | set(DECISIVE.get(category, ()))
    counted = decisive | set(SOFT.get(category, ()))
    shift = 0.0
    query, lesson = _derived(query), _derived(lesson or {})

    strong_agreements = []

    def agree(key: str, strong: bool) -> None:
        nonlocal shift
        verdict.agree.append(_name(key))
        if strong:
            strong_agreements.append(key)
        shift += w["agree_fix" if strong else "agree_relevant"]

    def differ(key: str, q: str, l: str, strong: bool, on_fix: bool) -> None:
        nonlocal shift
        verdict.differs.append({"field": _name(key), "query": q, "lesson": l, "kind": "context", "matters": on_fix})
        shift -= w["differs_fix" if strong else "differs_relevant"]
        verdict.contradicts |= strong
        if strong:
            verdict.contradicting.append(_name(key))

    for key in sorted(counted):
        q, l = query.get(key), lesson.get(key)
        on_fix, strong = key in fix_fields, key in decisive
        if q is None or l is None:
            continue
        if key == "modules":
            _compare_modules(q, l, category, actions or [], mentioned, agree, differ, strong, on_fix)
            continue
        ceiling = _lowered_to(key, actions or [], l)
        if ceiling is not None and isinstance(q, (int, float)):
            # the fix brings a request down under a limit: any request above the limit is the
            # lesson's case (128 CPUs as 256 when the fix is 64); one at or under it, not
            (agree(key, strong) if q > ceiling else differ(key, show(key, q), show(key, l), strong, on_fix))
            continue
        if _same(key, q, l):
            agree(key, strong)
        else:
            differ(key, show(key, q), show(key, l), strong, on_fix)
    if query.get("script_sha256") and query.get("script_sha256") == lesson.get("script_sha256"):
        verdict.agree.append("script")
        shift += w["same_script"]
    elif query.get("command") and query.get("command") == lesson.get("command"):
        verdict.agree.append("command")
        shift += w["same_command"]
    else:
        # A lesson learnt for another program (its command, or its job name when neither side
        # knows the command) applies only where the job's facts say the same thing: unless a
        # fact its fix or its failure decisively depends on agrees (and none of those differs,
        # which contradicts anyway), it is at most related. A soft fact (the partition of a
        # timeout) neither vouches for it nor rules it out.
        # Only a fix sized for that job counts so (a --mem, --time or CPU count): a general
        # fix (source Lmod's init, load the library's module) holds for any program.
        key = "command" if query.get("command") and lesson.get("command") else "job_name"
        if query.get(key) and lesson.get(key) and query[key] != lesson[key]:
            verdict.differs.append({"field": "program" if key == "command" else "job_name", "query": query[key],
                                    "lesson": lesson[key], "kind": "context", "matters": False})
            if fix_fields & _SIZED and not strong_agreements:
                verdict.contradicts = True
                verdict.contradicting.append("program")
    verdict.shift = max(-w["most"], min(w["most"], shift))
    for action in actions or []:
        reason = _already_satisfied(action, query, lesson)
        if reason:
            verdict.inapplicable.append(reason)
    depends_on_partition = "partition" in counted  # recorded with a job, a partition is context, not cause
    # A partition the fix moves to is where the fix holds (an implied condition), not where the cause is.
    targets = {str(a.get("to")) for a in actions or [] if a.get("option") == "--partition"}
    for cond in conditions or []:
        if (depends_on_partition and cond.get("kind") == "partition" and cond.get("name") not in targets
                and query.get("partition")
                and cond.get("name") != query["partition"]):
            verdict.inapplicable.append(f"the lesson's cause is on partition {cond.get('name')}; "
                                        f"this job ran on {query['partition']}")
    wanted_types = _gpu_types(lesson.get("gres"))
    if category in _GPU_CATEGORIES and wanted_types and ("gres" in query or query.get("gpus") == 0):
        have = _gpu_types(query.get("gres"))
        if not (have & wanted_types) and (have or query.get("gpus") == 0):
            verdict.inapplicable.append(f"the lesson's cause is on GPU type {','.join(sorted(wanted_types))}; "
                                        f"this job has {','.join(sorted(have)) or 'no GPU'}")
    return verdict
