"""Run the real `hpcmem` console script in a subprocess (exit codes, stderr, import cost)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HPCMEM = str(Path(sys.executable).with_name("hpcmem"))


def run_hpcmem(*args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 120):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([HPCMEM, *args], input=input, capture_output=True, text=True, env=full_env, timeout=timeout)
