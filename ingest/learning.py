"""Learning after an ingest, decided in one place for every reader that writes jobs
(``ingest sacct``, ``ingest spool``).

``kb.lessons.learn`` pairs failed jobs with the resubmissions that fixed them. With its watermark
a run reads only the job rows written since the last one, so it runs after any ingest
that wrote job rows, not only after one that saw a failure: the resubmission that fixes
a failure usually arrives in a later batch than the failure. Whatever an ingest does not
learn (a drain before a recall, ``--no-learn``) the next run picks up.
"""

from __future__ import annotations

from typing import Any


def learn_after_ingest(store, summary: Any) -> dict[str, Any] | None:
    """Learn from what ``summary``'s ingest wrote into ``store``; the result also goes
    into ``summary.learned``. None when the ingest wrote no job and no failure."""
    if not (getattr(summary, "jobs", 0) or getattr(summary, "failures", 0)):
        return None
    from hpcmem.kb.lessons.learn import learn_from_history

    summary.learned = learn_from_history(store).as_dict()
    return summary.learned
