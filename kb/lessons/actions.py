"""Structured fix actions: what a lesson tells the next job to do differently.

An action is a small JSON object, so agents can apply it without parsing prose:

    {"type": "sbatch", "option": "--mem", "from": "8G", "to": "32G"}
    {"type": "module", "op": "swap", "from": "cuda/11.8", "name": "cuda/12.4"}
    {"type": "module", "op": "load", "name": "gcc/13.2.0"}
    {"type": "env", "name": "NCCL_IB_DISABLE", "value": "1"}
    {"type": "command", "command": "pip install --user pandas"}

``parse_action`` reads the short forms people type after ``--action``:

    --mem=32G  |  --mem 8G->32G  |  sbatch --time=12:00:00  |  -p gpu
    module load cuda/12.4  |  module swap cuda/11.8 cuda/12.4
    export NCCL_IB_DISABLE=1  |  env OMP_NUM_THREADS=8
    run: pip install --user pandas   (anything else is a command too)

Sizes, times and counts are checked with Slurm's own formats (``kb/slurm_units.py``), so a
lesson never tells the next job ``--mem=-5G``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from hpcmem.kb.errors import InputError
from hpcmem.kb.slurm_units import parse_duration, parse_size_mb

# Short sbatch options and the long names actions always use.
SBATCH_ALIASES = {
    "-p": "--partition", "-t": "--time", "-c": "--cpus-per-task", "-n": "--ntasks", "-N": "--nodes",
    "-G": "--gpus", "-C": "--constraint", "-q": "--qos", "-A": "--account", "-J": "--job-name",
}
SBATCH_OPTIONS = frozenset({
    "--mem", "--mem-per-cpu", "--mem-per-gpu", "--time", "--partition", "--gres", "--gpus", "--gpus-per-node",
    "--gpus-per-task", "--constraint", "--cpus-per-task", "--ntasks", "--ntasks-per-node", "--nodes", "--qos",
    "--account", "--exclusive", "--tmp", "--signal", "--requeue", "--array", "--exclude", "--nodelist",
    "--job-name", "--mail-type", "--time-min", "--threads-per-core", "--hint", "--mpi",
})
# Options whose values are checked with Slurm's own formats (kb/slurm_units.py).
SIZE_OPTIONS = frozenset({"--mem", "--mem-per-cpu", "--mem-per-gpu", "--tmp"})
TIME_OPTIONS = frozenset({"--time", "--time-min"})
COUNT_OPTIONS = frozenset({"--cpus-per-task", "--ntasks", "--ntasks-per-node", "--threads-per-core"})
NO_TIME_LIMIT = frozenset({"unlimited", "infinite"})
ACTION_TYPES = ("sbatch", "module", "env", "command")
MODULE_OPS = ("load", "swap", "unload", "purge", "use")

_ARROW = re.compile(r"\s*(?:->|→|=>)\s*")
_ENV = re.compile(r"^(?:export\s+|env\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def parse_action(text: str) -> dict[str, Any]:
    """One action from its short command-line form; InputError says what is wrong."""
    raw = text.strip()
    if not raw:
        raise InputError("empty --action")
    if raw.startswith("{"):
        import json

        try:
            return validate_action(json.loads(raw))
        except ValueError as exc:
            raise InputError(f"--action is not valid JSON: {exc}") from None
    lowered = raw.lower()
    if lowered.startswith(("run:", "cmd:", "command:")):
        return {"type": "command", "command": raw.split(":", 1)[1].strip()}
    if lowered.startswith("module ") or lowered.startswith("ml "):
        return _module(raw)
    if lowered.startswith("sbatch "):
        raw = raw[len("sbatch "):].strip()
    if raw.startswith("-"):
        return _sbatch(raw)
    env = _ENV.match(raw)
    if env and (lowered.startswith(("export ", "env ")) or " " not in raw.split("=", 1)[0]):
        return {"type": "env", "name": env.group(1), "value": _unquote(env.group(2).strip())}
    return {"type": "command", "command": raw}


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _sbatch(raw: str) -> dict[str, Any]:
    split = _ARROW.split(raw, maxsplit=1)
    if len(split) == 2:
        before, after = split
        # "--mem 8G->32G" or "--mem=8G -> 32G"
        option, _, old = before.replace("=", " ", 1).partition(" ")
        option, old, new = option.strip(), old.strip(), after.strip()
    else:
        if "=" in raw.split(" ", 1)[0]:
            option, _, new = raw.partition("=")
        else:
            option, _, new = raw.partition(" ")
        option, old, new = option.strip(), None, new.strip()
    option = SBATCH_ALIASES.get(option, option)
    if option not in SBATCH_OPTIONS:
        raise InputError(f"unknown sbatch option '{option}' in --action", hint="e.g. --mem=32G, --time 4:00:00->12:00:00, -p gpu")
    if not new and option not in ("--exclusive", "--requeue"):
        raise InputError(f"--action {option} needs a value, e.g. {option}=VALUE")
    for value in filter(None, (old, new)):
        check_sbatch_value(option, value)
    action: dict[str, Any] = {"type": "sbatch", "option": option, "to": new or None}
    if old:
        action["from"] = old
    return action


def _module(raw: str) -> dict[str, Any]:
    try:
        words = shlex.split(raw)
    except ValueError as exc:
        raise InputError(f"cannot read --action '{raw}': {exc}") from None
    op = words[1] if len(words) > 1 else ""
    args = words[2:]
    if op not in MODULE_OPS:
        raise InputError(f"unknown module operation '{op}' in --action", hint="use load, swap, unload, purge or use")
    if op == "swap":
        if len(args) != 2:
            raise InputError("--action 'module swap' needs two modules: OLD NEW")
        return {"type": "module", "op": "swap", "from": args[0], "name": args[1]}
    if op == "purge":
        return {"type": "module", "op": "purge"}
    if len(args) != 1:
        raise InputError(f"--action 'module {op}' takes one module per action")
    return {"type": "module", "op": op, "name": args[0]}


def validate_action(action: Any, *, values: bool = True) -> dict[str, Any]:
    """Check a structured action (from JSON, an import or an agent); ``values`` also checks
    sbatch sizes, times and counts (``--mem=-5G`` and ``--time banana`` are refused)."""
    if not isinstance(action, dict) or action.get("type") not in ACTION_TYPES:
        raise InputError(f"an action must be an object with type one of {', '.join(ACTION_TYPES)}")
    kind = action["type"]
    required = {"sbatch": ("option",), "module": ("op",), "env": ("name", "value"), "command": ("command",)}[kind]
    for key in required:
        if not isinstance(action.get(key), str) or not action[key]:
            raise InputError(f"a {kind} action needs a non-empty '{key}'")
    for key, value in action.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise InputError(f"action field '{key}' must be a plain value")
    if values and kind == "sbatch":
        for key in ("from", "to"):
            if isinstance(action.get(key), str):
                check_sbatch_value(action["option"], action[key])
    return dict(action)


def check_sbatch_value(option: str, value: str) -> None:
    """InputError unless ``value`` reads as a value of ``option`` in Slurm's format (other
    options are not checked). Lenient where sbatch is: ``32g``, ``32GB``, bare MB, ``UNLIMITED``."""
    if option in SIZE_OPTIONS:
        text = value[:-1] if value[-2:-1].isalpha() and value[-1:] in "bB" else value  # 32GB -> 32G
        ok, example = _reads(parse_size_mb, text[:-1] + text[-1:].upper()), "32G"
    elif option in TIME_OPTIONS:
        ok, example = value.lower() in NO_TIME_LIMIT or _reads(parse_duration, value), "12:00:00 or 1-00:00:00"
    elif option in COUNT_OPTIONS:
        ok, example = value.isascii() and value.isdigit() and int(value) > 0, "4"
    else:
        return
    if not ok:
        raise InputError(f"'{value}' is not a valid {option} value", hint=f"e.g. {option}={example}")


def _reads(parse: Any, text: str) -> bool:
    try:
        return parse(text) is not None
    except ValueError:
        return False


def describe_action(action: dict[str, Any]) -> str:
    """The action as a person would type it."""
    kind = action.get("type")
    if kind == "sbatch":
        to = action.get("to")
        change = f"{action['option']}={to}" if to else action["option"]
        return f"sbatch {change}" + (f"  (was {action['from']})" if action.get("from") else "")
    if kind == "module":
        if action["op"] == "swap":
            return f"module swap {action['from']} {action['name']}"
        return f"module {action['op']} {action.get('name', '')}".rstrip()
    if kind == "env":
        return f"export {action['name']}={shlex.quote(str(action['value']))}"
    if kind == "command":
        return action["command"]
    return str(action)
