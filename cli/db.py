"""`hpcmem db upgrade | downgrade | current | history | refingerprint | scrub`: schema migrations of
one store, its fingerprints brought in line with the failure rules in effect, and its text with
the redaction rules in effect."""

from __future__ import annotations

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE

app = typer.Typer(help="Inspect and migrate a store's schema.", no_args_is_help=True)

SCOPE_HELP = "Which store: user, lab:NAME or cluster."


@app.command("upgrade")
def db_upgrade(
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    revision: str = typer.Argument("head", help="Target revision."),
) -> None:
    """Upgrade a store's schema (creating the store if needed)."""
    from hpcmem.kb.store.database import CREATE

    store = STATE.stack.by_scope(scope)
    store.if_missing = CREATE  # the command that makes new stores, shared ones included
    before = store.revision() if store.exists() else None
    store.open()
    if revision != "head":
        store.upgrade(revision)
    typer.echo(f"{store.name}: {before or 'empty'} -> {store.revision()}", err=True)
    if revision == "head" and before is not None:
        # The admin's step after installing a release: fingerprints follow the new rules.
        _refingerprint_if_stale(store, scope)


def _refingerprint_if_stale(store, scope: str) -> None:  # noqa: ANN001 - a hpcmem.kb.store.database.Store
    import getpass

    from hpcmem.kb.store.refingerprint import refingerprint
    from hpcmem.kb.signatures.rules_digest import DIGEST_KEY, current_digest

    STATE.config  # the site's rules file (signatures.rules_file) is part of the rules
    from sqlalchemy import text

    with store.engine.connect() as conn:
        stored = conn.execute(text("SELECT value FROM store_meta WHERE key = :k"), {"k": DIGEST_KEY}).scalar()
    if stored == current_digest():
        typer.echo(f"{store.name}: fingerprints follow the current failure rules", err=True)
        return
    typer.echo(f"{store.name}: the failure rules changed since its fingerprints were computed; "
               "running `hpcmem db refingerprint`", err=True)
    report = refingerprint(store, actor=getpass.getuser())
    typer.echo(report.summary(), err=True)
    if report.changed:
        from hpcmem.cli.lessons import embed_in_shared

        embed_in_shared(scope)


@app.command("refingerprint")
def db_refingerprint(
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report what would change; write nothing."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Recompute a store's fingerprints under the failure rules in effect.

    Needed after a release or an edit of the site's rules file (signatures.rules_file)
    changed the rules: until then exact matches in recall can be missed. `db upgrade`
    runs it when needed. One transaction; a second run changes nothing.
    """
    import getpass

    from hpcmem.kb.store.refingerprint import refingerprint

    STATE.config  # the site's rules file is part of the rules
    store = STATE.stack.by_scope(scope)
    report = refingerprint(store, dry_run=dry_run, actor=getpass.getuser())
    if report.changed and not dry_run:
        from hpcmem.cli.lessons import embed_in_shared

        embed_in_shared(scope)
    if json_:
        emit_json(report.as_dict())
    else:
        stdout.print(report.summary(), highlight=False)


@app.command("scrub")
def db_scrub(
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count what would change; write nothing."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Re-redact a store's text with the redaction rules in effect.

    Run it after an upgrade brings new rules: lessons (with their aliases, conditions and
    evidence), signatures, occurrences, job records and the audit log are normalised and
    redacted again, in one transaction; the append-only audit log is cleaned too, and one
    audit entry records the scrub. Vectors computed from the old text are dropped and the
    cleared signatures embedded again. Reports counts per table, never a value; a second
    run changes nothing.
    """
    import getpass

    from hpcmem.kb.store.scrub import scrub_store

    store = STATE.stack.by_scope(scope)
    store.check_exists()  # a missing store is reported, not created to be scrubbed
    report = scrub_store(store, dry_run=dry_run, actor=getpass.getuser())
    if not dry_run:
        _vectors_after_scrub(store, report)
        from hpcmem.kb.store.redaction_meta import record_redaction_digest

        record_redaction_digest(store)  # its text now follows these rules (`hpcmem doctor` compares)
    if json_:
        emit_json(report.as_dict())
    else:
        stdout.print(report.summary(), highlight=False)


def _vectors_after_scrub(store, report) -> None:  # noqa: ANN001 - a Store, a kb.store.scrub.ScrubReport
    """The signature vectors the scrub cleared, computed again from the clean text, and this
    user's index of the store rebuilt without the old ones (other readers' indexes rebuild
    on their next recall: the scrub bumped the store's generations). Best effort: the scrub
    is committed, and what is left here recall and `hpcmem lessons embed` do later."""
    if not report.vectors_cleared:
        return
    from pathlib import Path

    from hpcmem.cli._output import stderr
    from hpcmem.kb.recall.embed import embed_new_lessons, model_spec
    from hpcmem.kb.recall.vector_index import SignatureIndex, store_id

    report.vectors_recomputed, warning = embed_new_lessons(store, STATE.config)
    if warning:
        stderr.print(f"Warning: {warning}")
    index_dir = Path(str(STATE.config.get("index.dir"))).expanduser()
    files = [index_dir / f"{store_id(store)}{suffix}" for suffix in (".json", ".faiss")]
    if not files[0].is_file():
        return  # no index of it here
    try:
        SignatureIndex.load(store, index_dir, model_spec(STATE.config).model_id,
                            int(STATE.config.get("index.flat_max", 20_000)))
        return
    except Exception as exc:  # noqa: BLE001 - then the old file must go: the next recall builds one
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for path in files:
        path.unlink(missing_ok=True)
    stderr.print(f"Warning: the vector index of store '{store.name}' was removed, not rebuilt ({reason}); "
                 "the next recall builds it")


@app.command("downgrade")
def db_downgrade(
    revision: str = typer.Argument(..., help="Target revision, or 'base' to drop every table."),
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    yes: bool = typer.Option(False, "--yes", help="Confirm; a downgrade can drop data."),
) -> None:
    """Downgrade a store's schema (destructive; needs --yes)."""
    from hpcmem.kb.errors import InputError

    if not yes:
        raise InputError("a downgrade can drop data; repeat with --yes to confirm")
    store = STATE.stack.by_scope(scope)
    store.check_exists()  # a missing store is reported, not created by the first query
    before = store.revision()
    store.downgrade(revision)
    typer.echo(f"{store.name}: {before} -> {store.revision() or 'base'}", err=True)


@app.command("current")
def db_current(
    scope: str = typer.Option("user", "--scope", help=SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show a store's schema revision and the revision this hpcmem expects."""
    from hpcmem.kb.store.database import NOT_YET
    from hpcmem.kb.store.schema_version import SCHEMA_HEAD

    store = STATE.stack.by_scope(scope)
    if not store.exists() and store.if_missing != NOT_YET:
        raise store.missing_error()  # a store the user named: a typo is not "empty"
    info = store.info()
    if not info.reachable and store.exists():
        from hpcmem.kb.errors import StoreError

        store.check_file()  # these raise the reason with its hint; info() kept only the message
        store.revision()
        raise StoreError(info.error or f"store '{store.name}' is unreachable")
    data = {"store": store.name, "revision": info.revision, "head": SCHEMA_HEAD, "up_to_date": info.revision == SCHEMA_HEAD}
    if json_:
        emit_json(data)
    else:
        state = "up to date" if data["up_to_date"] else "behind"
        current = info.revision or ("empty" if store.exists() else "not created yet")
        stdout.print(f"{store.name}: {current} (head {SCHEMA_HEAD}, {state})", highlight=False)


@app.command("history")
def db_history(json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List the schema revisions this hpcmem ships, newest first."""
    from hpcmem.kb.store import migrate

    revisions = migrate.history()
    if json_:
        emit_json(revisions)
        return
    from rich.table import Table

    table = Table("revision", "down", "description")
    for rev in revisions:
        table.add_row(rev["revision"], rev["down_revision"] or "-", rev["message"])
    stdout.print(table)


# `db grant` lives with the other access-control code; same group.
from hpcmem.cli.access import db_grant  # noqa: E402

app.command("grant")(db_grant)
