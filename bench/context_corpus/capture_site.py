"""Capture the site's limits of the cluster a context-corpus collection was made on.

    python bench/context_corpus/capture_site.py --set context|validation|fresh|fresh2

Brings the harness up exactly as ``make_context_corpus.py`` did for that collection (the same
``SlurmLab`` options and, for validation, fresh and fresh2, the same accounts made with sacctmgr), runs the
commands ``hpcmem env snapshot --live`` runs (scontrol show partition/node, sacctmgr show
qos/assoc/user) and writes their real output to ``data/corpus/<collection>/site/``. The context
bench stores them as the environment snapshot, so recall judges a refused submission on the
limits of the cluster that refused it (issue 27's checks). Nothing is submitted.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from make_context_corpus import SETS, WITH_VALIDATION_SETUP, validation_accounts  # noqa: E402
from tests.integration.slurm_lab import SlurmLab  # noqa: E402

COMMANDS = {
    "scontrol-show-partition-oneliner.txt": ["scontrol", "--oneliner", "show", "partition"],
    "scontrol-show-node-oneliner.txt": ["scontrol", "--oneliner", "--future", "show", "node"],
    "sacctmgr-show-qos.txt": ["sacctmgr", "-P", "show", "qos"],
    "sacctmgr-show-assoc.txt": ["sacctmgr", "-P", "show", "assoc"],
    "sacctmgr-show-user.txt": ["sacctmgr", "-P", "show", "user"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS), required=True)
    args = parser.parse_args()
    chosen = SETS[args.set]
    out = chosen["out"] / "site"
    out.mkdir(exist_ok=True)
    lab = SlurmLab(gres={"gpu": 2}, policies=True, extra_users=chosen["extra_users"])
    with lab:
        if args.set in WITH_VALIDATION_SETUP:
            validation_accounts(lab)
        version = lab.check(["sinfo", "--version"]).strip()
        for name, argv in COMMANDS.items():
            (out / name).write_text(lab.check(argv))
    (out / "provenance.json").write_text(json.dumps({
        "captured": datetime.now(timezone.utc).isoformat(timespec="seconds"), "slurm": version,
        "harness": f"SlurmLab(gres={{'gpu': 2}}, policies=True, extra_users={chosen['extra_users']!r})"
                   + (" + make_context_corpus.validation_accounts" if args.set in WITH_VALIDATION_SETUP else ""),
        "commands": {name: " ".join(argv) for name, argv in COMMANDS.items()},
    }, indent=2) + "\n")
    print(f"wrote {len(COMMANDS)} captures to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
