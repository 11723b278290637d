"""Built-in advice: what a failure's own numbers suggest when no lesson says more.

The lowest-precedence source of fixes, in the spirit of the notes ``seff`` and
``jobstats`` print: ``advice_for(category, occurrence, env)`` computes lesson-like
dicts from the failed job itself and, when given, the cluster's environment. Nothing
is stored; every item has ``source`` "rule".

Inputs:

- ``occurrence``: an occurrence as a dict (the ``Occurrence`` columns: ``req_mem_mb``,
  ``max_rss_mb``, ``req_cpus``, ``req_time_s``, ``elapsed_s``, ``partition``,
  ``exit_code``, ``submit_line``...) plus, where known, the signature ``template``; the
  names advice needs (a module, a library, a partition) are read from ``template``,
  else ``message``, else ``log_excerpt``. None gives the general advice only.
- ``env``: an environment snapshot in its JSON form (``EnvSnapshot.to_json``):
  ``{"partitions": {name: {"max_time_s": int | None, "is_default": bool, "state": ...,
  "tres": {...}}}, "modules": {name: {"versions": [...], "default": str | None}}}``.
  Missing keys are simply not used.

Rules with numbers (documented here because tests pin them):

- memory (``host_oom``): a killed job's MaxRSS stops at its limit, so it is a lower bound:
  ``2 x`` the largest request that ran out of memory (this one, or the same job's earlier
  runs in ``history``: same name and directory); when MaxRSS is well below the request
  (under 80 %: a peak the 30 s sampling missed), ``max(1.25 x MaxRSS, 1.5 x request)``;
  only MaxRSS known: ``1.5 x MaxRSS``. When the same job completed with a larger request,
  that request. Rounded up by ``round_up_memory``: 128M steps below 1G, whole G up to 16G,
  4G steps up to 64G, 16G steps above. MaxRSS 7.9G on an 8G request gives 16G; a job that ran
  out at 100M and then at 256M gets 512M. The suggestion is checked against the most one
  node of the partition gives (``MaxMemPerNode``, or a one-node partition's memory, from
  ``env``): above it, the partitions with larger nodes are named, or the cap is proposed
  with the advice to hold less at once. A request made with ``--mem-per-cpu`` gets a
  ``--mem-per-cpu`` suggestion (the total over the job's CPUs, rounded the same way).
  ``seff`` is named only where it is installed.
- time (``time_limit``): ``1.5 x limit`` (x elapsed when the limit is unknown), rounded up by
  ``round_up_time``: 15-minute steps below an hour, whole hours above. A 4 h limit
  gives 06:00:00. When the partition's MaxTime (from ``env``) is shorter, the advice
  says so and names the partitions whose MaxTime fits (shortest first).

Extending: write a function ``(facts) -> list[dict]`` using ``_item`` and add it to
``ADVICE`` under its category.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Callable

from hpcmem.kb.jobs.context import Facts
from hpcmem.kb.slurm_units import format_time_limit, parse_size_mb

__all__ = ["advice_for", "advised_categories", "round_up_memory", "round_up_time", "suggest_memory_mb",
           "suggest_time_s", "ADVICE"]

# Advice read off the job's own numbers is better than a general note, and both are
# weaker than any lesson someone confirmed.
DATA_CONFIDENCE = 0.5
GENERAL_CONFIDENCE = 0.35

MEMORY_HEADROOM = 1.25  # x MaxRSS
MEMORY_STEP_UP = 1.5  # x the request that was not enough
TIME_STEP_UP = 1.5  # x the limit that was hit


# --------------------------------------------------------------------------- numbers


def round_up_memory(mb: float) -> int:
    """MB rounded up to a request people write: 128M steps, whole G, 4G, then 16G steps."""
    if mb <= 0:
        return 128
    if mb < 1024:
        return int(math.ceil(mb / 128) * 128)
    gib = mb / 1024
    for limit, step in ((16, 1), (64, 4)):
        if gib <= limit:
            return int(math.ceil(gib / step - 1e-9) * step * 1024)
    return int(math.ceil(gib / 16 - 1e-9) * 16 * 1024)


def memory_text(mb: float) -> str:
    """A request as sbatch takes it: '12G', '384M'."""
    return f"{round(mb / 1024)}G" if mb >= 1024 and round(mb) % 1024 == 0 else f"{round(mb)}M"


def _size_text(mb: float) -> str:
    """A measured size for people: '7.9G', '43M'."""
    return f"{mb / 1024:.1f}G" if mb >= 1024 else f"{mb:.0f}M"


def suggest_memory_mb(req_mem_mb: float | None, max_rss_mb: float | None) -> int | None:
    """The memory to ask for next time (see the module docstring), or None if unknown."""
    if req_mem_mb and max_rss_mb:
        return round_up_memory(max(MEMORY_HEADROOM * max_rss_mb, MEMORY_STEP_UP * req_mem_mb))
    if max_rss_mb:
        return round_up_memory(MEMORY_STEP_UP * max_rss_mb)
    if req_mem_mb:
        return round_up_memory(2 * req_mem_mb)
    return None


def round_up_time(seconds: float) -> int:
    """Seconds rounded up to 15-minute steps below an hour, whole hours above."""
    step = 900 if seconds < 3600 else 3600
    return max(step, int(math.ceil(seconds / step - 1e-9) * step))


def suggest_time_s(req_time_s: int | None, elapsed_s: int | None) -> int | None:
    # The limit, not the elapsed time: Slurm's kill grace makes elapsed a little longer.
    base = req_time_s or elapsed_s
    return round_up_time(TIME_STEP_UP * base) if base else None


# --------------------------------------------------------------------------- inputs


def _item(rule: str, cause: str, fix: str, actions: list[dict[str, Any]] | None = None,
          confidence: float = GENERAL_CONFIDENCE) -> dict[str, Any]:
    return {"source": "rule", "rule": rule, "cause": cause, "fix": fix, "actions": list(actions or []),
            "confidence": confidence}


def _sbatch(option: str, to: str | None, before: str | None = None) -> dict[str, Any]:
    action: dict[str, Any] = {"type": "sbatch", "option": option, "to": to}
    if before is not None:
        action["from"] = before
    return action


def _clock(seconds: int | None) -> str:
    return format_time_limit(seconds, "UNLIMITED")


# --------------------------------------------------------------------------- memory


def _usage_check(f: Facts) -> str:
    """How to see what a job used, naming only tools this node has: ``seff`` is a contrib
    script that many sites (and Debian's Slurm packages) do not install."""
    import shutil

    seff = "`seff <jobid>` or " if shutil.which("seff") else ""
    return (f"Check what a finished job really used with {seff}`sacct -j <jobid> -o JobID,ReqMem,MaxRSS,State` "
            "(a running one: `sstat -j <jobid> -o MaxRSS`).")


_OOM_STATES = frozenset({"OUT_OF_MEMORY", "OOM"})


def _earlier_runs(f: Facts) -> tuple[list[float], list[float]]:
    """(requests that ran out of memory before, requests that completed) of the same job."""
    failed, done = [], []
    for run in f.get("history") or []:
        mem = run.get("req_mem_mb")
        if not mem:
            continue
        if run.get("state") in _OOM_STATES:
            failed.append(float(mem))
        elif run.get("state") == "COMPLETED":
            done.append(float(mem))
    return failed, done


def _node_memory_cap(f: Facts, partition: str | None) -> tuple[float | None, list[str]]:
    """The most memory one node of ``partition`` can give a job (the largest node's RealMemory
    less MemSpecLimit when the snapshot has the nodes, capped by MaxMemPerNode; else
    MaxMemPerNode, or the memory of a one-node partition), and the partitions that give more,
    largest first."""
    nodes = [n for n in (f.env.get("nodes") or {}).values() if isinstance(n, dict)]

    def cap(p: dict[str, Any]) -> float | None:
        limit = float(p["max_mem_per_node_mb"]) if p.get("max_mem_per_node_mb") else None
        mine = [float(n["real_memory_mb"]) - float(n.get("mem_spec_limit_mb") or 0) for n in nodes
                if p.get("name") in (n.get("partitions") or []) and n.get("real_memory_mb")]
        if mine:
            return min(max(mine), limit) if limit else max(mine)
        if limit:
            return limit
        tres = p.get("tres") or {}
        if str(tres.get("node")) == "1" and tres.get("mem"):
            try:
                return parse_size_mb(str(tres["mem"]))
            except (ValueError, KeyError):
                return None
        return None

    parts = f.partitions
    mine = cap(parts[partition]) if partition in parts else None
    others = sorted(((cap(p), name) for name, p in parts.items() if name != partition and cap(p)),
                    key=lambda t: -t[0])
    return mine, [name for size, name in others if mine is None or size > mine]


def host_oom(f: Facts) -> list[dict[str, Any]]:
    req, rss, cpus = f.get("req_mem_mb"), f.get("max_rss_mb"), f.get("req_cpus")
    check = _usage_check(f)
    failed_before, completed = _earlier_runs(f)
    tried = sorted({*failed_before, *([req] if req else [])})
    suggestion = suggest_memory_mb(req, rss)
    sampled_low = bool(req and rss and rss < 0.8 * req)  # a short peak the sampling missed
    if tried and not sampled_low:
        # A killed job's MaxRSS is capped by its limit: a lower bound, not the need. Double the
        # largest request that ran out of memory, so the next try is not another near miss.
        suggestion = max(suggestion or 0, round_up_memory(2 * max(tried)))
    elif failed_before:
        suggestion = max(suggestion or 0, round_up_memory(2 * max(failed_before)))
    fitting = [m for m in completed if m > max(tried, default=0)]
    if fitting:
        suggestion = round_up_memory(min(fitting))  # the same job completed with it
    if suggestion is None:
        return [_item("host_oom.more_memory", "The job used more memory than it asked for and was killed.",
                      f"Ask for more memory with --mem (for example double it). {check}")]
    used = f" (MaxRSS {_size_text(rss)})" if rss else ""
    asked = f"its {memory_text(req)} request" if req else "its memory request"
    cause = f"The job needed more memory than {asked}{used} and was killed by the cgroup OOM handler."
    if req and rss and rss < 0.8 * req:
        cause += (" MaxRSS is sampled (every 30 s by default), so a short peak above the limit may not "
                  "show in it.")
    elif rss and req:
        cause += " A killed job's MaxRSS stops at its limit: it is a lower bound on what it needs."
    others = sorted({m for m in failed_before if not req or abs(m - req) > 0.01 * req})
    if others:
        cause += f" The same job also ran out of memory at {', '.join(memory_text(m) for m in others)}."
    if fitting:
        rule = f"what the same job completed with, {memory_text(min(fitting))}"
    elif sampled_low and not failed_before:
        rule = f"max(1.25 x MaxRSS, 1.5 x {memory_text(req)})"
    elif tried:
        rule = f"2 x {memory_text(max(tried))}, the largest request that ran out of memory"
    else:
        rule = "1.5 x MaxRSS"
    per_cpu = f.submit_option("--mem-per-cpu")
    if per_cpu and cpus:
        to = memory_text(round_up_memory(suggestion / cpus))
        fix = (f"The request was per CPU: ask for --mem-per-cpu={to} (was {per_cpu}; {rule} = "
               f"{memory_text(suggestion)} over {cpus} CPUs, rounded up). {check}")
        return [_item("host_oom.more_memory", cause, fix, [_sbatch("--mem-per-cpu", to, per_cpu)], DATA_CONFIDENCE)]
    before = memory_text(req) if req else None
    partition = f.get("partition") or f.default_partition()
    cap, bigger = _node_memory_cap(f, partition)
    if cap is not None and suggestion > cap:
        to_cap = memory_text(int(cap))
        if bigger:
            fix = (f"{memory_text(suggestion)} ({rule}, rounded up) is more than a node of partition {partition} "
                   f"has ({to_cap}). Partitions with larger nodes: {', '.join(bigger)}; submit with -p {bigger[0]} "
                   f"--mem={memory_text(suggestion)}. {check}")
            actions = [_sbatch("--partition", bigger[0], partition), _sbatch("--mem", memory_text(suggestion), before)]
        else:
            fix = (f"{memory_text(suggestion)} ({rule}, rounded up) is more than any node here has: ask for "
                   f"--mem={to_cap}, the most a node of {partition} gives, and if that is not enough, reduce what "
                   f"the job holds at once (smaller batches or chunks) or split it. {check}")
            actions = [_sbatch("--mem", to_cap, before)]
        return [_item("host_oom.more_memory", cause, fix, actions, DATA_CONFIDENCE)]
    to = memory_text(suggestion)
    fix = (f"Ask for --mem={to} ({rule}, rounded up). If the request was made per CPU, use "
           f"--mem-per-cpu with the same total instead. {check}")
    return [_item("host_oom.more_memory", cause, fix, [_sbatch("--mem", to, before)], DATA_CONFIDENCE)]


def memory_request_too_large(f: Facts) -> list[dict[str, Any]]:
    return [_item("memory_request_too_large.fit_a_node",
                  "No node in the partition has as much memory as the job asked for.",
                  "Ask for less memory than the largest node has (`sinfo -o '%P %m'` lists node memory in MB "
                  "per partition), spread the work over more nodes, or use a large-memory partition.")]


# --------------------------------------------------------------------------- time


def _has_gpus(tres_or_gres: Any) -> bool:
    return "gpu" in str(tres_or_gres or "")


def _fitting_partitions(f: Facts, seconds: int) -> list[str]:
    """Partitions (not down) whose MaxTime fits ``seconds``: those with GPUs when the job
    has GPUs (and without, when it has none) first, then the shortest MaxTime, then the
    name closest to the job's partition (gpu_test -> gpu)."""
    gpu_job = _has_gpus(f.get("req_gres"))
    knows_tres = any(p.get("tres") for p in f.partitions.values())
    here = f.get("partition") or ""
    ranked = []
    for name, p in f.partitions.items():
        limit = p.get("max_time_s")
        if (limit is not None and limit < seconds) or str(p.get("state") or "UP").upper() not in ("UP", ""):
            continue
        gpu_part = any(k.startswith("gres/gpu") for k in (p.get("tres") or {}))
        if gpu_job and knows_tres and not gpu_part:
            continue  # a GPU job cannot run there
        mismatch = knows_tres and gpu_part != gpu_job
        likeness = difflib.SequenceMatcher(None, here, name).ratio()
        ranked.append((mismatch, math.inf if limit is None else limit, -likeness, name))
    return [name for *_, name in sorted(ranked)]


def time_limit(f: Facts) -> list[dict[str, Any]]:
    limit, elapsed, partition = f.get("req_time_s"), f.get("elapsed_s"), f.get("partition")
    checkpoint = _item(
        "time_limit.checkpoint",
        "Work not saved before the time limit is lost when Slurm ends the job.",
        "Write checkpoints periodically and resume from the last one. With --signal=B:USR1@300 Slurm sends "
        "the batch shell SIGUSR1 five minutes before the limit; `trap` it in the script to save state "
        "(and `scontrol requeue $SLURM_JOB_ID` if the job was submitted with --requeue).",
        [_sbatch("--signal", "B:USR1@300")],
    )
    suggestion = suggest_time_s(limit, elapsed)
    if suggestion is None:
        return [_item("time_limit.more_time", "The job reached its time limit and was cancelled.",
                      "Ask for more time with --time (estimate from a shorter test run), or make the job "
                      "faster (more CPUs/GPUs if it scales)."), checkpoint]
    ran = f" after {_clock(elapsed)}" if elapsed else ""
    cause = f"The job reached its time limit of {_clock(limit) if limit else 'the partition default'}{ran}."
    to = _clock(suggestion)
    before = _clock(limit) if limit else None
    actions = [_sbatch("--time", to, before)]
    fix = f"Ask for --time={to} (1.5 x the limit, rounded up)."
    max_time = (f.partitions.get(partition) or {}).get("max_time_s", None) if partition else None
    if partition and partition in f.partitions and max_time is not None and suggestion > max_time:
        others = [p for p in _fitting_partitions(f, suggestion) if p != partition]
        fix = (f"{to} (1.5 x the limit, rounded up) is more than partition {partition}'s MaxTime "
               f"{_clock(max_time)}.")
        if others:
            fix += f" Partitions with a long enough MaxTime: {', '.join(others)}; submit with -p {others[0]} --time={to}."
            actions = [_sbatch("--partition", others[0], partition), _sbatch("--time", to, before)]
        else:
            fix += (f" No partition allows that long: ask for --time={_clock(max_time)} and split the work "
                    "into chained jobs that restart from checkpoints (--dependency=afterany:<jobid>).")
            actions = [_sbatch("--time", _clock(max_time), before)]
    return [_item("time_limit.more_time", cause, fix, actions, DATA_CONFIDENCE), checkpoint]


def time_limit_exceeds_partition(f: Facts) -> list[dict[str, Any]]:
    asked, partition = f.get("req_time_s"), f.get("partition")
    cause = "The requested --time is missing or longer than the partition's MaxTime, so Slurm will not run the job."
    info = f.partitions.get(partition or "") or {}
    max_time = info.get("max_time_s")
    if asked and partition and max_time is not None and asked > max_time:
        cause = (f"The job asked for {_clock(asked)} but partition {partition} allows at most "
                 f"{_clock(max_time)}.")
        others = [p for p in _fitting_partitions(f, asked) if p != partition]
        if others:
            fix = (f"Submit to a partition whose MaxTime fits ({', '.join(others)}), e.g. -p {others[0]}, "
                   f"or ask for --time={_clock(max_time)} or less on {partition}.")
            return [_item("time_limit_exceeds_partition.fit", cause, fix,
                          [_sbatch("--partition", others[0], partition)], DATA_CONFIDENCE)]
        fix = f"Ask for --time={_clock(max_time)} or less and checkpoint to continue in a follow-up job."
        return [_item("time_limit_exceeds_partition.fit", cause, fix,
                      [_sbatch("--time", _clock(max_time), _clock(asked))], DATA_CONFIDENCE)]
    fix = ("Give --time within the partition's MaxTime: `sinfo -o '%P %l'` lists each partition's time "
           "limit, `scontrol show partition <name>` shows MaxTime and DefaultTime.")
    return [_item("time_limit_exceeds_partition.fit", cause, fix)]


def time_limit_required(f: Facts) -> list[dict[str, Any]]:
    return [_item("time_limit_required.give_time", "This cluster requires every job to state its time limit.",
                  "Add --time=HH:MM:SS (or #SBATCH --time=...) with an estimate below the partition's MaxTime "
                  "(`sinfo -o '%P %l'`).")]


# --------------------------------------------------------------------------- GPU


def _gpu_types(f: Facts) -> dict[str, list[str]]:
    """GPU type -> partitions, from the partitions' TRES (gres/gpu:a100=64)."""
    types: dict[str, list[str]] = {}
    for name, p in f.partitions.items():
        for key in (p.get("tres") or {}):
            if key.startswith("gres/gpu:"):
                types.setdefault(key.split(":", 1)[1], []).append(name)
    return types


def cuda_oom(f: Facts) -> list[dict[str, Any]]:
    types = _gpu_types(f)
    where = ""
    if types:
        where = " GPU types here: " + "; ".join(f"{t} ({', '.join(sorted(p))})" for t, p in sorted(types.items())) + "."
    return [
        _item("cuda_oom.smaller_footprint",
              "The GPU ran out of memory: the model, the batch or its activations do not fit on the device.",
              "Reduce the batch size and keep the effective batch with gradient accumulation; enable activation "
              "(gradient) checkpointing and mixed precision (bf16/fp16); set "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when the error shows much memory reserved "
              "but unallocated (fragmentation).",
              [{"type": "env", "name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]),
        _item("cuda_oom.bigger_gpu", "The job's GPU has less memory than the run needs.",
              "Ask for a GPU with more memory, e.g. --gres=gpu:a100:1, or the --constraint your site defines "
              f"for large-memory GPUs (`sinfo -o '%P %G'` lists GPU types per partition).{where}"),
    ]


# --------------------------------------------------------------------------- modules and libraries


def _module_names(text: str) -> list[str]:
    quoted = re.findall(r'"([^"\s]+)"', text)
    if quoted:
        return quoted
    found = re.search(r"(?:module\(s\)|modulefile for)[^:]*:?\s*'?([\w./+-]+)", text)
    return [found.group(1)] if found else []


def _lookup_module(f: Facts, requested: str) -> tuple[str | None, str | None]:
    """(the module's name as Lmod knows it, the version asked for) for 'cuda/11.7'."""
    modules = f.modules
    lowered = {name.lower(): name for name in modules}
    parts = requested.split("/")
    for cut in range(len(parts), 0, -1):  # longest known prefix: mpi/openmpi/4.1 -> mpi/openmpi
        name = "/".join(parts[:cut])
        if name in modules or name.lower() in lowered:
            return lowered.get(name.lower(), name), "/".join(parts[cut:]) or None
    if len(parts) > 1:
        return None, parts[-1]
    return None, None


def unknown_module(f: Facts) -> list[dict[str, Any]]:
    names = _module_names(f.text)
    if not names:
        return [_item("unknown_module.spider", "A module the job loads does not exist under that name or version.",
                      "Find the available versions and what must be loaded first with `module spider <name>` "
                      "(and `module spider <name>/<version>`); module names are case-sensitive.")]
    items = []
    for requested in names:
        family = requested.split("/")[0]
        name, version = _lookup_module(f, requested)
        cause = f"Module {requested} does not exist on this cluster."
        if name is None or not f.modules:
            fix = (f"Run `module spider {family}` to see the versions that exist and the modules (compiler, MPI) "
                   "that must be loaded before it in a hierarchy; then load an existing version.")
            if f.modules:
                close = difflib.get_close_matches(family, list(f.modules), n=3)
                fix = (f"There is no module {family} here" + (f" (similar: {', '.join(close)})" if close else "")
                       + f". `module spider {family}` searches every hierarchy level.")
            items.append(_item("unknown_module.spider", cause, fix))
            continue
        info = f.modules[name]
        versions = [str(v) for v in info.get("versions") or []]
        default = info.get("default")
        if name != requested.split("/")[0] and name.lower() == family.lower():
            cause += f" (module names are case-sensitive: it is {name})"
        listed = ", ".join(versions) if versions else "(no versions)"
        fix = f"{name} exists in versions {listed}" + (f" (default {default})" if default else "") + "."
        actions = []
        if default:
            target = f"{name}/{default}"
            fix += f" Load an existing one, e.g. `module load {target}`"
            actions.append({"type": "module", "op": "load", "name": target})
        fix += f"; `module spider {name}/<version>` tells what must be loaded first."
        items.append(_item("unknown_module.existing_versions", cause, fix, actions, DATA_CONFIDENCE))
    return items


def module_not_loadable(f: Facts) -> list[dict[str, Any]]:
    names = _module_names(f.text)
    which = names[0] if names else "<name>/<version>"
    return [_item("module_not_loadable.prerequisites",
                  "The module exists but only after other modules (a compiler or an MPI) are loaded.",
                  f"`module spider {which}` lists the modules to load first; load them before it in the job script.")]


# Library name -> the module that usually provides it.
LIBRARY_MODULES = (
    (r"libcudnn", "cudnn"), (r"libnccl", "nccl"),
    (r"libcu(?:dart|blas|blasLt|fft|rand|sparse|solver|pti)|libnvrtc|libnvToolsExt|libnvJitLink", "cuda"),
    (r"libmpi|libopen-rte|libopen-pal|libmpi_cxx", "openmpi"),
    (r"libgfortran|libquadmath|libgomp|libstdc\+\+|libgcc_s", "gcc"),
    (r"libimf|libifcore|libsvml|libintlc|libiomp5", "intel"), (r"libmkl", "mkl"),
    (r"libpython", "python"), (r"libhdf5", "hdf5"), (r"libnetcdf", "netcdf"), (r"libfftw3", "fftw"),
    (r"libopenblas", "openblas"), (r"libboost", "boost"),
)  # fmt: skip


def _library(text: str) -> str | None:
    found = re.search(r"([\w+.-]+\.so[\w.]*)", text)
    return found.group(1) if found else None


def missing_shared_library(f: Facts) -> list[dict[str, Any]]:
    lib = _library(f.text)
    cause = f"The dynamic loader cannot find {lib or 'a shared library'} on the compute node."
    check = "`ldd <program> | grep 'not found'` lists what is missing."
    family = next((mod for pattern, mod in LIBRARY_MODULES if lib and re.match(pattern, lib)), None)
    if family is None:
        return [_item("missing_shared_library.load_module", cause,
                      "Load the module that provides it in the job script (the one the program was built with; "
                      f"`module spider` finds it), or add its directory to LD_LIBRARY_PATH. {check}")]
    fix = f"Load the {family} module in the job script, the same version the program was built with."
    actions = []
    name = next((n for n in f.modules if n.lower() == family or n.lower().startswith(family + "-")), None)
    if name is not None:
        versions = [str(v) for v in f.modules[name].get("versions") or []]
        major = re.search(r"\.so\.(\d+)", lib or "")
        wanted = [v for v in versions if major and v.split(".")[0] == major.group(1)]
        fix += f" Here: {name} {', '.join(versions) or '(no versions)'}."
        if wanted:
            target = f"{name}/{wanted[-1]}"
            fix += f" {lib} belongs to the {major.group(1)}.x series: `module load {target}`."
            actions.append({"type": "module", "op": "load", "name": target})
        elif versions and major and family == "cuda":
            fix += f" No {family} {major.group(1)}.x is installed: rebuild against an installed version."
    fix += f" {check}"
    return [_item("missing_shared_library.load_module", cause, fix, actions,
                  DATA_CONFIDENCE if actions else GENERAL_CONFIDENCE)]


def symbol_version_not_found(f: Facts) -> list[dict[str, Any]]:
    found = re.search(r"version [`'‘]?(\w+?)_([\d.]+)", f.text)
    tag = found.group(1) if found else ""
    lib = _library(f.text) or "a system library"
    if tag == "GLIBC":
        return [_item("symbol_version_not_found.newer_os",
                      f"The program was built on a system with a newer C library than this node's ({lib}).",
                      "Rebuild it on the cluster (with a compiler module loaded), or run it in a container "
                      "built for the newer system (apptainer).")]
    cause = (f"The program needs a newer {lib} ({found.group(0).split()[-1] if found else 'symbol version'}) "
             "than the one found: it was built with a newer compiler than the runtime library it loads.")
    fix = ("Load the gcc module the program was built with (its libstdc++ then comes first on "
           "LD_LIBRARY_PATH), or rebuild the program with the compiler module you load at run time.")
    actions = []
    gcc = f.modules.get("gcc")
    if gcc and gcc.get("versions"):
        newest = str(gcc["versions"][-1])
        fix += f" Newest gcc here: gcc/{newest}."
        actions.append({"type": "module", "op": "load", "name": f"gcc/{newest}"})
    return [_item("symbol_version_not_found.newer_runtime", cause, fix, actions)]


def python_import_error(f: Facts) -> list[dict[str, Any]]:
    found = re.search(r"No module named ['\"]?([\w.]+)", f.text)
    package = found.group(1) if found else "the package"
    return [_item("python_import_error.activate_env",
                  f"Python in the job cannot import {package}: the job does not run in the environment "
                  "where it is installed.",
                  "Activate the environment inside the job script before running Python (`source "
                  "<venv>/bin/activate` or `conda activate <env>`, after `module load` of the same Python); "
                  f"check with `python -c 'import {package.split('.')[0]}'` in the job. Install it there if "
                  "missing.")]


def command_not_found(f: Facts) -> list[dict[str, Any]]:
    found = re.search(r"([^\s:]+): (?:command )?not found", f.text)
    command = found.group(1) if found else "the program"
    return [_item("command_not_found.load_module",
                  f"{command} is not on PATH on the compute node.",
                  "Load its module (or activate its environment) inside the job script; "
                  f"`module spider {command}` may find the module that provides it.")]


def lmod_not_available(f: Facts) -> list[dict[str, Any]]:
    return [_item("lmod_not_available.init_lmod",
                  "The `module` command is not defined in the job's shell: it was not started as a login "
                  "shell and does not read the Lmod setup.",
                  "Start the job script with `#!/bin/bash -l`, or source the Lmod init before the first module "
                  "command (`source /etc/profile.d/lmod.sh`, or `source $LMOD_PKG/init/bash`).")]


def illegal_instruction(f: Facts) -> list[dict[str, Any]]:
    return [_item("illegal_instruction.cpu_target",
                  "The program uses CPU instructions this node lacks (often built with -march=native on a newer "
                  "login node).",
                  "Rebuild for the oldest CPU you run on (e.g. -march=x86-64-v3) or ask for nodes with the "
                  "feature via --constraint (`sinfo -o '%N %f'` lists node features).")]


def job_launch_failure(f: Facts) -> list[dict[str, Any]]:
    raw = " ".join(str(f.get(k) or "") for k in ("message", "log_excerpt"))
    found = re.search(r"output directory (\S+) (does not exist|is not writable)", raw)
    if found:
        directory, missing = found.group(1), found.group(2) == "does not exist"
        if missing:
            why = f"its output directory {directory} does not exist, and Slurm does not create it"
            fix = f"Create it before submitting (`mkdir -p {directory}`), or point `#SBATCH -o`/`-e` at a directory that exists."
            actions = [{"type": "command", "command": f"mkdir -p {directory}"}]
        else:
            why = f"the job's user may not write its output directory {directory}"
            fix = (f"Point `#SBATCH -o`/`-e` at a directory you own, or fix the permissions of {directory} "
                   "(`ls -ld` shows them).")
            actions = []
        return [_item(f"job_launch_failure.{'output_directory' if missing else 'output_not_writable'}",
                      f"The job never started: {why} (the job ends FAILED with reason JobLaunchFailure and no log).",
                      fix, actions, confidence=DATA_CONFIDENCE)]
    return [_item("job_launch_failure.check_paths",
                  "The job never started: Slurm could not launch the batch script (reason JobLaunchFailure). "
                  "The usual cause is an `#SBATCH -o`/`-e` path whose directory does not exist or is not "
                  "writable; a missing working directory (`-D`) does the same.",
                  "Check that the directories of the -o/-e paths and the working directory exist and are "
                  "writable (`scontrol show job ID` lists StdOut, StdErr and WorkDir), then resubmit.")]


# --------------------------------------------------------------------------- partitions


def invalid_partition(f: Facts) -> list[dict[str, Any]]:
    found = re.search(r"invalid partition specified: (\S+)", f.text)
    asked = found.group(1) if found else f.get("partition")
    cause = f"Partition {asked} does not exist on this cluster." if asked else "The requested partition does not exist."
    names = sorted(f.partitions)
    if not names:
        return [_item("invalid_partition.list", cause,
                      "`sinfo -s` lists the partitions (the default one is marked with *); submit to one of "
                      "them, or leave out -p to use the default.")]
    default = f.default_partition()
    close = difflib.get_close_matches(asked or "", names, n=1) if asked else []
    target = close[0] if close else default
    fix = f"Partitions here: {', '.join(names)}" + (f" (default {default})" if default else "") + "."
    actions = []
    if target:
        fix += f" Use -p {target}" + (" (closest name)" if close else " (the default)") + "; `sinfo -s` shows them."
        actions.append(_sbatch("--partition", target, asked))
    return [_item("invalid_partition.list", cause, fix, actions, DATA_CONFIDENCE)]


# --------------------------------------------------------------------------- storage


def disk_quota(f: Facts) -> list[dict[str, Any]]:
    return [_item("disk_quota.check_quota",
                  "A file-system quota is exhausted: space or the number of files (inodes).",
                  "Check usage with the site's quota tool (`quota -s`; `lfs quota -hu $USER <mount>` on Lustre; "
                  "`mmlsquota` on GPFS) and `du -sh` / `du --inodes` to find what is large; write temporary and "
                  "bulky output to scratch ($SCRATCH or the node-local $TMPDIR) and clean up old files.")]


def disk_full(f: Facts) -> list[dict[str, Any]]:
    return [_item("disk_full.other_filesystem",
                  "The file system the job writes to is full.",
                  "Check with `df -h <path>`; write to scratch or the node-local $TMPDIR instead (copy results "
                  "back at the end), and tell the admins if a shared file system is full.")]


# --------------------------------------------------------------------------- not the job's fault


def node_failure(f: Facts) -> list[dict[str, Any]]:
    nodes = f.get("nodes")
    exclude = f" If it happens again on the same node, add --exclude={nodes}." if nodes else ""
    return [_item("node_failure.resubmit",
                  "A node of the allocation failed; the job itself did nothing wrong.",
                  "Resubmit the job unchanged. Submitting with --requeue lets Slurm requeue it by itself after a "
                  f"node failure; checkpoints keep the work done so far.{exclude}",
                  [_sbatch("--requeue", None)])]


def preempted(f: Facts) -> list[dict[str, Any]]:
    return [_item("preempted.requeue",
                  "Higher-priority work preempted the job (a preemptible QOS or partition).",
                  "Resubmit; with --requeue Slurm requeues it by itself. Checkpoint regularly so a preempted run "
                  "resumes, or use a QOS/partition that is not preemptible for jobs that cannot restart.",
                  [_sbatch("--requeue", None)])]


# --------------------------------------------------------------------------- the table

ADVICE: dict[str, Callable[[Facts], list[dict[str, Any]]]] = {
    "host_oom": host_oom,
    "memory_request_too_large": memory_request_too_large,
    "time_limit": time_limit,
    "time_limit_exceeds_partition": time_limit_exceeds_partition,
    "time_limit_required": time_limit_required,
    "cuda_oom": cuda_oom,
    "unknown_module": unknown_module,
    "module_not_loadable": module_not_loadable,
    "missing_shared_library": missing_shared_library,
    "symbol_version_not_found": symbol_version_not_found,
    "python_import_error": python_import_error,
    "command_not_found": command_not_found,
    "lmod_not_available": lmod_not_available,
    "illegal_instruction": illegal_instruction,
    "invalid_partition": invalid_partition,
    "disk_quota": disk_quota,
    "disk_full": disk_full,
    "node_failure": node_failure,
    "boot_failure": node_failure,
    "preempted": preempted,
    "job_launch_failure": job_launch_failure,
}


# --------------------------------------------------------------------------- pending jobs

# A pending job's Reason -> (why it waits, whether it can ever start as it is). The ones that
# cannot start need the user: change the job in place or cancel and resubmit it.
_PENDING_REASONS = {
    "PartitionTimeLimit": ("its --time is longer than the partition's MaxTime", False),
    "QOSMaxWallDurationPerJobLimit": ("its --time is longer than its QOS's MaxWall", False),
    "PartitionNodeLimit": ("it asks more nodes than the partition allows", False),
    "PartitionConfig": ("it asks what no node of the partition has (CPUs, memory, GRES)", False),
    "BadConstraints": ("its constraints (features, GRES, memory) match no node", False),
    "InvalidQOS": ("its QOS is not one the account may use", False),
    "InvalidAccount": ("its account is not one the user may use", False),
    "DependencyNeverSatisfied": ("a job it depends on ended in a way the dependency rules out", False),
    "ReqNodeNotAvail": ("a node it needs is down, drained or reserved", True),
    "Resources": ("the resources it asked for are busy", True),
    "Priority": ("jobs of higher priority are ahead of it", True),
    "Dependency": ("it waits for a job it depends on", True),
}


def pending_advice(job_id: str, reason: str, f: Facts) -> list[dict[str, Any]]:
    """What to do about a job that waits in the queue: for a reason it can never start with,
    change it in place or cancel it, and what would fit."""
    why, waits = _PENDING_REASONS.get(reason, (f"Slurm holds it with Reason={reason}", True))
    if waits:
        return [_item(f"pending.{reason}", f"Job {job_id} is pending: {why}.",
                      f"It can start as it is; it is waiting. `squeue -j {job_id} --start` shows Slurm's estimate. "
                      f"Nothing to change unless the wait matters (then a smaller request starts sooner).")]
    asked, partition = f.get("req_time_s"), f.get("partition")
    cause = f"Job {job_id} is pending and will never start as it is: {why}."
    if reason == "PartitionTimeLimit":
        max_time = (f.partitions.get(partition or "") or {}).get("max_time_s")
        if asked and max_time is not None:
            cause = (f"Job {job_id} is pending and will never start as it is: it asks {_clock(asked)} and partition "
                     f"{partition} allows at most {_clock(max_time)}.")
            others = [p for p in _fitting_partitions(f, asked) if p != partition]
            fix = (f"Lower its limit in place: `scontrol update JobId={job_id} TimeLimit={_clock(max_time)}` (you may "
                   f"lower your job's limit, not raise it)")
            actions = [{"type": "command", "command": f"scontrol update JobId={job_id} TimeLimit={_clock(max_time)}"}]
            if others:
                fix += (f"; or `scancel {job_id}` and resubmit to a partition whose MaxTime fits: -p {others[0]}"
                        + (f" ({', '.join(others)})" if len(others) > 1 else ""))
                actions.append(_sbatch("--partition", others[0], partition))
            return [_item(f"pending.{reason}", cause, fix + ".", actions, DATA_CONFIDENCE)]
    if reason == "QOSMaxWallDurationPerJobLimit":
        qos = f.get("qos") or "<qos>"
        fix = (f"Find the QOS's limit with `sacctmgr show qos {qos} format=Name,MaxWall`, then lower the job's limit "
               f"in place (`scontrol update JobId={job_id} TimeLimit=<MaxWall or less>`), or `scancel {job_id}` and "
               f"resubmit with a QOS whose MaxWall fits (`sacctmgr show assoc user=$USER format=Account,Partition,QOS`).")
        return [_item(f"pending.{reason}", cause, fix)]
    fix = (f"Change the job in place where Slurm allows it (`scontrol update JobId={job_id} ...`), or `scancel "
           f"{job_id}` and resubmit with a request the partition can meet (`scontrol show partition "
           f"{partition or '<name>'}`, `sinfo -N -o '%N %c %m %G %f'`).")
    return [_item(f"pending.{reason}", cause, fix)]


def advised_categories() -> tuple[str, ...]:
    return tuple(sorted(ADVICE))


def advice_for(category: str, occurrence: dict[str, Any] | None, env: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Built-in advice for a failure of ``category`` (empty when there is none)."""
    builder = ADVICE.get(category)
    if builder is None:
        return []
    items = builder(Facts(dict(occurrence or {}), dict(env or {})))
    for item in items:
        item["category"] = category
    return items
