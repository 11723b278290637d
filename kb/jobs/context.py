"""A failed job's context: what it asked for, what it used, how it was submitted, and the
cluster's environment when it failed.

The one home for job context, read by recall's built-in advice (``recall.advice``) and meant
for the scorer too (issue 26: context as evidence). It sits in ``jobs`` - below ``lessons`` and
``recall`` - so the stages that capture context (ingest, ``record``, ``learn``) and the ones
that judge by it share one definition.

``Facts.occurrence`` holds an occurrence's fields as the store keeps them (``req_mem_mb``,
``max_rss_mb``, ``req_cpus``, ``req_time_s``, ``elapsed_s``, ``partition``, ``submit_line``,
``template``, ...); ``Facts.env`` an environment snapshot's dict (``partitions``, ``modules``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from hpcmem.kb.errors import InputError
from hpcmem.kb.slurm_units import format_time_limit

# The context a failure or a lesson is born with: one flat JSON object, the same keys
# wherever it comes from (``kb/jobs/request.py`` reads scripts, sbatch arguments, submit
# lines, stored jobs and job environments into it). Sizes in MiB, times in seconds.
FIELDS: dict[str, type] = {
    # the request
    "partition": str, "account": str, "qos": str, "mem_mb": float, "mem_per_cpu_mb": float, "cpus": int,
    "gpus": int, "gres": list, "nodes": int, "time_limit_s": int, "constraint": str,
    "cpus_per_task": int, "ntasks": int, "ntasks_per_node": int, "mincpus": int,  # how ``cpus`` is split
    "exclusive": bool,
    # what the job used
    "max_rss_mb": float, "elapsed_s": int, "exit_code": int, "signal": int, "state": str,
    # the software stack
    "modules": list, "conda_env": str, "venv": str, "python": str, "packages": dict,
    # the program
    "command": str, "script_sha256": str, "workdir": str, "launcher": str, "job_name": str,
}
_MAX_TEXT = 512
_MAX_ITEMS = 256


def clean_context(raw: Any, *, where: str = "context") -> dict[str, Any]:
    """A context dict with known keys and sane values only; ``InputError`` for a value of
    the wrong type (an agent's ``context`` object is input to check, not to guess at).
    Unknown keys and empty values are dropped; numbers must be finite and not negative."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputError(f"{where} must be an object of job facts")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        kind = FIELDS.get(key)
        if kind is None or value is None or value == "" or (value == [] and key != "modules") or value == {}:
            continue  # an empty module list is a fact (none loaded); other empty values say nothing
        if kind is bool:
            if not isinstance(value, bool):
                raise InputError(f"{where}.{key} must be true or false")
            out[key] = value
        elif kind is float or kind is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise InputError(f"{where}.{key} must be a non-negative number, not {value!r}"[:200])
            out[key] = float(value) if kind is float else int(value)
        elif kind is str:
            if not isinstance(value, str):
                raise InputError(f"{where}.{key} must be text")
            out[key] = value.strip()[:_MAX_TEXT]
        elif kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InputError(f"{where}.{key} must be a list of text")
            out[key] = [v.strip()[:_MAX_TEXT] for v in value if v.strip()][:_MAX_ITEMS]
        else:  # packages: name -> version
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in value.items()):
                raise InputError(f"{where}.{key} must map package names to versions")
            out[key] = {k[:_MAX_TEXT]: v[:_MAX_TEXT] for k, v in list(value.items())[:_MAX_ITEMS]}
    return {k: v for k, v in out.items() if (v is True or v is False or v not in ("", {}))
            and (v != [] or k == "modules")}


def show_value(key: str, value: Any) -> str:
    """A context value as people write it: 32G, 2:00:00, gcc/13.2.0."""
    if value is None:
        return "?"
    if key in ("mem_mb", "mem_per_cpu_mb", "max_rss_mb", "memory_mb"):
        mb = float(value)
        return f"{mb / 1024:g}G" if mb >= 1024 and mb % 1024 == 0 else f"{mb:g}M"
    if key in ("time_limit_s", "elapsed_s"):
        return format_time_limit(int(value))
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return ",".join(f"{k}=={v}" for k, v in value.items())
    return str(value)


# How ``describe_context`` names each field, in the order it lists them.
_LABELS = {"partition": "partition", "account": "account", "qos": "qos", "mem_mb": "mem",
           "mem_per_cpu_mb": "mem-per-cpu", "cpus": "cpus", "gpus": "gpus", "gres": "gres", "nodes": "nodes",
           "time_limit_s": "time", "constraint": "constraint", "max_rss_mb": "MaxRSS", "elapsed_s": "elapsed",
           "state": "state", "exit_code": "exit", "signal": "signal", "modules": "modules", "conda_env": "conda",
           "venv": "venv", "python": "python", "packages": "packages", "launcher": "launcher", "command": "program",
           "workdir": "workdir", "job_name": "job name"}


def describe_context(context: dict[str, Any] | None) -> str:
    """One line for people: ``partition cpu, mem 8G, cpus 8, time 6:00:00, program assemble.sh``."""
    ctx = context or {}
    return ", ".join(f"{label} {show_value(key, ctx[key])}" for key, label in _LABELS.items() if key in ctx)


def merge_contexts(*contexts: dict[str, Any] | None) -> dict[str, Any]:
    """One context from several sources; the first that gives a key wins (pass the most
    direct source first: what the caller said, then the script, then the stored job)."""
    out: dict[str, Any] = {}
    for ctx in contexts:
        for key, value in (ctx or {}).items():
            if value is not None and (value != [] or key == "modules") and key not in out:
                out[key] = value
    return out


@dataclass(frozen=True)
class Facts:
    """What advice may read: the occurrence's fields and the environment."""

    occurrence: dict[str, Any]
    env: dict[str, Any]

    def get(self, key: str) -> Any:
        return self.occurrence.get(key)

    @property
    def text(self) -> str:
        for key in ("template", "message", "log_excerpt"):
            if self.occurrence.get(key):
                return str(self.occurrence[key])
        return ""

    @property
    def partitions(self) -> dict[str, dict[str, Any]]:
        parts = self.env.get("partitions") or {}
        return {str(k): v for k, v in parts.items() if isinstance(v, dict)}

    @property
    def modules(self) -> dict[str, dict[str, Any]]:
        mods = self.env.get("modules") or {}
        return {str(k): v for k, v in mods.items() if isinstance(v, dict)}

    def default_partition(self) -> str | None:
        return next((n for n, p in self.partitions.items() if p.get("is_default") or p.get("default") is True), None)

    def submit_option(self, option: str) -> str | None:
        found = re.search(rf"(?:^|\s){re.escape(option)}(?:=|\s+)(\S+)", self.get("submit_line") or "")
        return found.group(1) if found else None
