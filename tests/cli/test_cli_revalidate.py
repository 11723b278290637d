"""`hpcmem env snapshot|diff|list`, `hpcmem revalidate`, `hpcmem feedback` as an operator runs them."""

from __future__ import annotations

import json

from tests.cli.helpers import run_hpcmem
from tests.conftest import SAMPLES

ENV = SAMPLES / "env"
LIB = "python3: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory"


def snapshot(month: str, *extra: str):
    d = ENV / month
    return run_hpcmem("env", "snapshot", "--modules", str(d / "module-t-avail.txt"),
                      "--partitions", str(d / "scontrol-show-partition-oneliner.txt"), *extra,
                      env={"HPCMEM_CLUSTER": "lab"})


def test_env_snapshot_diff_and_revalidate_round_trip():
    first = snapshot("cluster-2026-10", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["stored"] is True
    again = json.loads(snapshot("cluster-2026-10", "--json").stdout)
    assert again["stored"] is False  # unchanged environment: nothing new stored

    rec = run_hpcmem("record", "--error", LIB, "--cause", "no CUDA 11 runtime", "--fix", "load cuda 11.8",
                     "--action", "module load cuda/11.8", "--cluster", "lab", "--json")
    lesson_id = json.loads(rec.stdout)["lesson_id"]
    assert json.loads(rec.stdout)["conditions"][-1] == {"kind": "module", "name": "cuda/11.8", "value": "11.8", "op": None}

    assert snapshot("cluster-2026-11").returncode == 0
    diff = run_hpcmem("env", "diff", env={"HPCMEM_CLUSTER": "lab"})
    assert diff.returncode == 0
    assert "module cuda/11.8 removed" in diff.stdout and "partition gpu_test: MaxTime 08:00:00 -> 04:00:00" in diff.stdout
    diff_json = json.loads(run_hpcmem("env", "diff", "1", "2", "--json").stdout)
    assert diff_json["changes"]["partitions_removed"] == [{"name": "bigmem", "change": "removed"}]

    plan = run_hpcmem("revalidate", "--dry-run", env={"HPCMEM_CLUSTER": "lab"})
    assert plan.returncode == 0 and "dry run" in plan.stdout and "candidate -> expired" in plan.stdout
    assert "module cuda/11.8 is no longer installed" in plan.stdout
    plan_json = json.loads(run_hpcmem("revalidate", "--dry-run", "--json", env={"HPCMEM_CLUSTER": "lab"}).stdout)
    assert plan_json["changes"] == [{"lesson_id": lesson_id, "fingerprint": plan_json["changes"][0]["fingerprint"],
                                     "before": "candidate", "after": "expired",
                                     "reasons": ["module cuda/11.8 is no longer installed"]}]
    done = json.loads(run_hpcmem("revalidate", "--json", env={"HPCMEM_CLUSTER": "lab"}).stdout)
    assert done["changed"] == 1
    assert json.loads(run_hpcmem("revalidate", "--json", env={"HPCMEM_CLUSTER": "lab"}).stdout)["changed"] == 0

    hidden = run_hpcmem("recall", LIB, "--json", "--no-model")
    assert lesson_id not in hidden.stdout
    shown = json.loads(run_hpcmem("recall", LIB, "--json", "--include-expired", "--no-model").stdout)
    [expired] = [m for m in shown["matches"] if m["lesson_id"] == lesson_id]
    assert expired["status"] == "expired"


def test_feedback():
    rec = json.loads(run_hpcmem("record", "--error", LIB, "--cause", "c", "--fix", "f", "--json").stdout)
    up = run_hpcmem("feedback", rec["lesson_id"], "--worked", "--job", "42", "--json")
    assert up.returncode == 0 and json.loads(up.stdout)["confirmations"] == 1
    assert json.loads(up.stdout)["confidence"] > rec["confidence"]
    for args, message in [
        ((rec["lesson_id"],), "exactly one of --worked and --failed"),
        ((rec["lesson_id"], "--worked", "--failed"), "exactly one of --worked and --failed"),
        (("0000-nope", "--worked"), "no lesson with id '0000-nope'"),
    ]:
        result = run_hpcmem("feedback", *args)
        assert result.returncode == 2 and message in result.stderr


def test_env_errors_are_one_line():
    for args, message in [
        (["env", "snapshot"], "give --modules FILE, --partitions FILE or --live"),
        (["env", "snapshot", "--modules", "/nope"], "cannot read --modules /nope"),
        (["env", "diff"], "fewer than two snapshots"),
        (["env", "diff", "1"], "give two snapshot ids"),
        (["env", "snapshot", "--live", "--modules", "x"], "not both"),
    ]:
        result = run_hpcmem(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
