"""The typer face of `hpcmem check` (for `hpcmem --help` and global options); the work and the
fast path without typer are in ``cli/check.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from hpcmem.cli.check import LIVE_HELP, USER_HELP, run_check


def check(
    script: Optional[Path] = typer.Argument(None, help="The job script (its #SBATCH lines are the request)."),
    sbatch_args: Optional[str] = typer.Option(None, "--sbatch-args", help='sbatch options, e.g. "--mem=8G -p cpu".'),
    live: bool = typer.Option(False, "--live", help=LIVE_HELP),
    user: Optional[str] = typer.Option(None, "--user", help=USER_HELP),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Would Slurm accept this job? Checks a script or sbatch options against the site's limits
    (exit 0 fits, 1 does not, 2 bad input)."""
    from hpcmem.cli._state import STATE

    raise typer.Exit(run_check(script, sbatch_args, live=live, user=user, as_json=json_, config=STATE.config))
