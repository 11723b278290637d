"""Lessons (context / cause / fix) and the evidence for and against them.

- ``write``       the gate every lesson passes into a store: redact, sanitise, lint, write
                  (``record_lesson``);
- ``from_error``  ``hpcmem record``: an error or a stored failure, plus cause and fix;
- ``learn``       lessons learnt from a failed job and the resubmission that completed;
- ``actions``     structured fixes (``{"type": "sbatch", "option": "--mem", ...}``);
- ``evidence``    feedback and confidence; ``aliases`` the variants a lesson learnt;
- ``curation``    propose / review / approve / promote across user, lab and cluster;
- ``portable``    export and import as JSONL.

May import ``jobs``, ``store``, ``signatures``, ``safety`` and the top of ``kb``.
"""
