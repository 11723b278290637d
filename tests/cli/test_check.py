"""`hpcmem check` (before submitting), recall's advice for a refused submission and MCP's
`check_submission`: one set of checks over the site's limits in a stored snapshot (issue 27).
The sample site is data/samples/env/cluster-2026-12 (cluster `lab`, user alice)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.cli.helpers import HPCMEM, run_hpcmem
from tests.conftest import SAMPLES

DEC = SAMPLES / "env" / "cluster-2026-12"
JOBS = SAMPLES / "jobs"
LAB = {"HPCMEM_CLUSTER": "lab"}
SNAPSHOT = ("env", "snapshot", "--modules", str(DEC / "module-t-avail.txt"),
            "--partitions", str(DEC / "scontrol-show-partition-oneliner.txt"),
            "--nodes", str(DEC / "scontrol-show-node-oneliner.txt"), "--qos", str(DEC / "sacctmgr-show-qos.txt"),
            "--assoc", str(DEC / "sacctmgr-show-assoc.txt"), "--users", str(DEC / "sacctmgr-show-user.txt"))
REFUSED_MEMORY = ("$ sbatch --mem=900G -p cpu assemble.sh\nsbatch: error: Memory specification can not be satisfied\n"
                  "sbatch: error: Batch job submission failed: Requested node configuration is not available")


@pytest.fixture
def site_snapshot(hpcmem_home):
    stored = run_hpcmem(*SNAPSHOT, env=LAB)
    assert stored.returncode == 0, stored.stderr
    return hpcmem_home


def check(*args: str, user: str = "alice"):
    return run_hpcmem("check", *args, "--user", user, env=LAB)


def one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr.splitlines()[0]


def test_every_sample_job_script_fits_and_check_exits_0(site_snapshot):
    scripts = sorted(JOBS.glob("*.sh"))
    assert len(scripts) >= 7
    for script in scripts:
        result = check(str(script), "--json")
        assert result.returncode == 0, (script.name, result.stdout, result.stderr)
        data = json.loads(result.stdout)
        assert data["fits"] is True and data["problems"] == [], script.name
        assert data["snapshot"]["id"] == 1 and data["snapshot"]["site_limits"] is True


def test_a_request_that_breaks_limits_exits_1_naming_each_limit_and_what_is_accepted(site_snapshot):
    result = check("--sbatch-args", "--mem=900G -p cpu -t 3-00:00:00", "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    by_kind = {p["kind"]: p for p in data["problems"]}
    assert set(by_kind) == {"partition_max_time", "qos_max_wall", "memory_per_node"}
    assert by_kind["memory_per_node"]["asked"] == "900G" and by_kind["memory_per_node"]["allowed"] == "515000M"
    assert by_kind["partition_max_time"]["accepted"][0] == "--time=2-00:00:00"
    assert data["fits_as_is"] == ["--partition=bigmem --qos=long"]
    assert (data["partition"], data["account"], data["qos"], data["user"]) == ("cpu", "research", "normal", "alice")
    snap = data["snapshot"]
    assert snap["store"] == "user" and isinstance(snap["age_s"], int) and snap["age_s"] >= 0 and snap["taken_at"]

    human = check("--sbatch-args", "--mem=900G -p cpu -t 3-00:00:00")
    assert human.returncode == 1
    first, *rest = human.stdout.splitlines()
    assert first.startswith("does not fit: partition cpu, account research, qos normal (snapshot 1 of store user,")
    assert any("largest node of partition cpu has 515000M" in line for line in rest)
    assert rest[-1].strip() == "the same request fits with: --partition=bigmem --qos=long"


def test_sbatch_args_win_over_the_scripts_lines(site_snapshot):
    script = str(JOBS / "bigmem-assembly.sh")  # bigmem, 900G, 3 days, qos long: fits
    assert check(script).returncode == 0
    result = check(script, "--sbatch-args", "-p cpu", "--json")
    assert result.returncode == 1
    assert {p["kind"] for p in json.loads(result.stdout)["problems"]} >= {"memory_per_node", "partition_max_time"}


def test_another_users_associations(site_snapshot):
    result = check(str(JOBS / "bigmem-assembly.sh"), "--json", user="dmitri")  # no QOS long
    assert result.returncode == 1
    assert [p["kind"] for p in json.loads(result.stdout)["problems"]] == ["qos_unknown"]


def test_bad_input_is_one_line_exit_2_and_stores_nothing(site_snapshot, tmp_path: Path):
    db = site_snapshot / "data" / "user.db"
    before = sqlite3.connect(db).execute("SELECT count(*) FROM env_snapshots").fetchone()
    assert one_line_error(check()) == "Error: give a job script or --sbatch-args"
    assert one_line_error(check("--sbatch-args", "--mem=lots")) == "Error: cannot read --mem=lots: not a Slurm size"
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/bash\n#SBATCH --time=forever\nsrun ./a.out\n")
    assert one_line_error(check(str(bad))).startswith(f"Error: job script {bad}: cannot read --time=forever")
    binary = tmp_path / "a.out"
    binary.write_bytes(b"\x7fELF\x00\x01\xff\xfe")
    assert "not a text file" in one_line_error(check(str(binary)))
    assert "cannot read the job script" in one_line_error(check(str(tmp_path / "missing.sh")))
    assert one_line_error(check("--bogus")) == "Error: unrecognized arguments: --bogus"
    assert sqlite3.connect(db).execute("SELECT count(*) FROM env_snapshots").fetchone() == before


def test_no_snapshot_and_no_live_is_exit_2(hpcmem_home):
    result = check(str(JOBS / "mpi-cpu.sh"))
    assert one_line_error(result) == "Error: no environment snapshot of cluster lab in your stores"
    assert "hpcmem env snapshot --live" in result.stderr
    assert not (hpcmem_home / "data" / "user.db").exists()  # a check creates no store


def test_the_typer_path_with_global_options_gives_the_same_answer(site_snapshot):
    store = str(site_snapshot / "data" / "user.db")
    fast = check("--sbatch-args", "-p gpu --gres=gpu:h100:1", "--json")
    full = run_hpcmem("--store", store, "check", "--sbatch-args", "-p gpu --gres=gpu:h100:1", "--user", "alice",
                      "--json", env=LAB)
    assert fast.returncode == full.returncode == 1, full.stderr
    drop = ("snapshot",)  # its age moves on between the two runs
    assert ({k: v for k, v in json.loads(fast.stdout).items() if k not in drop}
            == {k: v for k, v in json.loads(full.stdout).items() if k not in drop})
    assert "check" in run_hpcmem("--help").stdout


def test_recall_explains_a_refused_submission_from_the_site(site_snapshot):
    # the request comes from the pasted sbatch line
    result = run_hpcmem("recall", REFUSED_MEMORY, "--json", env={**LAB, "LOGNAME": "alice", "USER": "alice"})
    assert result.returncode == 1, result.stderr  # no stored lesson; advice
    advice = json.loads(result.stdout)["advice"]
    site = [a for a in advice if "check" in a]
    assert site and site[0]["check"]["kind"] == "memory_per_node"
    assert "515000M" in site[0]["cause"] and "snapshot 1" in site[0]["cause"]
    assert site[0]["snapshot"]["id"] == 1 and site[0]["snapshot"]["store"] == "user"
    assert site[0]["actions"][0] == {"type": "sbatch", "option": "--mem", "to": "515000M", "from": "900G"}
    # with --script: the script's request, and the broken limit named for that job
    refused = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
    script = Path(site_snapshot) / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -p gpu\n#SBATCH -A physics\n#SBATCH --gres=gpu:1\nsrun ./train\n")
    doc = json.loads(run_hpcmem("recall", refused, "--script", str(script), "--json",
                                env={**LAB, "LOGNAME": "bob", "USER": "bob"}).stdout)
    site = [a for a in doc["advice"] if "check" in a]
    assert site[0]["check"]["kind"] == "account_partition"  # bob's physics may not use gpu
    assert "partition gpu does not allow account physics" in site[0]["cause"]


def test_recall_without_the_request_says_how_to_give_it(site_snapshot):
    doc = json.loads(run_hpcmem("recall", "sbatch: error: Batch job submission failed: Requested node "
                                "configuration is not available", "--json", env=LAB).stdout)
    assert any("--script" in a["fix"] and "hpcmem check" in a["fix"] for a in doc["advice"])


def test_mcp_check_submission(site_snapshot):
    # getpass reads LOGNAME first: the server answers for alice, as it would when she runs it
    params = StdioServerParameters(command=HPCMEM, args=["mcp"],
                                   env={**os.environ, **LAB, "LOGNAME": "alice", "USER": "alice"})

    async def session():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                tools = {t.name: t for t in (await s.list_tools()).tools}
                assert "check_submission" in tools and "BEFORE submitting" in tools["check_submission"].description
                script = (JOBS / "bigmem-assembly.sh").read_text()
                fits = await s.call_tool("check_submission", {"script": script})
                refused = await s.call_tool("check_submission", {"script": script, "sbatch_args": "-p cpu"})
                empty = await s.call_tool("check_submission", {})
                return fits, refused, empty

    fits, refused, empty = asyncio.run(session())
    assert not fits.is_error and not refused.is_error, (fits.content, refused.content)
    assert fits.structured_content["fits"] is True and fits.structured_content["user"] == "alice"
    assert refused.structured_content["fits"] is False
    assert {p["kind"] for p in refused.structured_content["problems"]} == {"memory_per_node", "partition_max_time"}
    assert refused.structured_content["snapshot"]["id"] == 1
    assert empty.is_error and "give 'script'" in empty.content[0].text
