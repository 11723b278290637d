"""`hpcmem learn` and the learning `ingest sacct` does: incremental after the first run, --full on request."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.helpers import run_hpcmem
from tests.conftest import SAMPLES

RESUB = SAMPLES / "sacct" / "resubmissions"


def test_ingest_learns_then_learn_reads_only_what_is_new(hpcmem_home: Path):
    ingested = run_hpcmem("ingest", "sacct", str(SAMPLES / "sacct" / "lab-week.psv"), "--json")
    assert ingested.returncode == 0, ingested.stderr
    learned = json.loads(ingested.stdout)["learned"]
    assert (learned["mode"], learned["lessons_created"]) == ("full", 6)  # the store's first run

    again = run_hpcmem("learn", "--json")
    data = json.loads(again.stdout)
    assert (again.returncode, data["mode"], data["jobs_read"], data["pairs_found"]) == (0, "incremental", 0, 0)

    more = json.loads(run_hpcmem("ingest", "sacct", str(RESUB / "lab-followups.psv"), "--json").stdout)["learned"]
    assert (more["mode"], more["lessons_created"], more["lessons_confirmed"]) == ("incremental", 5, 1)

    full = run_hpcmem("learn", "--full")
    assert full.returncode == 0
    assert full.stdout.startswith("pairs found: ") and full.stdout.rstrip().endswith("(every job read)")
