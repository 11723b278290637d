"""Map library errors to one line on stderr and exit status 2; bugs keep their traceback."""

from __future__ import annotations

import os
import sys
import traceback

EXIT_OK, EXIT_NOTHING_FOUND, EXIT_ERROR = 0, 1, 2


def debug_enabled() -> bool:
    from hpcmem.cli._state import STATE

    return STATE.debug or os.environ.get("HPCMEM_DEBUG", "") not in ("", "0", "false")


def report_error(exc: BaseException) -> int:
    """Print ``Error: <message>`` (and a hint) to stderr; return the exit status."""
    if debug_enabled():
        traceback.print_exception(exc, file=sys.stderr)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    sys.stderr.write(f"Error: {message}\n")
    hint = getattr(exc, "hint", None)
    if hint:
        sys.stderr.write(f"Hint: {hint}\n")
    return EXIT_ERROR
