"""`hpcmem config show`: the effective configuration and where each value came from."""

from __future__ import annotations

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE

app = typer.Typer(help="Show the layered configuration.", no_args_is_help=True)


@app.command("show")
def config_show(json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Print every setting with the scope that set it (builtin, site, user, file, env, cli)."""
    from hpcmem.kb.store.database import redact_url

    rows = [(key, redact_url(v) if key.endswith(".url") else v, origin) for key, v, origin in STATE.config.flat()]
    if json_:
        emit_json({"values": STATE.config.values | {}, "settings": [
            {"key": k, "value": v, "origin": o} for k, v, o in rows], "warnings": STATE.config.warnings})
        return
    from rich.table import Table

    table = Table("key", "value", "from")
    for key, value, origin in rows:
        table.add_row(key, str(value), origin)
    stdout.print(table)
    for warning in STATE.config.warnings:
        stdout.print(f"Warning: {warning}")
