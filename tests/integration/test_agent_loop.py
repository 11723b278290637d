"""The agent's loop on a real Slurm cluster, as two ordinary users (issue 34, item 7).

alice works through the CLI, bob through the MCP server; neither is root, and both run the
hpcmem that a site installs for its users (tests/integration/user_install.py: a virtualenv of
the system Python). Every hpcmem command and tool call is a step of docs/agents.md, read from
the page (tests/integration/agent_docs.py), so the guide says what was run.

The site is set up as docs/site-epilog.md and docs/deployment.md say: the node's Epilog spools
each failed job, a site config names the spool, the cluster and the lab's SQLite store, which
lives in a setgid directory of the lab's group.

- alice's prep.sh runs out of memory; recall knows nothing and advises from the request;
  she resubmits with the advice until the job completes, records the lesson and proposes it
  to the lab; accounting then confirms her lesson instead of writing a second one.
- bob's copy of prep.sh runs out of memory: the lab's lesson comes first, as a match; he
  applies it and confirms it. His train.sh, which already asks more than that lesson's fix,
  runs out of memory too: the lesson is only related, and nothing offers less than 768M (or
  more than the node has); following the advice, it completes and he records that.
- a module lesson (gcc) is applied to its own failure and is no match for another missing
  module (cuda/13.0).
- a job pending over the partition's MaxTime is explained, and the explanation's own
  command makes it run (CLI and MCP).
- `record --job` right after a failure knows the job the epilog just spooled.

Each user first snapshots what the cluster offers (docs/agents.md, step 0), so advice stays
within the node's memory and names module versions that exist.

The session's lab (conftest) is paused meanwhile: this module needs a lab with a second user,
a lab group and the hpcmem Epilog, and one node runs one lab at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.integration import agent_docs as docs
from tests.integration.conftest import CGROUP, REQUIRE_SLURM
from tests.integration.slurm_lab import SYSTEM_PATH, SlurmLab, SubmissionRejected
from tests.integration.user_install import user_venv

pytestmark = pytest.mark.slurm

JOBS = Path(__file__).resolve().parent / "jobs"
LAB = "vision"  # the lab's name in hpcmem's config
LAB_GROUP = "hpcmemloop"  # its OS group, holding alice and bob
FIRST, SECOND = "alice", "bob"
MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
EPILOG = """#!/bin/sh
# Epilog of tests/integration/test_agent_loop.py: the site wrapper of docs/site-epilog.md,
# run by slurmd as root with the users' virtualenv. It must exit 0 whatever happens.
case "$SLURM_SCRIPT_CONTEXT" in
    epilog_slurmd)
        {python} -I -m hpcmem.ingest.epilog --spool {spool} ;;
esac
exit 0
"""


def mem_mb(text: str) -> float:
    """sbatch's --mem value in MB ('512M', '1G', '600' = MB)."""
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip().upper()).groups()
    return float(number) * MB[unit or "M"]


def sbatch_actions(item: dict[str, Any], option: str = "--mem") -> list[dict[str, Any]]:
    return [a for a in item.get("actions") or [] if a.get("type") == "sbatch" and a.get("option") == option]


@dataclass
class Site:
    lab: SlurmLab
    venv: Path
    base: Path
    config: Path
    install_timings: dict[str, float]
    # what one test leaves for the next: the lessons taught, the jobs run
    state: dict[str, Any] = field(default_factory=dict)
    steps_run: set[str] = field(default_factory=set)  # docs/agents.md's steps this module ran

    def env(self, user: str) -> dict[str, str]:
        """The user's environment: hpcmem on PATH, their own store, the site config."""
        return {"PATH": f"{self.venv / 'bin'}:{SYSTEM_PATH}", "HPCMEM_HOME": str(self.base / f"home-{user}"),
                "HPCMEM_SITE_CONFIG": str(self.config), "MODULEPATH": str(self.lab.module_path)}

    def workdir(self, user: str) -> Path:
        return self.lab.workdir(user)

    def run(self, user: str, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.lab.run(argv, user=user, cwd=self.workdir(user), env=self.env(user), timeout=timeout)

    def step(self, user: str, name: str, **values: str) -> subprocess.CompletedProcess[str]:
        """Shell step ``name`` of docs/agents.md, as ``user`` in their work dir."""
        argv = docs.command(name, **values)
        self.steps_run.add(name)
        return self.run(user, argv)

    def tool_call(self, name: str, **values: str) -> tuple[str, dict[str, Any]]:
        """MCP step ``name`` of docs/agents.md: (tool, arguments)."""
        call = docs.tool_call(name, **values)
        self.steps_run.add(name)
        return call

    def stage(self, user: str, script: str, name: str) -> Path:
        """Write a job script into the user's work dir, owned by them."""
        path = self.workdir(user) / name
        path.write_text(script)
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        return path

    def submit(self, user: str, name: str, *args: str) -> int:
        """`sbatch [ARGS] NAME` as the user (the first submission of a script)."""
        return self.lab.submit(self.workdir(user) / name, user=user, args=list(args))

    def resubmit(self, user: str, name: str, option: str, value: str) -> int:
        done = self.step(user, "resubmit", OPTION=option, VALUE=value, job_sh=name)
        found = re.search(r"Submitted batch job (\d+)", done.stdout)
        assert done.returncode == 0 and found, (done.stdout, done.stderr)
        return int(found.group(1))


def _json(done: subprocess.CompletedProcess[str], *codes: int) -> dict[str, Any]:
    assert done.returncode in codes, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def site(slurm_lab: SlurmLab, tmp_path_factory):
    """The site: the users' install, a lab with alice, bob and their group, the hpcmem Epilog,
    the site config, the lab's store, and each user's snapshot of what the cluster offers."""
    venv, install_timings = user_venv()
    hooks = tmp_path_factory.mktemp("agent-loop-hooks")
    slurm_lab.down()  # one lab per node: the session's comes back afterwards
    lab = SlurmLab(cgroup=CGROUP, epilog=hooks / "hpcmem-epilog.sh", prolog_epilog_timeout=30,
                   extra_users=(SECOND,), lab_group=LAB_GROUP)
    base = lab.root / "agent-loop"
    spool = base / "spool"
    (hooks / "hpcmem-epilog.sh").write_text(EPILOG.format(python=venv / "bin" / "python", spool=spool))
    try:
        lab.up()
        if lab.cgroup_mode != "v1":  # without it slurmd polls memory, too late for these jobs
            (pytest.fail if REQUIRE_SLURM else pytest.skip)("the agent loop needs cgroup v1 memory limits")
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(mode=0o755)
        spool.mkdir(mode=0o711)  # root:root 0711 without an ingest group (docs/site-epilog.md)
        spool.chmod(0o711)
        lab_dir = base / "labs" / LAB
        lab_dir.parent.mkdir(mode=0o755)
        # docs/deployment.md: the lab's directory belongs to its lead and group, setgid 2770
        subprocess.run(["install", "-d", "-o", FIRST, "-g", LAB_GROUP, "-m", "2770", str(lab_dir)], check=True)
        config = base / "config.toml"
        config.write_text(f'[cluster]\nname = "hpcmem"\n\n[spool]\ndir = "{spool}"\n\n'
                          f'[stores.labs.{LAB}]\nurl = "{lab_dir / (LAB + ".db")}"\n')
        config.chmod(0o644)
        for user in (FIRST, SECOND):  # each user's own hpcmem home (HPCMEM_HOME), 0700
            home = base / f"home-{user}"
            home.mkdir(mode=0o700)
            entry = pwd.getpwnam(user)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        result = Site(lab, venv, base, config, install_timings)
        # the lead creates the lab's store (docs/deployment.md)
        made = result.run(FIRST, ["hpcmem", "db", "upgrade", "--scope", f"lab:{LAB}"])
        assert made.returncode == 0, made.stderr
        for user in (FIRST, SECOND):  # each user, once: what the cluster offers them
            taken = result.step(user, "snapshot")
            assert taken.returncode == 0, taken.stderr
        yield result
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
        slurm_lab.up()


def test_the_users_run_an_install_of_their_own_not_roots(site: Site):
    for user in (FIRST, SECOND):
        done = site.run(user, ["hpcmem", "model", "status", "--json"])
        status = _json(done, 0)
        assert status["encoder"] == "onnx", status  # new errors are encoded without torch
        assert status["onnx_path"].startswith(str(site.venv))
        who = site.run(user, ["id", "-un"])
        assert who.stdout.strip() == user and pwd.getpwnam(user).pw_uid != 0


def test_first_user_fails_recalls_follows_the_advice_until_it_works_and_teaches(site: Site):
    """alice, CLI: prep.sh at 100M runs out of memory; the advice, followed, gets it to complete."""
    site.stage(FIRST, (JOBS / "prep.sh").read_text(), "prep.sh")
    job = site.submit(FIRST, "prep.sh")
    assert site.lab.wait(job) == "OUT_OF_MEMORY"
    failed, asked = [job], ["100M"]  # the script's own #SBATCH --mem
    for attempt in range(4):
        doc = _json(site.step(FIRST, "recall", JOBID=str(job), job_sh="prep.sh"), 0, 1)
        assert doc["query"]["category"] == "host_oom" and doc["query"]["job_id"] == str(job)
        assert doc["abstained"] is True and not [m for m in doc["matches"] if m["band"] == "match"], doc["matches"]
        (action,) = sbatch_actions(doc["advice"][0])
        if attempt == 0:  # nothing known: the advice starts from the job's request
            assert action["from"] == "100M", doc["advice"]
        assert mem_mb(action["to"]) > max(mem_mb(a) for a in asked), (asked, doc["advice"])
        job = site.resubmit(FIRST, "prep.sh", action["option"], action["to"])
        asked.append(action["to"])
        state = site.lab.wait(job)
        if state == "COMPLETED":
            break
        assert state == "OUT_OF_MEMORY"
        failed.append(job)
    else:
        pytest.fail(f"prep.sh still runs out of memory after following the advice: {asked}")
    assert "prepared" in site.lab.job_output(job)

    # the resolved step: no recalled lesson fitted, so record one from the first failure
    recorded = _json(site.step(
        FIRST, "record", FAILED_JOBID=str(failed[0]), job_sh="prep.sh", ACTION=f"--mem={asked[-1]}",
        CAUSE="prep.sh holds about 400 MB at its peak", FIX=f"submit prep.sh with --mem={asked[-1]}"), 0)
    assert recorded["category"] == "host_oom"
    proposed = site.step(FIRST, "propose", ID=recorded["lesson_id"][:8], LAB=LAB)
    assert proposed.returncode == 0, proposed.stderr
    lab_copy = re.search(r"proposed lesson ([0-9a-f-]{36})", proposed.stdout)
    assert lab_copy, proposed.stdout
    # later, accounting pairs the failures with the run that completed: that confirms her
    # lesson, it does not write a second one
    site.lab.wait_accounted([*failed, job])
    learned = _json(site.step(FIRST, "learn"), 0)["learned"]
    assert learned["lessons_created"] == 0 and recorded["lesson_id"] in learned["lesson_ids"], learned
    listed = _json(site.run(FIRST, ["hpcmem", "lessons", "list", "--scope", "user", "--json"]), 0)
    assert [l["lesson_id"] for l in listed] == [recorded["lesson_id"]], listed
    # the lesson now comes back for alice's own failure, as a match
    again = _json(site.step(FIRST, "recall", JOBID=str(failed[0]), job_sh="prep.sh"), 0)
    top = again["matches"][0]
    assert top["lesson_id"] in (recorded["lesson_id"], lab_copy.group(1)) and top["band"] == "match", top
    site.state.update(prep_fix=asked[-1], prep_lab_lesson=lab_copy.group(1))


def test_second_user_gets_the_fitting_lesson_first_and_never_a_smaller_request_over_mcp(site: Site):
    """bob, MCP: his prep.sh gets the lab's lesson as a match; his train.sh (768M) gets it as
    related at most, and advice above 768M; following it, train.sh completes and he records."""
    if "prep_lab_lesson" not in site.state:
        pytest.fail("needs the lesson the first user taught (the test before this one)")
    lab, lesson, fix = site.lab, site.state["prep_lab_lesson"], site.state["prep_fix"]
    prep = site.stage(SECOND, (JOBS / "prep.sh").read_text(), "prep.sh").read_text()
    train = site.stage(SECOND, (JOBS / "train.sh").read_text(), "train.sh").read_text()
    params = StdioServerParameters(command="runuser", args=["-u", SECOND, "--", "hpcmem", "mcp"],
                                   env=lab.client_env(site.env(SECOND)), cwd=str(site.workdir(SECOND)))

    async def call(session: ClientSession, step: str, **values: str) -> dict[str, Any]:
        tool, arguments = site.tool_call(step, **values)
        result = await session.call_tool(tool, arguments)
        assert not result.is_error, result.content
        return result.structured_content

    async def failed_job(name: str) -> int:
        job = site.submit(SECOND, name)
        assert await asyncio.to_thread(lab.wait, job) == "OUT_OF_MEMORY"
        return job

    async def body(session: ClientSession) -> None:
        # the same script, the same request: the lab's lesson first, applied
        job = await failed_job("prep.sh")
        doc = await call(session, "mcp-recall", JOBID=str(job), SCRIPT=prep)
        top = doc["matches"][0]
        assert (top["lesson_id"], top["band"], top["store"]) == (lesson, "match", LAB), doc["matches"]
        assert doc["abstained"] is False
        (action,) = sbatch_actions(top)
        assert action["to"] == fix and mem_mb(action["to"]) > 100
        done = site.resubmit(SECOND, "prep.sh", action["option"], action["to"])
        assert await asyncio.to_thread(lab.wait, done) == "COMPLETED"
        fed = await call(session, "mcp-feedback", ID=lesson[:8], JOBID=str(done))
        assert fed["lesson_id"] == lesson and fed["confirmations"] == 1

        # another script that already asks more: the lesson is related at most, nothing offers less
        job = await failed_job("train.sh")
        doc = await call(session, "mcp-recall", JOBID=str(job), SCRIPT=train)
        assert doc["abstained"] is True, doc["matches"]
        for m in doc["matches"]:
            assert m["band"] != "match", m
        theirs = [m for m in doc["matches"] if m["lesson_id"] == lesson]
        assert theirs and theirs[0]["band"] == "related", doc["matches"]
        assert "the job already asked --mem=768M; the fix asks 512M" in theirs[0]["inapplicable"], theirs
        # what may be followed asks more than the request that failed, and no more than the node
        # has (RealMemory=2000): the advice, as no lesson matches
        offered = [a for item in doc["advice"] for a in sbatch_actions(item)]
        assert offered and all(768 < mem_mb(a["to"]) <= 2000 for a in offered), doc["advice"]
        action = offered[0]
        done = site.resubmit(SECOND, "train.sh", action["option"], action["to"])
        assert await asyncio.to_thread(lab.wait, done) == "COMPLETED"
        recorded = await call(session, "mcp-record", FAILED_JOBID=str(job), SCRIPT=train,
                              ACTION=f"--mem={action['to']}", CAUSE="train.sh holds about 1200 MB at its peak",
                              FIX=f"submit train.sh with --mem={action['to']}")
        assert recorded["lesson_id"] and recorded["category"] == "host_oom"
        # his own lesson now comes first for train.sh; prep.sh's still never for it
        doc = await call(session, "mcp-recall", JOBID=str(job), SCRIPT=train)
        top = doc["matches"][0]
        assert (top["lesson_id"], top["band"]) == (recorded["lesson_id"], "match"), doc["matches"]
        assert all(m["band"] != "match" for m in doc["matches"] if m["lesson_id"] == lesson)

    async def main() -> None:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await body(session)

    asyncio.run(main())
    # bob's own store belongs to bob, in the home hpcmem was given
    store = site.base / f"home-{SECOND}" / "data" / "user.db"
    assert store.stat().st_uid == pwd.getpwnam(SECOND).pw_uid


def test_a_module_lesson_fits_its_failure_and_not_another_missing_module(site: Site):
    """alice, CLI: gcc/14.2.0 is unknown; the advice names a version that exists, and loading
    it fixes the job. The lesson she records is applied when that failure comes back, and
    confirmed; cuda/13.0, another missing module, gets it as related at most."""
    failing = (JOBS / "build.sh").read_text()
    site.stage(FIRST, failing, "build.sh")
    job = site.submit(FIRST, "build.sh")
    assert site.lab.wait(job) == "FAILED"
    doc = _json(site.step(FIRST, "recall", JOBID=str(job), job_sh="build.sh"), 1)
    assert doc["query"]["category"] == "unknown_module", doc["query"]
    (action,) = [a for a in doc["advice"][0]["actions"] if a["type"] == "module"]
    assert (action["op"], action["name"]) == ("load", "gcc/13.1.0"), doc["advice"]  # the tree's default
    # the fix is a change to the script's module line; the failed script is kept for the lesson
    site.stage(FIRST, failing, "build.failed.sh")
    fixed = failing.replace("gcc/14.2.0", action["name"])
    site.stage(FIRST, fixed, "build.sh")
    done = site.submit(FIRST, "build.sh")
    assert site.lab.wait(done) == "COMPLETED"
    recorded = _json(site.step(
        FIRST, "record", FAILED_JOBID=str(job), job_sh="build.failed.sh", ACTION=f"module load {action['name']}",
        CAUSE="gcc 14.2.0 is not installed here", FIX=f"load {action['name']}, a version the module tree has"), 0)

    # the same failure again (an old copy of the script): the lesson is applied, then confirmed
    site.stage(FIRST, failing, "build.sh")
    again = site.submit(FIRST, "build.sh")
    assert site.lab.wait(again) == "FAILED"
    doc = _json(site.step(FIRST, "recall", JOBID=str(again), job_sh="build.sh"), 0)
    top = doc["matches"][0]
    assert (top["lesson_id"], top["band"]) == (recorded["lesson_id"], "match"), doc["matches"]
    (action,) = top["actions"]
    site.stage(FIRST, failing.replace("gcc/14.2.0", action["name"]), "build.sh")
    done = site.submit(FIRST, "build.sh")
    assert site.lab.wait(done) == "COMPLETED"
    fed = site.step(FIRST, "feedback", ID=top["lesson_id"][:8], JOBID=str(done))
    assert fed.returncode == 0 and fed.stdout.startswith(f"lesson {recorded['lesson_id'][:8]}: confidence "), fed

    # another module is missing: the gcc lesson is no match for it
    site.stage(FIRST, failing.replace("gcc/14.2.0", "cuda/13.0"), "build.sh")
    other = site.submit(FIRST, "build.sh")
    assert site.lab.wait(other) == "FAILED"
    doc = _json(site.step(FIRST, "recall", JOBID=str(other), job_sh="build.sh"), 1)  # exit 1: no lesson matches
    assert doc["query"]["template"] == 'unknown module(s): "cuda/13.0"', doc["query"]
    assert all(m["band"] != "match" for m in doc["matches"]), doc["matches"]
    theirs = [m for m in doc["matches"] if m["lesson_id"] == recorded["lesson_id"]]
    assert not theirs or {"query": "cuda/13.0", "lesson": "gcc/14.2.0", "kind": "name", "matters": True} in \
        theirs[0]["differs"], theirs
    assert [a["name"] for a in doc["advice"][0]["actions"]] == ["cuda/12.4"], doc["advice"]


@pytest.mark.parametrize("through", ["cli", "mcp"])
def test_a_job_pending_over_the_partitions_max_time_is_explained(site: Site, through: str):
    user = FIRST if through == "cli" else SECOND
    site.stage(user, "#!/bin/bash\n#SBATCH --output=%x-%j.out\nsleep 1\necho slept\n", "wait.sh")
    job = site.submit(user, "wait.sh", "-p", "debug", "--time=10")  # debug's MaxTime is 2 minutes
    try:
        deadline = time.monotonic() + 30
        while site.lab.job_info(job).get("Reason") != "PartitionTimeLimit" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert site.lab.job_info(job).get("JobState") == "PENDING"
        if through == "cli":
            doc = _json(site.step(user, "pending", JOBID=str(job)), 1)
        else:
            doc = _mcp_once(site, user, "mcp-pending", JOBID=str(job))
        assert doc["pending"]["reason"] == "PartitionTimeLimit" and doc["pending"]["job_id"] == str(job)
        first = doc["advice"][0]
        assert "debug allows at most 00:02:00" in first["cause"], first
        # the advice's own command, run as the user, lets the job start
        command = re.search(r"`(scontrol update JobId=\d+ TimeLimit=[\d:]+)`", first["fix"])
        assert command, first["fix"]
        updated = site.run(user, command.group(1).split())
        assert updated.returncode == 0, updated.stderr
        assert site.lab.wait(job) == "COMPLETED"
    finally:
        site.lab.run(["scancel", str(job)])


@pytest.mark.parametrize("through", ["cli", "mcp"])
def test_a_refused_submission_is_checked_before_and_explained_after(site: Site, through: str):
    """The guide's check before submitting predicts sbatch's refusal; after it, recall with the
    script names the broken limit, and the accepted value gets the job through (issue 27)."""
    user = FIRST if through == "cli" else SECOND
    script = "#!/bin/bash\n#SBATCH --mem=4000M\n#SBATCH --output=%x-%j.out\nsleep 1\necho done\n"  # the node: 2000M
    site.stage(user, script, "big.sh")
    if through == "cli":
        checked = _json(site.step(user, "check", job_sh="big.sh"), 1)
    else:
        checked = _mcp_once(site, user, "mcp-check", SCRIPT=script)
    assert checked["fits"] is False and checked["user"] == user, checked
    assert [(p["kind"], p["allowed"]) for p in checked["problems"]] == [("memory_per_node", "2000M")], checked
    assert checked["snapshot"]["site_limits"] is True  # step 0's --live snapshot has the nodes

    with pytest.raises(SubmissionRejected) as refused:
        site.submit(user, "big.sh")
    error = refused.value.stderr
    assert "Memory specification can not be satisfied" in error, error
    if through == "cli":
        doc = _json(site.step(user, "refused", job_sh="big.sh", ERROR=error), 1)
    else:
        doc = _mcp_once(site, user, "mcp-refused", ERROR=error, SCRIPT=script)
    item = next(a for a in doc["advice"] if a.get("check"))
    assert item["check"]["kind"] == "memory_per_node" and "2000M" in item["cause"], item
    assert item["snapshot"]["age_s"] is not None and item["snapshot"]["store"] == "user"
    (action,) = sbatch_actions(item)
    job = site.resubmit(user, "big.sh", action["option"], action["to"])
    assert site.lab.wait(job) == "COMPLETED"


def _mcp_once(site: Site, user: str, step: str, **values: str) -> dict[str, Any]:
    params = StdioServerParameters(command="runuser", args=["-u", user, "--", "hpcmem", "mcp"],
                                   env=site.lab.client_env(site.env(user)), cwd=str(site.workdir(user)))
    tool, arguments = site.tool_call(step, **values)

    async def main() -> dict[str, Any]:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(tool, arguments)
                assert not result.is_error, result.content
                return result.structured_content

    return asyncio.run(main())


def test_a_failure_the_epilog_just_spooled_can_be_recorded_at_once(site: Site):
    """The resolved step without a recall before it (the agent knew the fix): `record --job`
    stores the user's pending epilog events first, as recall and the MCP tools do."""
    site.stage(FIRST, "#!/bin/bash\n#SBATCH --output=%x-%j.out\npython3 -c \"open('input.csv')\"\n", "ingest.sh")
    job = site.submit(FIRST, "ingest.sh")
    assert site.lab.wait(job) == "FAILED"
    recorded = _json(site.step(FIRST, "record", FAILED_JOBID=str(job), job_sh="ingest.sh",
                               ACTION="run: cp /srv/data/input.csv .",
                               CAUSE="ingest.sh reads input.csv from its directory",
                               FIX="copy input.csv into the job's directory before submitting ingest.sh"), 0)
    assert recorded["provenance"]["evidence"][0]["job_id"] == str(job)
    assert "input.csv" in recorded["excerpt"], recorded["excerpt"]


def test_every_step_of_the_guide_ran(site: Site, request: pytest.FixtureRequest):
    """docs/agents.md has no step this module did not run (it runs last)."""
    if request.config.getoption("keyword"):
        pytest.skip("only part of the module was selected (-k)")
    missing = set(docs.steps()) - site.steps_run
    assert not missing, f"steps of docs/agents.md no test ran: {sorted(missing)}"
