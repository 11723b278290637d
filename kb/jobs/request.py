"""A job's context read from the places it is written: a job script, sbatch arguments, a
submit line, a stored occurrence, the epilog's environment.

Every reader returns the same flat dict (keys in ``context.FIELDS``), so the context
captured when a failure or a lesson is born and the context of a new query compare key by
key. One parser serves recall's context (issue 26) and the submission checks (issue 27).

Values use Slurm's own formats (``kb/slurm_units.py``): memory in MiB, time limits in
seconds. ``--mem`` is per node, ``--mem-per-cpu`` per CPU; they are kept apart because a
fix for one is not a fix for the other.

Bad input raises ``InputError`` with the option and value that could not be read: a script
whose ``#SBATCH --mem=lots`` sbatch itself would reject is not silently half-read.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from typing import Any, Iterable

from hpcmem.kb.errors import InputError
from hpcmem.kb.jobs.context import clean_context
from hpcmem.kb.slurm_units import parse_duration, parse_size_mb

# sbatch's short options and the long names used here (as ``kb/lessons/actions.py`` does).
SHORT = {"-p": "--partition", "-t": "--time", "-c": "--cpus-per-task", "-n": "--ntasks", "-N": "--nodes",
         "-G": "--gpus", "-C": "--constraint", "-q": "--qos", "-A": "--account", "-J": "--job-name",
         "-D": "--chdir", "-o": "--output", "-e": "--error", "-a": "--array", "-w": "--nodelist",
         "-x": "--exclude", "-d": "--dependency"}
# sbatch options that take no value: everything else takes one.
FLAGS = frozenset({"--exclusive", "--requeue", "--no-requeue", "--hold", "--parsable", "--wait", "--test-only",
                   "--overcommit", "--contiguous", "--spread-job", "--use-min-nodes", "--export-file", "-H", "-O",
                   "-W", "-h", "--help", "-v", "--verbose", "-Q", "--quiet", "-V", "--version", "--usage"})
LAUNCHERS = ("srun", "mpirun", "mpiexec", "torchrun", "accelerate", "deepspeed", "horovodrun", "charmrun")
_MODULE_LINE = re.compile(r"^\s*(?:module|ml)\s+(?:(?:-[-\w]+)\s+)*(load|add|swap|switch)?\s*(.*)$")
_MODULE_SUBCOMMANDS = frozenset({"purge", "list", "avail", "spider", "unload", "del", "rm", "use", "unuse",
                                 "restore", "save", "show", "display", "help", "whatis", "keyword", "reset",
                                 "refresh", "update", "describe", "savelist", "is-loaded", "is-avail", "-t"})
_CONDA = re.compile(r"^\s*(?:conda|mamba|micromamba|source)\s+activate\s+(\S+)")
_VENV = re.compile(r"^\s*(?:source|\.)\s+['\"]?(\S+?)/bin/activate\b")
_SBATCH_CMD = re.compile(r"(?:^|[\s$#>])sbatch\s+(.*)$", re.M)


def _size(option: str, value: str) -> float:
    try:
        mb = parse_size_mb(value.upper() if value[-1:].isalpha() else value)
    except (ValueError, KeyError, IndexError):
        mb = None
    if mb is None:
        raise InputError(f"cannot read {option}={value}: not a Slurm size", hint="e.g. 4G, 500M, 16000")
    return mb


def _count(option: str, value: str) -> int:
    head = value.split("-", 1)[0]  # --nodes=2-4: the minimum decides what must fit
    if not head.isdigit():
        raise InputError(f"cannot read {option}={value}: not a count")
    return int(head)


def _time(option: str, value: str) -> int | None:
    if value.lower() in ("unlimited", "infinite"):
        return None
    try:
        seconds = parse_duration(value)
    except (ValueError, IndexError):
        seconds = None
    if seconds is None:
        raise InputError(f"cannot read {option}={value}: not a Slurm time", hint="e.g. 30, 4:00:00, 1-12:00:00")
    return int(seconds)


def _gres_items(value: str) -> list[str]:
    """``gpu:a100:2,shard:1`` -> ["gpu:a100:2", "shard:1"] (a bare name counts one)."""
    items = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        item = item.removeprefix("gres/").replace("=", ":")
        if not item.rsplit(":", 1)[-1].isdigit():
            item += ":1"
        items.append(item)
    return items


def _gpu_count(items: Iterable[str]) -> int | None:
    counts = [int(i.rsplit(":", 1)[1]) for i in items if i.split(":", 1)[0] == "gpu"]
    return sum(counts) if counts else None


def from_options(pairs: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """Context from (long option, value) pairs, in the order sbatch reads them (later wins)."""
    ctx: dict[str, Any] = {}
    per_task, tasks, per_node = None, None, None
    for option, value in pairs:
        value = value if value is not None else ""
        if option == "--partition":
            ctx["partition"] = value.split(",")[0]
        elif option == "--mem":
            ctx["mem_mb"] = _size(option, value)
            ctx.pop("mem_per_cpu_mb", None)  # sbatch: --mem and --mem-per-cpu exclude each other
        elif option == "--mem-per-cpu":
            ctx["mem_per_cpu_mb"] = _size(option, value)
            ctx.pop("mem_mb", None)
        elif option == "--cpus-per-task":
            per_task = _count(option, value)
        elif option == "--ntasks":
            tasks = _count(option, value)
        elif option == "--ntasks-per-node":
            per_node = _count(option, value)
        elif option == "--mincpus":
            ctx["mincpus"] = _count(option, value)
        elif option == "--exclusive":
            ctx["exclusive"] = True  # the whole node: default memory is counted for all its CPUs
        elif option == "--nodes":
            ctx["nodes"] = _count(option, value)
        elif option == "--time":
            ctx["time_limit_s"] = _time(option, value)
        elif option == "--gres":
            ctx["gres"] = _gres_items(value)
            gpus = _gpu_count(ctx["gres"])
            if gpus is not None:
                ctx["gpus"] = gpus
        elif option in ("--gpus", "--gpus-per-node", "--gpus-per-task"):
            kind, _, count = value.rpartition(":")
            if not count.isdigit():
                raise InputError(f"cannot read {option}={value}: not a GPU count", hint="e.g. 2 or a100:2")
            ctx["gpus"] = int(count)
            if kind:
                ctx["gres"] = [f"gpu:{kind}:{count}"]
        elif option == "--qos":
            ctx["qos"] = value
        elif option == "--account":
            ctx["account"] = value
        elif option == "--constraint":
            ctx["constraint"] = value
        elif option == "--chdir":
            ctx["workdir"] = value
        elif option == "--job-name":
            ctx["job_name"] = value
    if per_node is not None and tasks is None:
        tasks = per_node * ctx.get("nodes", 1)  # sbatch: --ntasks-per-node without -n sets -n this way
    if per_task is not None or tasks is not None:
        ctx["cpus"] = (per_task or 1) * (tasks or 1)
    # How the CPUs are split decides whether they must fit on one node (submission checks).
    for key, value in (("cpus_per_task", per_task), ("ntasks", tasks), ("ntasks_per_node", per_node)):
        if value is not None:
            ctx[key] = value
    return ctx


def split_options(words: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """sbatch's options up to the script name, and what follows (the script and its args)."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            break
        if word == "--":
            i += 1
            break
        name, eq, value = word.partition("=")
        if not eq and not name.startswith("--") and len(name) > 2 and name[:2] in SHORT:
            name, value, eq = name[:2], name[2:], "="  # -c4, -pgpu
        name = SHORT.get(name, name)
        if eq:
            pairs.append((name, value))
        elif name in FLAGS or name.startswith("--no-"):
            pairs.append((name, None))
        elif i + 1 < len(words):
            pairs.append((name, words[i + 1]))
            i += 1
        else:
            raise InputError(f"sbatch option {name} has no value")
        i += 1
    return pairs, words[i:]


def _words(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError as exc:
        raise InputError(f"cannot read {what}: {exc}") from None


def from_sbatch_args(args: str | list[str]) -> dict[str, Any]:
    """Context from ``--sbatch-args "..."`` (or a list of words)."""
    words = _words(args, "--sbatch-args") if isinstance(args, str) else list(args)
    pairs, rest = split_options(words)
    ctx = from_options(pairs)
    if rest:
        ctx["command"] = rest[0]
    return clean_context(ctx)


def from_submit_line(line: str) -> dict[str, Any]:
    """Context from a submit line (sacct's ``SubmitLine``, a pasted ``$ sbatch ...``)."""
    words = _words(line, "the submit line")
    while words and words[0] != "sbatch" and not words[0].endswith("/sbatch"):
        words.pop(0)
    if not words:
        return {}
    return from_sbatch_args(words[1:])


def from_pasted_text(text: str) -> dict[str, Any]:
    """The request of an ``sbatch`` command line pasted with an error, if there is one."""
    found = None
    for found in _SBATCH_CMD.finditer(text):
        pass  # the last command is the one that failed
    if found is None:
        return {}
    try:
        return from_sbatch_args(found.group(1))
    except InputError:
        return {}  # prose around a pasted error is not the user's input to correct


def from_script(text: str) -> dict[str, Any]:
    """Context from a batch script: its ``#SBATCH`` lines (read as sbatch reads them: up to
    the first command) and what the script runs - modules, environment, launcher, program."""
    if "\x00" in text:
        raise InputError("the job script is not text")
    lines = text.splitlines()
    pairs: list[tuple[str, str | None]] = []
    modules: list[str] = []
    commands: list[str] = []
    ctx: dict[str, Any] = {}
    in_header = True
    for number, line in _logical_lines(lines):
        if in_header and line.startswith("#SBATCH"):
            words = _words(line[len("#SBATCH"):].split(" #", 1)[0], f"line {number} of the script")
            pairs.extend(split_options(words)[0])
            continue
        if not line or line.startswith("#"):
            continue
        in_header = False  # sbatch stops reading #SBATCH at the first command
        module = _MODULE_LINE.match(line)
        if module:  # `ml gcc` loads; `module list`, `purge`, `spider`... load nothing
            names = module.group(2).split("#", 1)[0].split()
            if module.group(1) in ("swap", "switch") and len(names) == 2:
                names = names[1:]
            if not module.group(1) and names[:1] == ["purge"]:
                modules = []
            elif module.group(1) or not (names and names[0] in _MODULE_SUBCOMMANDS):
                for name in names:
                    if name.startswith("-") or name in (">", "2>&1"):
                        continue
                    # a later load of the same module replaces the earlier one, as Lmod does
                    modules = [m for m in modules if m.split("/", 1)[0] != name.split("/", 1)[0]] + [name]
            continue
        conda, venv = _CONDA.match(line), _VENV.match(line)
        if conda:
            ctx["conda_env"] = conda.group(1)
        elif venv:
            ctx["venv"] = venv.group(1)
        elif not line.startswith(("export ", "set ", "cd ", "echo ", "source ", ". ", "if ", "fi", "then", "else",
                                  "for ", "done", "do", "while ", "ulimit ")):
            commands.append(line)
    ctx.update(from_options(pairs))
    if modules:
        ctx["modules"] = list(dict.fromkeys(modules))
    if commands:
        ctx.update(_program(commands[-1]))
    ctx["script_sha256"] = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
    return clean_context(ctx)


def _logical_lines(lines: list[str]):
    """(first line number, stripped text) of each shell line: quoted strings and ``\\``
    continuations that run over several lines are joined, so ``python3 -c '...'`` is one."""
    i = 0
    while i < len(lines):
        start, text = i + 1, lines[i].strip()
        i += 1
        while i < len(lines) and not text.startswith("#") and (text.endswith("\\") or _open_quote(text)):
            text = text[:-1] + " " + lines[i].strip() if text.endswith("\\") else text + "\n" + lines[i]
            i += 1
        yield start, text


def _open_quote(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError as exc:
        return "quotation" in str(exc)
    return False


def _program(line: str) -> dict[str, Any]:
    """The launcher and the program of the script's main command (its last one)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    out: dict[str, Any] = {}
    i = 0
    while i < len(words) and re.match(r"^[A-Za-z_]\w*=", words[i]):
        i += 1  # VAR=value before the command
    launchers = []
    while i < len(words) and words[i].rsplit("/", 1)[-1] in LAUNCHERS:  # `srun torchrun ...`: both
        launchers.append(words[i].rsplit("/", 1)[-1])
        i += 1
        while i < len(words) and words[i].startswith("-"):
            i += 1 if "=" in words[i] or i + 1 >= len(words) or words[i + 1].startswith("-") else 2
    if launchers:
        out["launcher"] = " ".join(launchers)
    if i < len(words):
        program = words[i].rsplit("/", 1)[-1]
        if program.startswith("python") and i + 1 < len(words):
            while i + 2 < len(words) and words[i + 1] in ("-u", "-O", "-OO", "-B", "-E", "-s", "-I", "-X", "-W"):
                i += 2 if words[i + 1] in ("-X", "-W") else 1  # interpreter flags before the program
            nxt = words[i + 1]
            if nxt == "-m" and i + 2 < len(words):
                program = f"python -m {words[i + 2]}"
            elif nxt == "-c":
                program = "python -c"
            elif not nxt.startswith("-"):
                program = nxt.rsplit("/", 1)[-1]  # the script python runs names the program
        out["command"] = program
    return out


# The stored columns ``from_occurrence`` reads (occurrences and job_records).
OCCURRENCE_FIELDS = ("partition", "account", "qos", "req_mem_mb", "req_cpus", "req_nodes", "req_time_s",
                     "max_rss_mb", "elapsed_s", "exit_code", "exit_signal", "state", "work_dir", "job_name",
                     "constraints", "modules", "req_gres", "submit_line", "job_context")


def from_occurrence(occ: dict[str, Any]) -> dict[str, Any]:
    """Context of a stored occurrence or job record (the store's column names)."""
    ctx: dict[str, Any] = dict(occ.get("job_context") or {})
    pick = {"partition": "partition", "account": "account", "qos": "qos", "req_mem_mb": "mem_mb",
            "req_cpus": "cpus", "req_nodes": "nodes", "req_time_s": "time_limit_s", "max_rss_mb": "max_rss_mb",
            "elapsed_s": "elapsed_s", "exit_code": "exit_code", "exit_signal": "signal", "state": "state",
            "work_dir": "workdir", "job_name": "job_name", "constraints": "constraint"}
    for column, key in pick.items():
        if occ.get(column) is not None and key not in ctx:
            ctx[key] = occ[column]
    if occ.get("modules") and "modules" not in ctx:
        ctx["modules"] = list(occ["modules"])
    if occ.get("req_gres") and "gres" not in ctx:
        # ReqTRES' gres part: 'gpu=1,gpu:a100=1' - the typed entries say more
        items = _gres_items(occ["req_gres"])
        typed = [i for i in items if i.count(":") == 2]
        ctx["gres"] = typed or items
        gpus = _gpu_count(typed or items)
        if gpus is not None and "gpus" not in ctx:
            ctx["gpus"] = gpus
    if occ.get("submit_line"):
        try:
            submitted = from_submit_line(occ["submit_line"])
        except InputError:
            submitted = {}
        for key, value in submitted.items():
            ctx.setdefault(key, value)
    return clean_context(ctx)


def from_environment(env: dict[str, str]) -> dict[str, Any]:
    """Context from a job's environment (the epilog's, or the agent's own shell)."""
    ctx: dict[str, Any] = {}
    simple = {"SLURM_JOB_PARTITION": "partition", "SLURM_JOB_ACCOUNT": "account", "SLURM_JOB_QOS": "qos",
              "CONDA_DEFAULT_ENV": "conda_env", "VIRTUAL_ENV": "venv", "SLURM_SUBMIT_DIR": "workdir"}
    for name, key in simple.items():
        if env.get(name):
            ctx[key] = env[name]
    if env.get("SLURM_MEM_PER_NODE", "").isdigit():
        ctx["mem_mb"] = float(env["SLURM_MEM_PER_NODE"])
    if env.get("SLURM_MEM_PER_CPU", "").isdigit():
        ctx["mem_per_cpu_mb"] = float(env["SLURM_MEM_PER_CPU"])
    for name in ("SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE"):
        head = env.get(name, "").split("(", 1)[0].split(",", 1)[0]
        if head.isdigit():
            ctx["cpus"] = int(head)
            break
    if env.get("SLURM_JOB_NUM_NODES", "").isdigit():
        ctx["nodes"] = int(env["SLURM_JOB_NUM_NODES"])
    if env.get("SLURM_JOB_GPUS") or env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        count = env.get("SLURM_GPUS_ON_NODE")
        ctx["gpus"] = int(count) if count and count.isdigit() else len(env["SLURM_JOB_GPUS"].split(","))
    modules = [m for m in env.get("LOADEDMODULES", "").split(":") if m]
    if modules:
        ctx["modules"] = modules
    return clean_context(ctx)
