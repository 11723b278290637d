"""Parsers for the value formats Slurm prints in sacct output.

Each parser takes the text of one field. An empty field gives its "no value" result
(None, or a tuple of Nones); text it cannot read raises ValueError, so the caller can
report the line. The formats follow what sacct really prints (see data/samples/sacct/README.md):

- durations: ``MM:SS``, ``HH:MM:SS``, ``D-HH:MM:SS``, ``MM:SS.mmm`` (TotalCPU); a bare
  number means minutes, as in ``--time`` and jobcomp's TimeLimit;
- sizes: ``44064K``, ``50M``, ``312.50G``; ReqMem may end in the pre-21.08 ``n``/``c``
  (per node / per CPU) suffix; a bare MaxRSS number is bytes, a bare ReqMem number MB;
- exit codes ``code:signal``; states such as ``CANCELLED by 1234``;
- TRES lists ``billing=1,cpu=1,mem=50M,node=1,gres/gpu:a100=1``;
- times: ISO ``2026-11-30T00:04:21`` in sacct's local time, or epoch seconds when
  SLURM_TIME_FORMAT=%s.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import NamedTuple

UTC = timezone.utc

# Tokens sacct prints where a value is missing.
NULL_TOKENS = frozenset({"", "Unknown", "None", "NONE", "N/A", "(null)", "None assigned"})

# Time limits that are not a number of seconds.
TIMELIMIT_TOKENS = frozenset({"UNLIMITED", "Partition_Limit", "INVALID", "NONE", "N/A"})

_MB_PER_UNIT = {
    "B": 1.0 / (1024 * 1024),
    "K": 1.0 / 1024,
    "M": 1.0,
    "G": 1024.0,
    "T": 1024.0**2,
    "P": 1024.0**3,
    "E": 1024.0**4,
}

_LARGEST_SANE = 1e18  # rejects inf/nan and absurd values without importing math


def parse_duration(text: str) -> float | None:
    """Seconds in a Slurm duration, or None when empty.

    Accepts every form Slurm prints or reads: ``MM:SS``, ``HH:MM:SS``, ``D-HH:MM:SS``,
    ``D-HH``, ``D-HH:MM``, fractional seconds (``06:57.815``) and bare minutes (``90``).
    """
    # Fast path: Elapsed is almost always exactly HH:MM:SS.
    if len(text) == 8 and text[2] == ":" and text[5] == ":" and text[0] != "-":
        return float(int(text[:2]) * 3600 + int(text[3:5]) * 60 + int(text[6:]))
    if not text:
        return None
    days = 0
    dash = text.find("-")
    if dash >= 0:
        days = int(text[:dash])
        pieces = text[dash + 1 :].split(":")
        if len(pieces) > 3:
            raise ValueError(f"not a Slurm duration: {text!r}")
        pieces += ["0"] * (3 - len(pieces))  # D-HH and D-HH:MM
    else:
        pieces = text.split(":")
        if len(pieces) == 1:
            pieces = ["0", pieces[0], "0"]  # bare minutes
        elif len(pieces) == 2:
            pieces.insert(0, "0")  # MM:SS
        elif len(pieces) != 3:
            raise ValueError(f"not a Slurm duration: {text!r}")
    hours, minutes = int(pieces[0]), int(pieces[1])
    seconds = float(pieces[2])
    # int() and float() accept signs; a negative part or a non-finite second is junk.
    if min(days, hours, minutes) < 0 or not 0 <= seconds < 61:
        raise ValueError(f"not a Slurm duration: {text!r}")
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def parse_timelimit(text: str) -> int | None:
    """Seconds in a Timelimit/TimelimitRaw value; None for UNLIMITED, Partition_Limit,
    INVALID or empty (keep the raw text to tell them apart). Bare numbers are minutes."""
    if text in TIMELIMIT_TOKENS or not text:
        return None
    seconds = parse_duration(text)
    return None if seconds is None else int(seconds)


def parse_size_mb(text: str, bare_unit: str = "M") -> float | None:
    """Megabytes (MiB) in a size such as ``44064K``, ``50M`` or ``312.50G``.

    Slurm's units are binary (K = 1024 bytes). ``bare_unit`` is the unit of a number
    without a suffix: MaxRSS prints bytes that way (``0``, small values), ReqMem MB.
    """
    if not text:
        return None
    factor = _MB_PER_UNIT.get(text[-1])
    if factor is None:
        number = float(text)
        factor = _MB_PER_UNIT[bare_unit]
    else:
        number = float(text[:-1])
    if not 0 <= number < _LARGEST_SANE:
        raise ValueError(f"not a Slurm size: {text!r}")
    return number * factor


def parse_req_mem(text: str) -> tuple[float | None, str | None]:
    """(MB, per) for ReqMem. ``per`` is 'node' or 'cpu' for the pre-21.08 ``16000Mn`` /
    ``4000Mc`` forms. Since 21.08 sacct prints the job's total request with no suffix
    (the same value as ``mem=`` in ReqTRES); ``per`` is then None."""
    if not text:
        return None, None
    last = text[-1]
    if last == "n":
        return parse_size_mb(text[:-1]), "node"
    if last == "c":
        return parse_size_mb(text[:-1]), "cpu"
    return parse_size_mb(text), None


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """(exit code, signal) from ``code:signal``; (None, None) when empty."""
    if text == "0:0":
        return 0, 0
    if not text:
        return None, None
    code, sep, signal = text.partition(":")
    if not sep:
        return _non_negative_int(code, text), None
    return _non_negative_int(code, text), _non_negative_int(signal, text)


def parse_state(text: str) -> tuple[str, int | None]:
    """(base state, cancelling uid) from e.g. ``CANCELLED by 1234``.

    The base state is upper-case; an empty field gives 'UNKNOWN'.
    """
    if " " not in text:
        return (text.upper() or "UNKNOWN"), None
    base, _, rest = text.partition(" ")
    base = base.upper()
    if rest.startswith("by "):
        return base, _non_negative_int(rest[3:], text)
    return base, None


def parse_user(text: str) -> tuple[str | None, int | None]:
    """(user name, uid) from ``alice`` or ``alice(1001)`` (jobcomp-backed sacct)."""
    if not text:
        return None, None
    if text.endswith(")"):
        name, sep, uid = text[:-1].partition("(")
        if sep:
            return name or None, _non_negative_int(uid, text)
    return text, None


def parse_tres(text: str) -> dict[str, str]:
    """TRES list as a dict: ``cpu=1,mem=50M,gres/gpu:a100=1`` -> {'cpu': '1', ...}."""
    tres: dict[str, str] = {}
    if not text:
        return tres
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"not a TRES list: {text!r}")
        tres[key] = value
    return tres


def tres_gpus(tres: dict[str, str]) -> tuple[int, str | None]:
    """(GPU count, GPU type) in a TRES dict.

    Slurm lists the total as ``gres/gpu=N`` next to typed entries ``gres/gpu:a100=N``;
    when only typed entries exist their sum is the total.
    """
    typed = [(key[9:], int(value)) for key, value in tres.items() if key.startswith("gres/gpu:")]
    gpu_type = typed[0][0] if typed else None
    total = tres.get("gres/gpu")
    if total is not None:
        return int(total), gpu_type
    return sum(count for _, count in typed), gpu_type


def gres_in_tres(tres: dict[str, str]) -> str | None:
    """The generic resources of a TRES dict without the ``gres/`` prefix, e.g.
    ``gpu=1,gpu:a100=1``; None when there are none."""
    items = [f"{key[5:]}={value}" for key, value in tres.items() if key.startswith("gres/")]
    return ",".join(items) or None


class JobId(NamedTuple):
    """The parts of a sacct JobID such as ``123``, ``123_4.batch`` or ``1853+1.0``."""

    job_id: str  # without the step: '123', '123_4', '123_[1-3]', '1853+1'
    step: str | None  # 'batch', 'extern', 'interactive', '0', ... or None
    base_id: int  # the leading number
    array_task_id: int | None  # 4 in '123_4'
    array_tasks: str | None  # '1-3' in the pending record '123_[1-3]'
    het_offset: int | None  # 1 in '1853+1'


_new_job_id = tuple.__new__
_JOB_ID_RE = re.compile(r"(\d+)(?:_(?:(\d+)|\[([^\]]*)\]))?(?:\+(\d+))?")


def parse_job_id(text: str) -> JobId:
    """Split a JobID (or JobIDRaw) into its parts; ValueError if it is not one."""
    if text.isdecimal():  # a plain job: what the regex's \d+ alone matches
        return _new_job_id(JobId, (text, None, int(text), None, None, None))
    job_part, dot, step = text.partition(".")
    match = _JOB_ID_RE.fullmatch(job_part)
    if match is None or (dot and not step):
        raise ValueError(f"not a Slurm job id: {text!r}")
    base, task, tasks, het = match.groups()
    return JobId(
        job_id=job_part,
        step=step if dot else None,
        base_id=int(base),
        array_task_id=int(task) if task is not None else None,
        array_tasks=tasks,
        het_offset=int(het) if het is not None else None,
    )


class SlurmTimeParser:
    """Turns sacct time stamps into timezone-aware UTC datetimes.

    sacct prints local wall-clock time without a zone. ``tz`` says which zone that is:
    None means this machine's local zone (right for a live sacct run here, and what
    sacct itself used); pass the cluster's zone for dumps made elsewhere. In the hour a
    DST change repeats, the earlier reading is chosen: the text cannot tell them apart.
    Epoch seconds (SLURM_TIME_FORMAT=%s) are read as UTC. 'Unknown', 'None' and empty
    give None.
    """

    def __init__(self, tz: tzinfo | None = None):
        self.tz = tz
        # UTC offset suffix ('+01:00') per 'YYYY-MM-DDTHH': zone rules change only on
        # the hour and a dump has few distinct hours, so this saves a zone lookup per
        # stamp. Appending the offset and letting fromisoformat read it is also several
        # times faster than datetime.replace(tzinfo=...).
        self._suffixes: dict[str, str] = {}

    def __call__(self, text: str) -> datetime | None:
        if text in NULL_TOKENS:
            return None
        if text.isdigit():
            seconds = int(text)
            return datetime.fromtimestamp(seconds, UTC) if seconds else None
        if self.tz is UTC:
            suffix = "+00:00"
        else:
            key = text[:13]
            suffix = self._suffixes.get(key)
            if suffix is None:
                if len(self._suffixes) > 100_000:
                    self._suffixes.clear()
                suffix = self._suffixes[key] = self._offset_suffix(datetime.fromisoformat(text))
        try:
            stamp = datetime.fromisoformat(text + suffix)
        except ValueError:
            stamp = datetime.fromisoformat(text)  # raises for junk
            if stamp.tzinfo is None:
                raise
        return stamp if stamp.tzinfo is UTC else stamp.astimezone(UTC)

    def _offset_suffix(self, naive: datetime) -> str:
        if naive.tzinfo is not None:
            return ""
        if self.tz is None:
            aware = naive.astimezone()  # interprets naive time in the system zone
        else:
            aware = naive.replace(tzinfo=self.tz)
        offset = aware.utcoffset() or timedelta(0)
        seconds = int(offset.total_seconds())
        sign = "-" if seconds < 0 else "+"
        hours, rest = divmod(abs(seconds), 3600)
        minutes, secs = divmod(rest, 60)
        return f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def _non_negative_int(text: str, whole: str) -> int:
    if not text.isdigit():
        raise ValueError(f"not a number in {whole!r}")
    return int(text)


def format_time_limit(seconds: int | None, none: str = "UNLIMITED") -> str:
    """Seconds as scontrol prints a time limit: HH:MM:SS or D-HH:MM:SS."""
    if seconds is None:
        return none
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock
