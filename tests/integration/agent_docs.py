"""The agent loop's steps as docs/agents.md gives them, for the test that runs them.

Each step is a fenced block right after an ``<!-- agent-loop: NAME -->`` marker: a shell
command (```sh) or an MCP tool call (```json, ``{"tool": ..., "arguments": {...}}``). The
test fills in the placeholders (the words in capitals, and ``job.sh``) and runs exactly that,
so the page cannot drift from what works.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
STEP = re.compile(r"^<!-- agent-loop: ([\w-]+) -->\n```(\w+)\n(.*?)^```$", re.M | re.S)
PLACEHOLDERS = ("FAILED_JOBID", "JOBID", "ID", "OPTION", "VALUE", "CAUSE", "FIX", "ACTION", "LAB", "SCRIPT",
                "ERROR")
# job.sh is the script's file name in the commands
_PLACEHOLDER = re.compile(r"\b(" + "|".join(PLACEHOLDERS) + r")\b|(?<![\w.])job\.sh\b")


class DocStepError(AssertionError):
    """docs/agents.md lacks a step, or a step has a placeholder the test did not fill in."""


def steps(doc: Path = DOC) -> dict[str, tuple[str, str]]:
    """Step name -> (language, text) for every marked block of the page."""
    found: dict[str, tuple[str, str]] = {}
    for name, lang, text in STEP.findall(doc.read_text()):
        if name in found:
            raise DocStepError(f"{doc}: two steps named {name!r}")
        found[name] = (lang, text.strip())
    return found


def _fill(text: str, values: dict[str, str], step: str) -> str:
    def one(match: re.Match) -> str:
        key = match.group(1) or "job.sh"
        if key not in values:
            raise DocStepError(f"step {step!r} of docs/agents.md needs {key}, which the test did not give")
        return values[key]

    return _PLACEHOLDER.sub(one, text)


def command(name: str, **values: str) -> list[str]:
    """The argv of shell step ``name`` with its placeholders filled in (``job_sh`` names job.sh)."""
    lang, text = _step(name, "sh")
    values = {("job.sh" if k == "job_sh" else k): v for k, v in values.items()}
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if len(lines) != 1:
        raise DocStepError(f"step {name!r} of docs/agents.md must be one command, not {len(lines)} lines")
    # placeholders are filled per word, after the shell's quoting is undone: "CAUSE" becomes one argument
    return [_fill(word, values, name) for word in shlex.split(lines[0], comments=True)]


def tool_call(name: str, **values: str) -> tuple[str, dict[str, Any]]:
    """(tool, arguments) of MCP step ``name`` with every placeholder in its strings filled in."""
    _lang, text = _step(name, "json")
    call = json.loads(text)

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _fill(value, values, name)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return call["tool"], walk(call["arguments"])


def _step(name: str, lang: str) -> tuple[str, str]:
    found = steps()
    if name not in found:
        raise DocStepError(f"docs/agents.md has no step <!-- agent-loop: {name} -->")
    if found[name][0] != lang:
        raise DocStepError(f"step {name!r} of docs/agents.md is ```{found[name][0]}, expected ```{lang}")
    return found[name]
