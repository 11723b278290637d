"""`hpcmem env snapshot | diff | list`: the cluster environment lessons depend on."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE

app = typer.Typer(help="Snapshots of modules (Lmod), partitions and the site's limits (scontrol, sacctmgr), "
                       "and their differences.", no_args_is_help=True)

SCOPE_HELP = "Store to use: user, lab:NAME or cluster."
ALLOW_EMPTY_HELP = ("Accept a listing with nothing in it (no module, partition, node, QOS...), or none of those "
                    "in the latest snapshot (refused by default: a failed capture looks like that).")


def read_text(path: Optional[Path], what: str) -> Optional[str]:
    if path is None:
        return None
    from hpcmem.kb.errors import InputError

    try:
        with open(path, "rb") as fh:
            return fh.read(50_000_000).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None


@app.command("snapshot")
def env_snapshot(
    modules: Optional[Path] = typer.Option(None, "--modules", help="`module -t avail` output or Lmod spider JSON."),
    partitions: Optional[Path] = typer.Option(None, "--partitions", help="`scontrol show partition --oneliner` or sinfo output."),
    nodes: Optional[Path] = typer.Option(None, "--nodes", help="`scontrol show node --oneliner` (or multi-line) output."),
    qos: Optional[Path] = typer.Option(None, "--qos", help="`sacctmgr show qos -P` output (with its header)."),
    assoc: Optional[Path] = typer.Option(None, "--assoc", help="`sacctmgr show assoc -P` output (with its header)."),
    users: Optional[Path] = typer.Option(None, "--users", help="`sacctmgr show user -P` output (users' default accounts)."),
    live: bool = typer.Option(False, "--live", help="Run Lmod, scontrol and sacctmgr here (accounting is optional: "
                              "without slurmdbd its parts carry over, with a warning)."),
    user: Optional[str] = typer.Option(None, "--user", help="With --live: read only this user's associations and "
                                       "default account (default: every user's)."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help=ALLOW_EMPTY_HELP),
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Store the current environment (only when it changed since the latest snapshot). A part
    not given (modules, partitions, nodes, QOS, associations, users) carries over from the latest one."""
    from hpcmem.ingest.environment import build_snapshot
    from hpcmem.kb.environment.history import latest_snapshot, save_snapshot
    from hpcmem.kb.errors import InputError

    files = {"--modules": modules, "--partitions": partitions, "--nodes": nodes, "--qos": qos, "--assoc": assoc,
             "--users": users}
    if live and any(files.values()):
        raise InputError("give --live or files, not both")
    if user and not live:
        raise InputError("--user applies with --live only (a file holds whatever users it was taken for)")
    texts = {option: read_text(path, option) for option, path in files.items()}
    store = STATE.stack.by_scope(scope).open()
    cluster = STATE.config.get("cluster.name")
    previous = latest_snapshot(store, cluster)
    snapshot, carried = build_snapshot(texts["--modules"], texts["--partitions"], live=live, previous=previous,
                                       allow_empty=allow_empty, modules_from=str(modules),
                                       partitions_from=str(partitions), nodes_text=texts["--nodes"],
                                       qos_text=texts["--qos"], assoc_text=texts["--assoc"],
                                       users_text=texts["--users"], nodes_from=str(nodes), qos_from=str(qos),
                                       assoc_from=str(assoc), users_from=str(users), assoc_user=user)
    source = "live" if live else ", ".join(str(p) for p in files.values() if p)
    stored, new = save_snapshot(store, snapshot, cluster=cluster, source=source + (f" ({carried})" if carried else ""))
    data = {"stored": new, "snapshot": stored.summary()}
    if json_:
        emit_json(data)
        return
    s = stored.summary()
    what = f"snapshot {s['id']}: {_counts(s)}"
    stdout.print(f"stored {what}" if new else f"unchanged since {s['taken_at'][:19]} ({what})")
    for warning in (part for part in carried.split("; ") if part.startswith("warning: ")):
        stdout.print(warning)


def _counts(summary: dict) -> str:
    """'120 modules, 6 partitions' and, when the snapshot has them, the site's limits."""
    text = f"{summary['modules']} modules, {summary['partitions']} partitions"
    site = [f"{summary[key]} {name}" for key, name in (("nodes", "nodes"), ("qos", "QOS"),
                                                       ("associations", "associations")) if summary.get(key)]
    return ", ".join([text, *site])


@app.command("list")
def env_list(
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """The stored snapshots, newest first."""
    from hpcmem.kb.environment.history import snapshots

    rows = [s.summary() for s in snapshots(STATE.stack.by_scope(scope).open())]
    if json_:
        emit_json(rows)
        return
    from rich.table import Table

    table = Table("id", "cluster", "taken at", "modules", "partitions", "nodes", "QOS", "assoc", "source")
    for r in rows:
        table.add_row(str(r["id"]), r["cluster"], r["taken_at"][:19], str(r["modules"]), str(r["partitions"]),
                      str(r["nodes"]), str(r["qos"]), str(r["associations"]), r["source"])
    stdout.print(table)


@app.command("diff")
def env_diff(
    a: Optional[int] = typer.Argument(None, help="Older snapshot id (default: the one before the latest)."),
    b: Optional[int] = typer.Argument(None, help="Newer snapshot id (default: the latest)."),
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Modules added/removed/default changed, partitions, nodes, QOS and associations added/removed/changed."""
    from hpcmem.kb.environment.history import diff, get_snapshot, snapshots
    from hpcmem.kb.errors import InputError

    store = STATE.stack.by_scope(scope).open()
    if (a is None) != (b is None):
        raise InputError("give two snapshot ids, or none for the latest two")
    if a is None:
        latest = snapshots(store, STATE.config.get("cluster.name"), limit=2)
        if len(latest) < 2:
            raise InputError("fewer than two snapshots stored", hint="take one with `hpcmem env snapshot`")
        older, newer = latest[1], latest[0]
    else:
        older, newer = get_snapshot(store, a), get_snapshot(store, b)
    result = diff(older, newer)
    if json_:
        emit_json(result)
        return
    stdout.print(f"snapshot {older.id} ({result['from']['taken_at'][:19]}) -> {newer.id} ({result['to']['taken_at'][:19]})")
    for line in result["describe"] or ["no differences"]:
        stdout.print(f"  {line}")
