"""`python -m tests.integration.slurm_lab up|status|down`: the Slurm lab kept up for a person.

`up` brings the lab up and leaves it running after the command exits (SlurmLab.detach);
`status` says whether each daemon is alive and prints the SLURM_CONF to export; `down`
stops it and removes everything `up` created apart from the installed packages
(SlurmLab.purge). Run as root from the repository root. See docs/slurm-harness.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.integration.slurm_lab import (
    DAEMONS,
    DEFAULT_ROOT,
    LOCK_KEEPER,
    NODE,
    SlurmLab,
    SlurmLabError,
    prerequisite_problem,
)


def _gres(text: str) -> tuple[str, int]:
    name, sep, count = text.partition("=")
    if not sep or not name or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=COUNT such as gpu=2, not {text!r}")
    return name, int(count)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.integration.slurm_lab",
        description="Keep the single-node Slurm test cluster up for a person (as root).",
    )
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help=f"the lab's state directory (default {DEFAULT_ROOT})")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring the lab up and leave it running")
    up.add_argument("--user", default="alice", help="the ordinary lab user (default alice)")
    up.add_argument("--extra-user", action="append", default=[], metavar="NAME",
                    help="another ordinary user, created if missing (repeatable)")  # fmt: skip
    up.add_argument("--lab-group", metavar="GROUP",
                    help="an OS group holding the lab's users (a lab's shared store is group-readable)")  # fmt: skip
    up.add_argument("--gres", action="append", type=_gres, default=[], metavar="NAME=COUNT",
                    help="generic resources on the node, e.g. gpu=2 (repeatable)")  # fmt: skip
    up.add_argument("--policies", action="store_true",
                    help="enforce associations/limits/QOS; add QOS short, urgent, account teaching")  # fmt: skip
    up.add_argument("--submission-limits", action="store_true",
                    help="issue 27's site: --policies, gpu=2 unless --gres, partition bigmem of a "
                         "FUTURE node, memory limits on debug")  # fmt: skip
    up.add_argument("--cgroup", choices=("auto", "v1", "none"), default="auto")
    up.add_argument("--base-port", type=int, default=6817,
                    help="slurmctld's port; slurmd and slurmdbd take the next two")  # fmt: skip
    sub.add_parser("status", help="is it up; the SLURM_CONF to export; the node's state")
    sub.add_parser("down", help="stop it and remove everything up created, except packages")
    return parser


def _status(lab: SlurmLab) -> int:
    """Print the state; 0 when every daemon is alive, 3 when the lab is not (fully) up."""
    state = lab.detached_state()
    pids = lab.recorded_pids()
    names = [*DAEMONS, *(n for n in ("mariadbd", LOCK_KEEPER) if n in pids)]
    for name in names:
        pid = pids.get(name)
        print(f"{name:10} {'alive, pid ' + str(pid) if pid else 'not running'}")
    up = state is not None and all(pids.get(name) for name in (*DAEMONS, LOCK_KEEPER))
    if not up:
        print(f"lab: down (root {lab.root})")
        return 3
    node = lab.node_state() or "unknown"
    print(f"node {NODE}: {node}")
    users = ", ".join([state["user"], *state.get("extra_users", [])])
    print(f"users: {users}")
    print(f"lab: up since {state.get('started_at')}")
    print(f"export SLURM_CONF={state['slurm_conf']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    problem = prerequisite_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.command == "status":
            return _status(SlurmLab(args.root))
        if args.command == "down":
            problems = SlurmLab(args.root).purge()
            for line in problems:
                print(f"left behind: {line}", file=sys.stderr)
            print("lab: down" + (" (with leftovers, see above)" if problems else ", nothing left"))
            return 1 if problems else 0
        existing = SlurmLab(args.root)
        if existing.recorded_pids().get(LOCK_KEEPER):
            print("lab: already up")
            return _status(existing)
        lab = SlurmLab(
            args.root, user=args.user, extra_users=tuple(args.extra_user), gres=dict(args.gres),
            lab_group=args.lab_group,
            policies=args.policies, submission_limits=args.submission_limits,
            cgroup=args.cgroup, base_port=args.base_port,
        )  # fmt: skip
        lab._take_lock(wait=False)  # a pytest session using the lab: refuse, do not wait
        lab.up()
        lab.detach()
        print(f"lab: up in {lab.timings.get('slurmd_idle', 0):.1f} s; stop it with "
              "`python -m tests.integration.slurm_lab down`")  # fmt: skip
        return _status(SlurmLab(args.root))
    except SlurmLabError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
