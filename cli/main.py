"""The `hpcmem` command: a thin typer app; each command calls one library function."""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Optional

import typer

from hpcmem import __version__
from hpcmem.cli._errors import report_error, report_internal
from hpcmem.cli._state import STATE

if TYPE_CHECKING:
    from hpcmem.kb.errors import HpcmemError as HpcmemErrorLike

# Every command: name -> (module in hpcmem.cli, function or sub-app, how it is registered).
# A command's module is imported only when the app is built with it, so `hpcmem recall`
# builds an app of one command and never imports the others (or what they import).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "recall": ("recall", "recall", "command"),
    "record": ("record", "record", "command"),
    "learn": ("learn", "learn", "command"),
    "revalidate": ("revalidate", "revalidate", "command"),
    "feedback": ("revalidate", "feedback", "command"),
    "env": ("env", "app", "group"),
    "lessons": ("lessons", "app", "group"),
    "epilog": ("epilog", "epilog", "epilog"),
    "ingest": ("ingest", "app", "group"),
    "check": ("check_cmd", "check", "command"),
    "fingerprint": ("fingerprint", "fingerprint", "command"),
    "db": ("db", "app", "group"),
    "config": ("config_cmd", "app", "group"),
    "stores": ("stores", "stores", "command"),
    "doctor": ("doctor", "doctor", "command"),
    "model": ("model", "app", "group"),
    "mcp": ("mcp_server", "mcp", "command"),
    "serve": ("serve", "serve", "command"),
}
# Root options that take a value: the subcommand is the first word after them.
_VALUE_OPTIONS = ("--config", "--store")


def _register(app: typer.Typer, name: str) -> None:
    module_name, attribute, kind = COMMANDS[name]
    target = getattr(importlib.import_module(f"hpcmem.cli.{module_name}"), attribute)
    if kind == "command":
        app.command(name)(target)
    elif kind == "group":
        app.add_typer(target, name=name)
    elif kind == "epilog":
        from hpcmem.cli.epilog import CONTEXT_SETTINGS

        app.command(name, context_settings=CONTEXT_SETTINGS, add_help_option=False)(target)


def build_app(only: list[str] | None = None) -> typer.Typer:
    """The CLI with every command, or with ``only`` those (what one invocation needs)."""
    app = typer.Typer(
        name="hpcmem",
        help="Failure memory for Slurm clusters: record, recall and revalidate lessons from failed jobs.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,  # DSNs and secrets must never reach a traceback
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(root)
    for name in COMMANDS if only is None else only:
        _register(app, name)
    return app


def commands_needed(argv: list[str]) -> list[str] | None:
    """The one command this command line runs, none for a bare --version, else None (all)."""
    command = invoked_command(argv)
    if command is not None:
        return [command]
    return [] if "--version" in argv and not {"-h", "--help"} & set(argv) else None


def invoked_command(argv: list[str]) -> str | None:
    """The subcommand named on the command line, if it is one of ours."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _VALUE_OPTIONS:
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        return word if word in COMMANDS else None
    return None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hpcmem {__version__}")
        raise typer.Exit()


def root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
    debug: bool = typer.Option(False, "--debug", envvar="HPCMEM_DEBUG", help="Show tracebacks for errors."),
    config: Optional[str] = typer.Option(None, "--config", envvar="HPCMEM_CONFIG", help="Extra config file (highest file scope)."),
    store: Optional[str] = typer.Option(None, "--store", help="User store URL or path for this run (overrides HPCMEM_USER_STORE)."),
) -> None:
    STATE.reset(debug=debug, config_file=config, store_url=store)


def main() -> None:
    from hpcmem.kb.errors import HpcmemError
    from hpcmem.kb.text import as_text

    # The text boundary for everything a command reads: argv (undecodable bytes arrive as
    # lone surrogates) and stdin (undecodable bytes would raise mid-read).
    sys.argv = [as_text(arg) for arg in sys.argv]
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="replace")
    try:
        build_app(only=commands_needed(sys.argv[1:]))(prog_name="hpcmem")
    except HpcmemError as exc:
        sys.exit(report_error(exc))
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted\n")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the exit-code contract: never 0 or 1 after a failure
        sys.exit(report_error(refusal) if (refusal := _users_to_fix(exc)) else report_internal(exc))
    finally:
        if STATE._stack is not None:
            try:
                STATE._stack.dispose()
            except Exception:  # noqa: BLE001 - closing a damaged store must not hide the first error
                pass


def _users_to_fix(exc: Exception) -> HpcmemErrorLike | None:
    """An OS or database refusal is the user's to fix (exit 2), not a bug (exit 3)."""
    from hpcmem.kb.store.access import as_permission_denied

    return as_permission_denied(exc) or _unusable_store(exc)


# What a damaged, locked or unreadable SQLite file says, however deep it surfaced.
_STORE_FAILURES = ("malformed", "not a database", "database is locked", "disk i/o error",
                   "unable to open database", "readonly database", "file is encrypted")


def _unusable_store(exc: BaseException) -> HpcmemErrorLike | None:
    import sqlite3

    from hpcmem.kb.errors import StoreError

    seen: BaseException | None = exc
    while seen is not None:
        cause = getattr(seen, "orig", None) or seen  # SQLAlchemy wraps the driver's error
        if isinstance(cause, sqlite3.DatabaseError):
            message = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
            if any(marker in message.lower() for marker in _STORE_FAILURES):
                return StoreError(f"a store cannot be used: {message}",
                                  hint="run `hpcmem stores` to see which one; restore it from a backup if it is damaged")
        seen = seen.__cause__ or seen.__context__
    return None


def __getattr__(name: str):
    # `hpcmem.cli.main.app`, the full CLI, for tests and tools that expect a module-level app.
    if name == "app":
        return build_app()
    raise AttributeError(name)


if __name__ == "__main__":  # pragma: no cover
    main()
