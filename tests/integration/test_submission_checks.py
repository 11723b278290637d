"""Submission rejections on a real Slurm, predicted by `hpcmem check` and explained by recall
(issue 27, item 5).

The lab is ``SlurmLab(submission_limits=True)``: partitions ``main`` (default) and ``debug``
(MaxTime 2 min, DefMemPerCPU 600M, MaxMemPerNode 1000M) on node ``localhost`` (2 CPUs,
RealMemory 2000, ``gpu:2``), partition ``bigmem`` of a 16000M node that exists in the
configuration only (State=FUTURE), QOS ``short`` (MaxWall 1 min), account ``teaching`` (alice on
``main`` only), EnforcePartLimits=ALL. For each of the issue's seven rejection messages, and each
cause of one message that the site can produce, a case below says what alice asks, what sbatch
answers and which broken limit (``kind``, ``allowed``) explains it:

- a real ``sbatch`` refuses it with that message, verbatim as kept in
  data/samples/harness/rejections/ (``--record`` below rewrites them);
- ``hpcmem check``, run by alice before submitting, exits 1 and names the limit;
- ``hpcmem recall "<sbatch's stderr>"`` with the request gives advice naming the limit;
- the fitting request (a smaller value, another account or partition) passes ``check`` and
  sbatch accepts it.

hpcmem runs as alice from a users' install (user_install.py), with her own store holding a
snapshot taken by ``hpcmem env snapshot --live``. The module's lab replaces the session's for
its duration (they share root, ports and database) and the session's comes back after it.

    python -m tests.integration.test_submission_checks --record data/samples/harness/rejections
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import CGROUP
from tests.integration.slurm_lab import SlurmLab, SubmissionRejected

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples" / "harness" / "rejections"
LMOD_DIR = "/usr/share/lmod/lmod/libexec"  # Debian's; `env snapshot --live` runs its spider


@dataclass(frozen=True)
class Case:
    name: str  # also the sample's and the job script's file name
    message: str  # what sbatch must say (one of the seven)
    kind: str  # the problem that explains it, in check's and recall's JSON
    allowed: str  # the broken limit, as check's `allowed` gives it
    args: str = ""  # sbatch options on the command line
    directives: tuple[str, ...] = ()  # #SBATCH lines of the script
    fixes: tuple[str, ...] = ()  # fitting requests: sbatch options added to the directives
    accepted_mentions: str | None = None  # a word check's `accepted` must contain (another partition)

    def script(self) -> str:
        return "\n".join(["#!/bin/bash", *(f"#SBATCH {d}" for d in self.directives), "sleep 1", ""])


M1 = "Requested node configuration is not available"
M2 = "Memory specification can not be satisfied"
M3 = "Invalid account or account/partition combination specified"
M4 = "Requested time limit is invalid (missing or exceeds some limit)"
M5 = "QOSMaxWallDurationPerJobLimit"
M6 = "Invalid generic resource (gres) specification"
M7 = "Requested partition configuration not available now"

CASES = (
    # 1: the node has 2 untyped GPUs, 2 CPUs, 2000M
    Case("1-node-config-gpu-count", M1, "gres_count", "2", "--gres=gpu:3", fixes=("--gres=gpu:2",)),
    Case("1-node-config-gpu-type", M1, "gres_type", "gpu", "--gres=gpu:tesla:1", fixes=("--gres=gpu:1",)),
    Case("1-node-config-mem-per-cpu", M1, "memory_per_node", "2000M", "--mem-per-cpu=1500M -c 2",
         fixes=("--mem-per-cpu=1000M -c 2",)),
    Case("1-node-config-mincpus", M1, "cpus_per_node", "2", "--mincpus=4", fixes=("--mincpus=2",)),
    # 2: more memory than any node of main has; bigmem's node has it
    Case("2-memory-per-node", M2, "memory_per_node", "2000M", "--mem=4000M",
         fixes=("--mem=2000M", "-p bigmem --mem=4000M"), accepted_mentions="bigmem"),
    # 3: teaching may be used on main only; physics is nobody's account
    Case("3-account-partition", M3, "account_partition", "research", "-A teaching -p debug",
         fixes=("-A teaching -p main", "-A research -p debug")),
    Case("3-account-unknown", M3, "account_unknown", "research, teaching", "-A physics", fixes=("-A research",)),
    # 4: debug's MaxTime is 2 minutes
    Case("4-partition-time-limit", M4, "partition_max_time", "00:02:00", "-p debug --time=10",
         fixes=("-p debug --time=2", "-p main --time=10")),
    # 5: QOS short's MaxWall is 1 minute (DenyOnLimit); the request is in the script
    Case("5-qos-max-wall", M5, "qos_max_wall", "00:01:00", directives=("--qos=short", "--time=5"),
         fixes=("--time=1", "--qos=normal")),
    # 6: no node has an fpga
    Case("6-gres-unknown", M6, "gres_unknown", "gpu", "--gres=fpga:1", fixes=("--gres=gpu:1",)),
    # 7: no --mem, so debug's DefMemPerCPU gives 600M per CPU; 2 CPUs (or the whole node) exceed
    # its MaxMemPerNode 1000M, which only the scheduler's partition check sees (job_limits_check).
    # `-n 2` fits: that check counts cpus-per-task x ntasks-per-node (1 here), not all tasks.
    Case("7-partition-mem-default", M7, "memory_per_node", "1000M", "-p debug -c 2",
         fixes=("-p debug -c 2 --mem=1000M", "-p main -c 2", "-p debug -n 2")),
    Case("7-partition-mem-exclusive", M7, "memory_per_node", "1000M", directives=("-p debug", "--exclusive"),
         fixes=("--mem=1000M",)),
)  # fmt: skip

FITS = [(case, fix) for case in CASES for fix in case.fixes]


# --------------------------------------------------------------------------- the lab and alice's hpcmem


@pytest.fixture(scope="module")
def site_lab(slurm_lab: SlurmLab):
    """The submission-limits lab, in place of the session's for this module."""
    slurm_lab.down()
    lab = SlurmLab(cgroup=CGROUP, submission_limits=True)
    try:
        lab.up()
        yield lab
    finally:
        lab.down()
        slurm_lab.up()


@pytest.fixture(scope="module")
def hpcmem_bin() -> str:
    from tests.integration.user_install import user_venv

    venv, _ = user_venv()
    return str(venv / "bin" / "hpcmem")


class Alice:
    """hpcmem as the lab user, with her own store (HPCMEM_HOME in her work dir)."""

    def __init__(self, lab: SlurmLab, hpcmem: str):
        self.lab, self.hpcmem = lab, hpcmem
        self.workdir = lab.workdir()
        self.env = {"HPCMEM_HOME": str(self.workdir / ".hpcmem"), "LMOD_DIR": LMOD_DIR,
                    "MODULEPATH": str(lab.module_path)}  # fmt: skip

    def hpcmem_run(self, *args: str):
        return self.lab.run([self.hpcmem, *args], user=self.lab.user, cwd=self.workdir, env=self.env,
                            timeout=180)  # fmt: skip

    def hpcmem_json(self, *args: str) -> tuple[int, dict]:
        done = self.hpcmem_run(*args, "--json")
        assert done.returncode in (0, 1), f"hpcmem {' '.join(args)} exited {done.returncode}: {done.stderr}"
        return done.returncode, json.loads(done.stdout)

    def place(self, case: Case) -> Path:
        """The case's job script in alice's work dir, owned by her (what she checks and submits)."""
        path = self.workdir / f"{case.name}.sh"
        path.write_text(case.script())
        entry = pwd.getpwnam(self.lab.user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        return path

    def request(self, case: Case, args: str, *, script_option: str | None) -> list[str]:
        """How check (``script_option`` None: the script is its argument) and recall
        (``--script``) are told the request: the script when it has #SBATCH lines, and the
        command line's options."""
        options: list[str] = []
        if case.directives:
            script = str(self.place(case))
            options += [script_option, script] if script_option else [script]
        if args:
            options += ["--sbatch-args", args]
        return options


@pytest.fixture(scope="module")
def alice(site_lab: SlurmLab, hpcmem_bin: str) -> Alice:
    """Alice, with a snapshot of the live site (partitions, nodes, QOS, associations) in her store."""
    who = Alice(site_lab, hpcmem_bin)
    code, doc = who.hpcmem_json("env", "snapshot", "--live")
    assert code == 0 and doc["snapshot"]["partitions"] == 3, doc
    return who


def submit(lab: SlurmLab, case: Case, args: str) -> int:
    """sbatch the case's script with ``args`` as alice; the job id, or SubmissionRejected."""
    script = lab.workdir() / f"{case.name}.sh"
    script.write_text(case.script())
    return lab.submit(script, args=shlex.split(args))


_rejections: dict[str, SubmissionRejected] = {}


def rejection(lab: SlurmLab, case: Case) -> SubmissionRejected:
    """sbatch's refusal of the case (submitted once per module)."""
    if case.name not in _rejections:
        try:
            job = submit(lab, case, case.args)
        except SubmissionRejected as exc:
            _rejections[case.name] = exc
        else:
            lab.run(["scancel", str(job)])
            pytest.fail(f"sbatch accepted {case.name} as job {job}")
    return _rejections[case.name]


def sample(case: Case) -> dict:
    return json.loads((SAMPLES / f"{case.name}.json").read_text())


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_check_predicts_it_before_submission(alice, case):
    code, doc = alice.hpcmem_json("check", *alice.request(case, case.args, script_option=None))
    assert code == 1 and doc["fits"] is False, doc
    found = [p for p in doc["problems"] if p["kind"] == case.kind]
    assert found, f"no {case.kind} among {doc['problems']}"
    assert found[0]["allowed"] == case.allowed, found[0]
    if case.accepted_mentions:
        assert any(case.accepted_mentions in a for a in found[0]["accepted"]), found[0]
    assert doc["user"] == alice.lab.user and doc["snapshot"]["id"] is not None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_sbatch_refuses_with_the_message(site_lab, case):
    refused = rejection(site_lab, case)
    assert refused.returncode == 1
    assert case.message in refused.stderr
    assert refused.stdout == ""  # no job id
    kept = sample(case)
    assert (kept["stderr"], kept["exit_code"]) == (refused.stderr, refused.returncode), (
        "sbatch no longer says what data/samples/harness/rejections keeps: re-record them")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_recall_names_the_broken_limit(site_lab, alice, case):
    stderr = rejection(site_lab, case).stderr
    options = alice.request(case, case.args, script_option="--script")
    code, doc = alice.hpcmem_json("recall", stderr, "--no-model", *options)
    items = [a for a in doc.get("advice", []) if (a.get("check") or {}).get("kind") == case.kind]
    assert items, f"no advice with check.kind {case.kind}: {doc.get('advice')}"
    item = items[0]
    assert item["check"]["allowed"] == case.allowed, item
    assert case.allowed in f"{item['cause']} {item['fix']}", item  # said, not only in the data


@pytest.mark.parametrize(("case", "fix"), FITS, ids=lambda v: v if isinstance(v, str) else v.name)
def test_the_fitting_request_passes_check_and_sbatch(alice, case, fix):
    code, doc = alice.hpcmem_json("check", *alice.request(case, fix, script_option=None))
    assert code == 0 and doc["fits"] is True and doc["problems"] == [], doc
    job = submit(alice.lab, case, fix)  # raises SubmissionRejected if sbatch refuses it
    alice.lab.run(["scancel", str(job)])


def test_check_live_agrees_with_the_snapshot(alice):
    case = CASES[0]
    code, doc = alice.hpcmem_json("check", "--live", "--sbatch-args", case.args)
    assert code == 1 and [p["kind"] for p in doc["problems"]] == [case.kind], doc
    assert doc["snapshot"]["id"] is None  # asked Slurm, not the store


# --------------------------------------------------------------------------- recording the samples


def record(out: Path) -> None:
    """Bring the lab up, submit every case as alice, and write sbatch's real answers to ``out``."""
    import datetime as dt

    out.mkdir(parents=True, exist_ok=True)
    with SlurmLab(submission_limits=True) as lab:
        version = lab.check(["sbatch", "--version"]).strip()
        for case in CASES:
            script = lab.workdir() / f"{case.name}.sh"
            script.write_text(case.script())
            try:
                job = lab.submit(script, args=shlex.split(case.args))
            except SubmissionRejected as exc:
                refused = exc
            else:
                lab.run(["scancel", str(job)])
                raise SystemExit(f"{case.name}: sbatch accepted it (job {job})")
            doc = {
                "case": case.name, "message": case.message,
                "explained_by": {"kind": case.kind, "allowed": case.allowed},  # what the tests expect
                "user": lab.user, "script": case.script(), "sbatch_args": case.args,
                "argv": refused.argv, "exit_code": refused.returncode, "stdout": refused.stdout,
                "stderr": refused.stderr, "fits_instead": list(case.fixes),
                "recorded": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
                "slurm": version, "harness": "SlurmLab(submission_limits=True)",
            }  # fmt: skip
            (out / f"{case.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
            print(f"{case.name}: {refused.stderr.strip().splitlines()[-1]}")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--record"] or len(sys.argv) != 3:
        raise SystemExit("usage: python -m tests.integration.test_submission_checks --record DIR")
    record(Path(sys.argv[2]))
