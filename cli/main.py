"""The `hpcmem` command: a thin typer app; each command calls one library function."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from hpcmem import __version__
from hpcmem.cli import access, config_cmd, db, env, epilog, fingerprint, ingest, learn, lessons, mcp_server, model, recall, record, revalidate, serve, spool, stores
from hpcmem.cli._errors import EXIT_ERROR, report_error
from hpcmem.cli._state import STATE

app = typer.Typer(
    name="hpcmem",
    help="Failure memory for Slurm clusters: record, recall and revalidate lessons from failed jobs.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # DSNs and secrets must never reach a traceback
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("recall")(recall.recall)
app.command("record")(record.record)
app.command("learn")(learn.learn)
app.command("revalidate")(revalidate.revalidate)
app.command("feedback")(revalidate.feedback)
app.add_typer(env.app, name="env")
app.add_typer(lessons.app, name="lessons")
app.command("epilog", context_settings=epilog.CONTEXT_SETTINGS, add_help_option=False)(epilog.epilog)
ingest.app.command("spool")(spool.ingest_spool)
app.add_typer(ingest.app, name="ingest")
app.command("fingerprint")(fingerprint.fingerprint)
db.app.command("grant")(access.db_grant)
app.add_typer(db.app, name="db")
app.add_typer(config_cmd.app, name="config")
app.command("stores")(stores.stores)
app.add_typer(model.app, name="model")
app.command("mcp")(mcp_server.mcp)
app.command("serve")(serve.serve)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hpcmem {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
    debug: bool = typer.Option(False, "--debug", envvar="HPCMEM_DEBUG", help="Show tracebacks for errors."),
    config: Optional[str] = typer.Option(None, "--config", envvar="HPCMEM_CONFIG", help="Extra config file (highest file scope)."),
    store: Optional[str] = typer.Option(None, "--store", help="User store URL or path for this run (overrides HPCMEM_USER_STORE)."),
) -> None:
    STATE.reset(debug=debug, config_file=config, store_url=store)


def main() -> None:
    from hpcmem.kb.errors import HpcmemError

    try:
        app(prog_name="hpcmem")
    except HpcmemError as exc:
        sys.exit(report_error(exc))
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted\n")
        sys.exit(130)
    except Exception as exc:  # an OS or database refusal is the user's to fix, not a bug
        from hpcmem.kb.access import as_permission_denied

        denied = as_permission_denied(exc)
        if denied is None:
            raise
        sys.exit(report_error(denied))
    finally:
        if STATE._stack is not None:
            STATE._stack.dispose()


if __name__ == "__main__":  # pragma: no cover
    main()
