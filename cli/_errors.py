"""The exit-code contract, kept in one place.

- 0: found (for ``recall``: a stored lesson matches);
- 1: ran fine, nothing found;
- 2: bad input or an unusable store: one ``Error:`` line (and a ``Hint:``) on stderr;
- 3: anything unexpected: one ``Error: internal error (...)`` line, the traceback only with
  ``--debug``. An agent branching on the exit code must never read a crash as "no lesson".
"""

from __future__ import annotations

import os
import sys
import traceback

EXIT_OK, EXIT_NOTHING_FOUND, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3


def debug_enabled() -> bool:
    from hpcmem.cli._state import STATE

    return STATE.debug or os.environ.get("HPCMEM_DEBUG", "") not in ("", "0", "false")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def report_error(exc: BaseException) -> int:
    """Print ``Error: <message>`` (and a hint) to stderr; return the exit status."""
    if debug_enabled():
        traceback.print_exception(exc, file=sys.stderr)
    # An error may echo what was given (`cannot read --action '...'`): secrets go there too.
    sys.stderr.write(f"Error: {_scrubbed(_first_line(exc))}\n")
    hint = getattr(exc, "hint", None)
    if hint:
        sys.stderr.write(f"Hint: {_scrubbed(hint)}\n")
    return EXIT_ERROR


def _scrubbed(text: str) -> str:
    from hpcmem.kb.safety.normalise import scrub_text

    return scrub_text(text)


def report_internal(exc: BaseException) -> int:
    """A bug or an unforeseen failure: one line naming it, never exit 0 or 1."""
    if debug_enabled():
        traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.write(f"Error: internal error ({type(exc).__name__}: {_scrubbed(_first_line(exc))[:300]}); "
                     "rerun with --debug and report it\n")
    return EXIT_INTERNAL
