"""Learning after an ingest (ingest/learning.py): one rule for sacct and spool ingests."""

from __future__ import annotations

import datetime as dt

from hpcmem.ingest.learning import learn_after_ingest
from hpcmem.ingest.sacct_ingest import ingest_sacct

HEADER = "JobID|JobName|User|State|ExitCode|Elapsed|ReqMem|MaxRSS|Submit|Start|End|WorkDir|SubmitLine"
FAILED = ("700|align|bob|OUT_OF_MEMORY|0:125|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|"
          "2026-11-24T08:10:00|/home/bob/a|sbatch --mem=8G align.sh")
FIXED = ("701|align|bob|COMPLETED|0:0|01:00:00|32G||2026-11-24T09:05:00|2026-11-24T09:05:01|2026-11-24T10:05:00|"
         "/home/bob/a|sbatch --mem=32G align.sh")


def test_a_batch_without_failures_still_completes_a_pair(store_factory):
    store = store_factory().open()
    first = ingest_sacct(store, [HEADER, FAILED], cluster="lab", tz=dt.timezone.utc)
    assert learn_after_ingest(store, first)["pairs_found"] == 0  # nothing has fixed it yet
    second = ingest_sacct(store, [HEADER, FIXED], cluster="lab", tz=dt.timezone.utc)
    assert second.failures == 0  # the hour the fix completed saw no failure...
    learned = learn_after_ingest(store, second)
    assert second.learned is learned  # ...and is where the pair is learned
    assert (learned["mode"], learned["lessons_created"]) == ("incremental", 1)


def test_an_ingest_that_wrote_nothing_learns_nothing(store_factory):
    store = store_factory().open()
    empty = ingest_sacct(store, [HEADER], cluster="lab", tz=dt.timezone.utc)
    assert learn_after_ingest(store, empty) is None and empty.learned is None
