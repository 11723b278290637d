"""`hpcmem check [SCRIPT] [--sbatch-args "..."]`: would Slurm accept this job? Asked before
submitting, from the site's limits in the latest environment snapshot (or live, `--live`).

Exit 0: the request fits a partition the user may use (as far as the snapshot knows: checks it
cannot decide are listed, with the command that would). Exit 1: it does not; each broken limit
is named with the value asked, the value allowed and what would be accepted. Exit 2: bad input
(an unreadable or unparseable script, no snapshot and no `--live`).

Agents run this before every submission, so it starts without typer or rich: `hpcmem check`
is dispatched here by ``cli/entry.py`` with argparse, and the typer command (for `hpcmem
--help`) calls the same ``run_check``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

HELP = "Check a job request against the site's limits before submitting (exit 0 fits, 1 does not, 2 bad input)."
LIVE_HELP = "Ask Slurm (scontrol, sacctmgr) now instead of reading the latest environment snapshot."
USER_HELP = "Whose associations to check (default: you)."


def main(argv: list[str]) -> int:
    """The fast path (no typer): ``hpcmem check ...`` as ``cli/entry.py`` dispatches it."""
    from hpcmem.cli._errors import report_error, report_internal
    from hpcmem.kb.errors import HpcmemError

    parser = _Parser(prog="hpcmem check", description=HELP)
    parser.add_argument("script", nargs="?", type=Path, help="The job script (its #SBATCH lines are the request).")
    parser.add_argument("--sbatch-args", help='sbatch options, e.g. "--mem=8G -p cpu".')
    parser.add_argument("--live", action="store_true", help=LIVE_HELP)
    parser.add_argument("--user", help=USER_HELP)
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")
    parser.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    # `--sbatch-args "--mem=8G"`: the value starts with '-', which argparse takes for an option
    argv = [f"{a}={argv[i + 1]}" if a == "--sbatch-args" and i + 1 < len(argv) else a
            for i, a in enumerate(argv) if not (i > 0 and argv[i - 1] == "--sbatch-args")]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except HpcmemError as exc:
        return report_error(exc)
    if args.debug:
        import os

        os.environ["HPCMEM_DEBUG"] = "1"
    try:
        return run_check(args.script, args.sbatch_args, live=args.live, user=args.user, as_json=args.json)
    except HpcmemError as exc:
        return report_error(exc)
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted\n")
        return 130
    except Exception as exc:  # noqa: BLE001 - never exit 0 or 1 after a failure
        from hpcmem.kb.store.access import as_permission_denied

        refusal = as_permission_denied(exc)
        return report_error(refusal) if refusal else report_internal(exc)


class _Parser(argparse.ArgumentParser):
    """Usage errors as the one-line ``Error:`` every hpcmem command gives (exit 2)."""

    def error(self, message: str):  # noqa: ANN201 - argparse's signature
        from hpcmem.kb.errors import InputError

        raise InputError(message, hint="hpcmem check --help")


def run_check(script: Path | None, sbatch_args: str | None, *, live: bool, user: str | None, as_json: bool,
              config=None) -> int:  # noqa: ANN001 - a hpcmem.kb.config.Config (the typer path's, with --store)
    from hpcmem.kb.errors import InputError

    if script is None and not sbatch_args:
        raise InputError("give a job script or --sbatch-args", hint='e.g. hpcmem check job.sh, or '
                         'hpcmem check --sbatch-args "--mem=8G -p cpu"')
    data = check_job(request_from(script, sbatch_args), live=live, user=user, config=config)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(render(data))
    return 0 if data["fits"] else 1


def check_job(request: dict[str, Any], *, live: bool, user: str | None, config=None) -> dict[str, Any]:  # noqa: ANN001
    """The check's document (``fits``, ``problems``, ``undecided``, ``request``, ``snapshot``),
    as `hpcmem check --json` prints it and MCP's ``check_submission`` returns it."""
    from hpcmem.kb.environment.site_check import check_request

    user = user or _current_user()
    snapshot, about = live_snapshot(user) if live else saved_snapshot(config)
    result = check_request(request, snapshot, user)
    return {**result.as_dict(), "request": request, "snapshot": about}


def request_from(script: Path | None, sbatch_args: str | None) -> dict[str, Any]:
    """The request: sbatch's options win over the script's #SBATCH lines, as with sbatch."""
    from hpcmem.kb.errors import InputError
    from hpcmem.kb.jobs.context import merge_contexts
    from hpcmem.kb.jobs.request import from_sbatch_args, from_script

    from_file: dict[str, Any] = {}
    if script is not None:
        try:
            raw = script.read_bytes()[: 1 << 20]
        except OSError as exc:
            raise InputError(f"cannot read the job script {script}: {exc.strerror or exc}") from None
        try:
            from_file = from_script(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(f"the job script {script} is not a text file") from None
        except InputError as exc:
            raise InputError(f"job script {script}: {exc}", hint=exc.hint) from None
    from_args = from_sbatch_args(sbatch_args) if sbatch_args else {}
    return merge_contexts(from_args, from_file)


def _current_user() -> str:
    import getpass

    return getpass.getuser()


# --------------------------------------------------------------------------- where the facts come from


def saved_snapshot(config=None):  # noqa: ANN001
    """The newest environment snapshot of this cluster in any store of the stack."""
    from hpcmem.kb.config import load_config
    from hpcmem.kb.errors import HpcmemError, InputError
    from hpcmem.kb.environment.site_check import snapshot_from_stored
    from hpcmem.kb.store.reader import StoreReader, newest_environment
    from hpcmem.kb.store.stack import StoreStack

    if config is None:
        config = load_config()  # reads HPCMEM_CONFIG itself
    cluster = config.get("cluster.name")
    stack = StoreStack.from_config(config, adding=False)
    readers = []
    try:
        for store in stack.all():
            try:
                readers.append(StoreReader.open(store, float(config.get("recall.connect_timeout_seconds", 2.0))))
            except HpcmemError:
                continue  # a shared store that is down or absent: the others may have one
        newest = newest_environment(readers, cluster)
    finally:
        for reader in readers:
            reader.close()
        stack.dispose()
    if newest is None:
        raise InputError(f"no environment snapshot of cluster {cluster} in your stores",
                         hint="take one with `hpcmem env snapshot --live` (a site does this from cron), "
                              "or run `hpcmem check --live`")
    return snapshot_from_stored(newest)


def live_snapshot(user: str):
    """The site's limits read from Slurm now (partitions, nodes, QOS, the user's associations)."""
    from hpcmem.ingest.partitions import live_partitions
    from hpcmem.ingest.site_limits import live_associations, live_default_accounts, live_nodes, live_qos
    from hpcmem.kb.environment.snapshot import EnvSnapshot
    from hpcmem.kb.errors import InputError

    partitions, nodes = live_partitions(), live_nodes()
    notes = []
    try:
        qos, assocs, defaults = live_qos(), live_associations(user), live_default_accounts(user)
    except InputError as exc:  # a site without slurmdbd: partitions and nodes still decide a lot
        qos, assocs, defaults = {}, (), {}
        notes.append(f"accounting not read: {exc}")
    snapshot = EnvSnapshot({}, partitions, nodes=nodes, qos=qos, associations=assocs, default_accounts=defaults)
    about = {"id": None, "store": None, "taken_at": _now().isoformat(), "age_s": 0,
             "source": "live: scontrol show partition/node, sacctmgr show qos/assoc/user"
             + (f" ({'; '.join(notes)})" if notes else ""), "site_limits": snapshot.has_site_limits}
    return snapshot, about


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# --------------------------------------------------------------------------- output


def render(data: dict[str, Any]) -> str:
    from hpcmem.kb.environment.site_check import age_text

    snap = data["snapshot"]
    where = "live" if snap.get("id") is None else f"snapshot {snap['id']} of store {snap['store']}, {age_text(snap['age_s'])}"
    head = "fits" if data["fits"] else "does not fit"
    lines = [f"{head}: partition {data['partition'] or '?'}, account {data['account'] or '?'}, "
             f"qos {data['qos'] or '?'} ({where})"]
    for p in data["problems"]:
        lines.append(f"  x {p['message']}")
        if p["accepted"]:
            lines.append(f"    accepted: {' or '.join(p['accepted'])}")
    if data.get("fits_as_is"):
        lines.append(f"  the same request fits with: {' or '.join(data['fits_as_is'])}")
    for u in data["undecided"]:
        lines.append(f"  ? {u['message']}: run `{u['command']}`")
    if not snap.get("site_limits"):
        lines.append("  ? the snapshot has partitions only (no nodes, QOS or associations): "
                     "take one with `hpcmem env snapshot --live`")
    return "\n".join(lines) + "\n"
