"""`hpcmem stores`: the store stack with reachability and schema version."""

from __future__ import annotations

import typer

from hpcmem.cli._output import emit_json, stdout, styled
from hpcmem.cli._state import STATE


def stores(json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the user, lab and cluster stores; migrates the user store if behind, creates none.

    Exit 2 when the user store is unusable (damaged, or named and missing); a lab or cluster
    store that is missing, damaged or down is listed as unreachable, with the reason."""
    from hpcmem.kb.store.stack import describe_stack

    infos = describe_stack(STATE.stack)
    if json_:
        emit_json({"stores": [info.as_dict() for info in infos]})
        return
    from rich.table import Table

    table = Table("name", "scope", "url", "reachable", "schema", "journal")
    for info in infos:
        from rich.text import Text

        reach = styled("[green]yes[/green]") if info.reachable else styled("[red]no[/red] ") + Text(f"({info.error})")
        schema = f"{info.revision or '-'}" + ("" if info.revision == info.head else f" (head {info.head})")
        table.add_row(info.name, info.scope, info.url, reach, schema, info.journal_mode or "-")
    stdout.print(table)
