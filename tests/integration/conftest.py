"""Fixtures for the tests that run against a real Slurm cluster (tests marked ``slurm``).

The cluster is opt-in, because bringing it up installs packages and starts daemons as
root: the tests run when ``-m slurm`` is selected or HPCMEM_REQUIRE_SLURM=1 is set
(CI). A machine that cannot host it (not Linux, not root, no apt/dpkg) skips them with
the reason; with HPCMEM_REQUIRE_SLURM=1 that is a failure instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.slurm_lab import SlurmLab, prerequisite_problem, proc_start_time

HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs"
# Prolog, Epilog and EpilogSlurmctld all record their environment with this script.
RECORD_ENV_HOOK = HERE / "hooks" / "record-env.sh"

# Read once at import: the root conftest removes HPCMEM_* variables for every test.
REQUIRE_SLURM = os.environ.get("HPCMEM_REQUIRE_SLURM") == "1"
# "auto" (cgroup v1 when usable), "v1" or "none" (the polling variant)
CGROUP = os.environ.get("HPCMEM_SLURM_CGROUP", "auto")


def _asked_for_slurm(config: pytest.Config) -> bool:
    return REQUIRE_SLURM or "slurm" in (config.getoption("markexpr", "") or "")


@pytest.fixture(scope="session")
def slurm_lab(request: pytest.FixtureRequest):
    """A running single-node cluster, shared by the session and stopped after it."""
    problem = prerequisite_problem()
    if problem is not None:
        if REQUIRE_SLURM:
            pytest.fail(f"{problem} (HPCMEM_REQUIRE_SLURM=1 makes the Slurm tests mandatory)")
        pytest.skip(problem)
    if not _asked_for_slurm(request.config):
        pytest.skip(
            "Slurm integration tests are opt-in (they install packages and start daemons):"
            " run `pytest -m slurm tests/integration` or set HPCMEM_REQUIRE_SLURM=1"
        )
    lab = SlurmLab(
        cgroup=CGROUP,
        prolog=RECORD_ENV_HOOK,
        epilog=RECORD_ENV_HOOK,
        epilog_slurmctld=RECORD_ENV_HOOK,
        prolog_epilog_timeout=30,
    )
    lab.up()
    started = {name: (pid, proc_start_time(pid)) for name, pid in lab.daemon_pids().items()}
    yield lab
    lab.down()
    survivors = [
        f"{name} (pid {pid})"
        for name, (pid, start) in started.items()
        if proc_start_time(pid) == start
    ]
    assert not survivors, f"daemons still running after down(): {', '.join(survivors)}"


@pytest.fixture(scope="session")
def job_scripts() -> Path:
    return JOBS
