"""Trust labels for a lesson's provenance, shown next to every recalled lesson.

Kept apart from the safety rules so the recall path can label lessons without
compiling the lint's regexes.
"""

from __future__ import annotations

from hpcmem.kb.errors import InputError

TRUST_LEVELS: tuple[str, ...] = ("untrusted", "low", "medium", "high")

SOURCE_TRUST: dict[str, str] = {
    "curated": "high",
    "human": "medium",
    "rule": "medium",
    "inferred": "low",
    "agent": "low",
    "log": "untrusted",
}


def trust_level(source: str) -> str:
    """Trust label for a lesson's provenance ``source``, for JSON output.

    Ordering, highest first, and why:

    - ``curated`` -> ``high``: reviewed and promoted by a lab lead, with an audit entry.
    - ``human`` -> ``medium``: written by a person who saw the failure, but not reviewed.
    - ``rule`` -> ``medium``: produced by hpcmem's shipped rules: reviewed code, but generic,
      so it can be wrong for a particular job.
    - ``inferred`` -> ``low``: derived mechanically from a failed job and the resubmission
      that succeeded; backed by evidence, but correlation is not cause.
    - ``agent`` -> ``low``: free text from a coding agent; agents under pressure weaken
      safeguards, and their text may carry injected instructions.
    - ``log`` -> ``untrusted``: text taken from job output, which any program can print.

    Unknown sources fail closed to ``untrusted``. Compare labels with :func:`trust_rank`.
    """
    return SOURCE_TRUST.get(source.strip().lower(), "untrusted")


def trust_rank(label: str) -> int:
    """Position of a trust label in :data:`TRUST_LEVELS` (0 = ``untrusted``, 3 = ``high``).

    Raises :class:`InputError` for a label that is not one of them.
    """
    try:
        return TRUST_LEVELS.index(label)
    except ValueError:
        raise InputError(f"unknown trust label {label!r}; expected one of {', '.join(TRUST_LEVELS)}") from None
