"""`hpcmem env snapshot --nodes/--qos/--assoc/--users`, `env diff` and `env list` (issue 27, item 1)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.helpers import run_hpcmem
from tests.conftest import SAMPLES

ENV = SAMPLES / "env"
NOV, DEC = ENV / "cluster-2026-11", ENV / "cluster-2026-12"
LAB = {"HPCMEM_CLUSTER": "lab"}
SITE = ("--nodes", str(DEC / "scontrol-show-node-oneliner.txt"), "--qos", str(DEC / "sacctmgr-show-qos.txt"),
        "--assoc", str(DEC / "sacctmgr-show-assoc.txt"), "--users", str(DEC / "sacctmgr-show-user.txt"))


def one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr.splitlines()[0]


def test_snapshot_with_site_limits_then_diff_and_list(tmp_path: Path):
    first = run_hpcmem("env", "snapshot", "--modules", str(NOV / "module-t-avail.txt"),
                       "--partitions", str(NOV / "scontrol-show-partition-oneliner.txt"), env=LAB)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "stored snapshot 1: 12 modules, 5 partitions"

    second = run_hpcmem("env", "snapshot", "--modules", str(DEC / "module-t-avail.txt"),
                        "--partitions", str(DEC / "scontrol-show-partition-oneliner.txt"), *SITE, env=LAB)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "stored snapshot 2: 13 modules, 6 partitions, 92 nodes, 5 QOS, 13 associations"

    diff = run_hpcmem("env", "diff", env=LAB)
    assert diff.returncode == 0, diff.stderr
    lines = [line.strip() for line in diff.stdout.splitlines()]
    assert "partition bigmem added" in lines
    assert lines[-4:] == ["nodes first recorded (92)", "QOS first recorded (5)", "associations first recorded (13)",
                          "default accounts first recorded (6)"]

    # a month later: one QOS file changes, every other part carries over
    path = tmp_path / "qos.txt"
    path.write_text((DEC / "sacctmgr-show-qos.txt").read_text().replace("|04:00:00|", "|02:00:00|"))
    third = run_hpcmem("env", "snapshot", "--qos", str(path), "--json", env=LAB)
    assert third.returncode == 0, third.stderr
    stored = json.loads(third.stdout)
    assert stored["stored"] is True
    summary = stored["snapshot"]
    assert (summary["modules"], summary["partitions"], summary["nodes"], summary["qos"], summary["associations"],
            summary["default_accounts"]) == (13, 6, 92, 5, 13, 6)
    assert summary["source"].endswith("(modules carried over from snapshot 2; partitions carried over from snapshot 2; "
                                      "nodes, associations, default accounts carried over from snapshot 2)")
    diff = json.loads(run_hpcmem("env", "diff", "--json", env=LAB).stdout)
    assert diff["describe"] == ["QOS short: MaxWall 04:00:00 -> 02:00:00"]
    assert diff["changes"]["qos_changes"] == [{"qos": "short", "field": "MaxWall", "old": "04:00:00",
                                               "new": "02:00:00"}]
    assert diff["to"]["qos"] == 5 and diff["from"]["nodes"] == 92

    listed = json.loads(run_hpcmem("env", "list", "--json").stdout)
    assert [(r["id"], r["nodes"], r["qos"], r["associations"]) for r in listed] == [
        (3, 92, 5, 13), (2, 92, 5, 13), (1, 0, 0, 0)]
    table = run_hpcmem("env", "list", env={"COLUMNS": "200"})
    assert "nodes" in table.stdout and "QOS" in table.stdout and "assoc" in table.stdout

    # the same file again: nothing new stored (the snapshot is the same as the latest one)
    again = run_hpcmem("env", "snapshot", "--qos", str(path), "--json", env=LAB)
    assert json.loads(again.stdout)["stored"] is False
    back = run_hpcmem("env", "snapshot", *SITE, env=LAB)  # December's QOS again: a change back
    assert back.stdout.strip() == "stored snapshot 4: 13 modules, 6 partitions, 92 nodes, 5 QOS, 13 associations"


def test_site_limit_errors_are_one_line(tmp_path: Path):
    noheader = ENV / "real-slurm-limits" / "sacctmgr-show-qos-noheader.txt"
    assert one_line_error(run_hpcmem("env", "snapshot", "--qos", str(noheader))) == (
        f"Error: {noheader}: line 1: not a `sacctmgr show qos -P` header: "
        "'normal|0|00:00:00|||cluster|||1.000000|||||||||||||||||' (no Name)")
    assert one_line_error(run_hpcmem("env", "snapshot", "--nodes", "/nope")) == (
        "Error: cannot read --nodes /nope: No such file or directory")
    assert one_line_error(run_hpcmem("env", "snapshot", "--live", "--assoc", str(noheader))) == (
        "Error: give --live or files, not both")
    assert one_line_error(run_hpcmem("env", "snapshot", "--user", "alice", "--nodes", str(noheader))).startswith(
        "Error: --user applies with --live only")
    empty = tmp_path / "nodes.txt"
    empty.write_text("")
    # nothing to carry modules and partitions over from: said before the empty listing
    assert one_line_error(run_hpcmem("env", "snapshot", "--nodes", str(empty))) == f"Error: {empty}: empty node listing"


def test_live_snapshot_without_accounting_stores_partitions_and_nodes_and_says_why(tmp_path: Path):
    """A site without slurmdbd (here: no sacctmgr at all) still gets its hourly snapshot."""
    import shutil

    real = ENV / "real-slurm-limits"
    cat = shutil.which("cat")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (
        ("scontrol", f'case "$*" in\n  *partition*) {cat} "{real / "scontrol-show-partition-oneliner.txt"}" ;;\n'
                     f'  *node*) {cat} "{real / "scontrol-show-node-oneliner.txt"}" ;;\nesac\n'),
        ("lmod", f'{cat} "{ENV / "real-slurm" / "lmod" / "module-t-avail.txt"}" >&2\n'),
    ):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    live = {**LAB, "PATH": str(bin_dir), "LMOD_DIR": "", "LMOD_CMD": str(bin_dir / "lmod")}
    result = run_hpcmem("env", "snapshot", "--live", env=live)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stored snapshot 1: 2 modules, 2 partitions, 1 nodes",
                                          "warning: accounting not read (sacctmgr not found)"]
