"""Observed jobs and their failures, as the ingesters hand them over.

- ``write``   write job records, occurrences and their signatures in batches, idempotently
              (``Recorder``; every reader - sacct, job logs, epilog spool - goes through it);
- ``context`` a failed job's context (request, usage, submit line, environment): the one
              definition that advice and, with issue 26, the scorer read;
- ``trends``  what those observations add up to: the lab lead's dashboard figures.

May import ``store``, ``signatures``, ``safety`` and the top of ``kb``.
"""
