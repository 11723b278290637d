"""`hpcmem epilog`: the Slurm epilog hook under the CLI (same code as ``python -m hpcmem.ingest.epilog``).

Its options belong to the epilog's own argument parser (``hpcmem epilog --help``), so
the command takes its arguments as they are. Sites should call the lighter
``python -I -m hpcmem.ingest.epilog`` from the wrapper (docs/site-epilog.md): this
command first pays for the CLI's imports (typer, rich), about 0.1 s more per job.
"""

from __future__ import annotations

import typer

# Register with: app.command("epilog", context_settings=CONTEXT_SETTINGS, add_help_option=False)
CONTEXT_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def epilog(ctx: typer.Context) -> None:
    """Record a failed Slurm job into the spool from Epilog/EpilogSlurmctld/TaskEpilog. Always exits 0."""
    from hpcmem.ingest.epilog import main

    raise typer.Exit(main(list(ctx.args)))
