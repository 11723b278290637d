"""The `hpcmem` console script: dispatch before the CLI's imports where that matters.

`hpcmem epilog` runs once per job end on every compute node, inside Slurm's epilog budget,
so it goes straight to the epilog's standard-library entry point (the same code as
``python -I -m hpcmem.ingest.epilog``) without importing typer, pydantic or rich. `hpcmem
check`, which agents run before every submission, takes a path without typer too.
Everything else goes to the typer app in :mod:`hpcmem.cli.main`.

``--debug`` is a global option; users put it after the subcommand too
(``hpcmem recall --debug ...``), so it is accepted anywhere before a ``--``.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["epilog"]:
        from hpcmem.ingest.epilog import main as epilog_main

        sys.exit(epilog_main(argv[1:]))
    if argv[:1] == ["check"]:
        # agents run it before every submission: argparse, no typer or rich (cli/check.py)
        from hpcmem.cli.check import main as check_main

        sys.exit(check_main(argv[1:]))
    end = argv.index("--") if "--" in argv else len(argv)
    if "--debug" in argv[1:end]:  # after the subcommand: hand it to the root option
        os.environ["HPCMEM_DEBUG"] = "1"
        sys.argv[1:] = [a for i, a in enumerate(argv) if not (a == "--debug" and 0 < i < end)]
    from hpcmem.cli.main import main as cli_main

    cli_main()
