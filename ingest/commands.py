"""Running the cluster's own tools (Lmod, scontrol) with a time limit and clear errors."""

from __future__ import annotations

import subprocess

from hpcmem.kb.errors import InputError


def run_command(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``argv`` without stdin; a hang or a missing tool is an InputError naming it."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise InputError(f"{argv[0]} took longer than {timeout:g} s") from exc
    except OSError as exc:
        raise InputError(f"cannot run {argv[0]}: {exc}") from exc
