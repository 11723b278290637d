"""Find the failure excerpt in a Slurm job log without reading all of it.

A job's stdout/stderr file (``slurm-%j.out``, ``%x-%j.err``, or the StdOut/StdErr path
that sacct/scontrol report) can be gigabytes of progress output. What explains the
failure is nearly always the first error near the top (a module that would not load, a
missing library) or the last lines (the final traceback, the slurmstepd verdict). So
:func:`scan_log` reads, through one file descriptor:

1. the head, 64 KiB at a time, until the first error line (plus 16 KiB of context after
   it) or 1 MiB, whichever comes first;
2. the last 256 KiB with one positioned read (``os.pread``).

A file of at most 1.25 MiB is simply read whole. Nothing else is read, so a 50 GB log
costs the same as a 2 MB one.

Each region is cleaned before matching: NUL bytes dropped, ANSI escapes stripped; error
candidates are found with one bytes regex whose alternatives all start with a literal,
so the search stays linear. Only candidate lines are decoded (invalid UTF-8 becomes
U+FFFD), reduced to the final state of carriage-return progress bars (tqdm), cut to 2 KiB,
and then classified by the line rules in ``_KINDS``. A Python traceback becomes its
header, the innermost three frames and the exception line; when a log holds several
tracebacks (chained exceptions, many ranks) only the last one is kept. The excerpt is
normalised, then redacted, with :func:`hpcmem.kb.safety.normalise.scrub_text` (what escape
stripping at the byte level leaves - other controls, zero-width characters, %-escaped
values - cannot hide a secret either) and bounded to 4 KiB: it keeps the first error and
as many of the last error blocks as fit.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from hpcmem.kb.errors import InputError
from hpcmem.kb.safety.normalise import scrub_text

__all__ = [
    "LogExcerpt",
    "scan_log",
    "iter_log_paths",
    "job_id_from_filename",
    "KINDS",
    "LOG_NAME_PATTERNS",
    "HEAD_LIMIT",
    "TAIL_LIMIT",
    "LINE_LIMIT",
    "EXCERPT_LIMIT",
]

HEAD_LIMIT = 1 << 20  # bytes scanned from the top while looking for the first error
TAIL_LIMIT = 256 << 10  # bytes read from the end
CHUNK_SIZE = 64 << 10
CONTEXT_AFTER = 16 << 10  # bytes kept after the first error, so its block is complete
LINE_LIMIT = 2048  # characters kept of one line; keeps every regex run short
EXCERPT_LIMIT = 4096  # bytes of UTF-8 in LogExcerpt.excerpt
TRACEBACK_FRAMES = 3
MAX_TRACEBACK_LINES = 400  # lines followed after "Traceback (most recent call last):"
MAX_HIT_LINES = 400  # candidate lines examined per region (the last ones in the tail)

LOG_NAME_PATTERNS = ("*.out", "*.err")


@dataclass(frozen=True)
class LogExcerpt:
    """What :func:`scan_log` found in one log file.

    ``excerpt`` is empty and ``first_error`` None when no error line was found.
    ``truncated`` says the excerpt may not show everything: blocks or lines were left
    out to stay within EXCERPT_LIMIT, or part of the file was never read
    (``bytes_read < file_size``).
    """

    path: str
    job_id: str | None
    excerpt: str
    first_error: str | None
    kinds: tuple[str, ...]
    lines_scanned: int
    bytes_read: int
    truncated: bool
    file_size: int

    @property
    def has_error(self) -> bool:
        return bool(self.kinds)


# --------------------------------------------------------------------------- rules

# Prefixes that launchers put before each line of a task: `srun --label` ("3: "),
# torchrun ("[rank3]:", "[default3]:").
_RANK_PREFIX = r"(?: *\d+: |\[(?:rank|default)?\d+\]: ?)"


@dataclass(frozen=True)
class _Kind:
    name: str
    line: re.Pattern[str]  # confirms the kind on a cleaned line
    # Literal strings of which every matching line contains at least one. Finding
    # candidates by literals keeps the scan of megabytes of noise fast.
    anchors: tuple[str, ...]
    follow: int = 0  # continuation lines kept after the hit ...
    indented_only: bool = False  # ... only indented ones (compiler source + caret)
    generic: bool = False  # applies only when no specific kind matched the line


def _kind(name: str, line: str, anchors: tuple[str, ...], *, follow: int = 0,
          indented_only: bool = False, generic: bool = False) -> _Kind:
    return _Kind(name, re.compile(line), anchors, follow, indented_only, generic)


_TRACEBACK_HEADER = "Traceback (most recent call last):"
_EXCEPTION_LINE = (
    r"^" + _RANK_PREFIX + r"?(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)(?::|$)"
)

# Order is the order of the `kinds` a line gets; generic kinds come last.
# Anchors start with an upper-case letter, ':' , ')' or a newline (they are searched in
# text that starts with one): sre skips positions whose byte cannot start an anchor,
# and lower-case letters and spaces are most of the bytes of a log.
_KINDS: tuple[_Kind, ...] = (
    _kind("time_limit",
          r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT", ("CANCELLED AT",)),
    _kind("job_cancelled",  # by a user, preemption, node failure: any reason but time
          r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?= )(?! DUE TO TIME LIMIT)", ("CANCELLED AT",)),
    _kind("oom",  # Slurm's own lines all contain "slurmstepd: error:" / "srun: error:"
          r"oom[-_]kill event|Out Of Memory|[Ee]xceeded (?:job )?memory limit"
          r"|Out of memory: Kill|invoked oom-killer|^(?:" + _RANK_PREFIX + r")?MemoryError\b",
          (": error", "Out of memory", "Error")),
    _kind("cuda_oom",
          r"CUDA out of memory|CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY"
          r"|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory",
          ("CUDA out of memory", "CUDA error", "CUDA_ERROR_", "Error", "CUBLAS_STATUS_",
           "RESOURCE_EXHAUSTED")),
    _kind("cuda",
          r"CUDA error|CUDA_ERROR_[A-Z_]+|cudaError[A-Z]\w*|CUDA driver version is insufficient"
          r"|no CUDA-capable device|CUDA initialization|CUBLAS_STATUS_(?!SUCCESS)[A-Z_]+"
          r"|CUDNN_STATUS_(?!SUCCESS)[A-Z_]+|cuDNN error|device-side assert|NVIDIA-SMI has failed",
          ("CUDA error", "CUDA_ERROR_", "Error", "CUDA driver version", "CUDA-capable",
           "CUDA initialization", "CUBLAS_STATUS_", "CUDNN_STATUS_", "DNN error", "NVIDIA-SMI has failed")),
    _kind("nccl",
          r"NCCL WARN|NCCL error|NCCL failure|NCCL timeout"
          r"|nccl(?:Internal|System|UnhandledCuda|InvalidUsage|InvalidArgument|Remote)Error"
          r"|Watchdog caught collective operation timeout|NCCL communicator was aborted",
          ("NCCL WARN", "NCCL error", "NCCL failure", "NCCL timeout", "Error", "Watchdog caught",
           "NCCL communicator was aborted")),
    _kind("mpi",
          r"MPI_ABORT was invoked|MPI_Abort\(|Fatal error in P?MPI_\w+|MPI_ERR_[A-Z_]+"
          r"|(?:mpirun|mpiexec|prterun) (?:noticed|has exited|detected|was unable)"
          r"|ORTE has lost communication|BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
          r"|It looks like MPI_INIT failed|An error occurred in MPI_\w+",
          ("MPI_", "Fatal error in ", "\nmpirun ", "\nmpiexec ", "\nprterun ", "ORTE has lost",
           "BAD TERMINATION", "It looks like", "An error occurred in MPI_"),
          follow=3),
    _kind("ucx", r"UCX\s{1,4}(?:ERROR|FATAL)", ("ERROR", "FATAL")),
    _kind("pmix",
          r"PMIX ERROR|PMIx_Init failed|pmix_init failed|PMIX_ERR_[A-Z_]+|PMI2?_Init failed"
          r"|OPAL ERROR|ORTE_ERROR_LOG|error: mpi/pmix",
          ("PMI", "It looks like", "OPAL ERROR", "ORTE_ERROR_LOG", ": error")),
    _kind("shared_library_missing",
          r"error while loading shared libraries|cannot open shared object file",
          (": error while loading", ": cannot open shared object file")),
    _kind("library_version_mismatch",
          r"version .{1,3}(?:GLIBCXX|GLIBC|CXXABI|GCC|GFORTRAN)_[0-9.]{1,12}.{1,3} not found",
          ("GLIBC", "CXXABI_", "GCC_", "GFORTRAN_")),
    _kind("link_error",
          r"undefined reference to|\bld(?:\.\w+)?: cannot find|ld returned \d+ exit status"
          r"|multiple definition of",
          (": undefined reference to", ": cannot find", ": error", ": multiple definition of")),
    _kind("compiler_error",
          r"^\S+\.(?:c|cc|cpp|cxx|c\+\+|C|h|hh|hpp|hxx|f|F|for|f77|f90|F90|f95|f03|f08|cu|cuh)"
          r"(?::\d+){1,2}: (?:fatal )?error:"
          r"|^\S+\.cuh?\(\d+\): (?:catastrophic )?error"
          r"|^(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|gfortran|nvcc|icc|icpc|icx|icpx|ifort|ifx"
          r"|mpicc|mpicxx|mpic\+\+|mpif90|mpifort|cc1|cc1plus|f951): (?:fatal )?error:",
          (": error", ": fatal error", "): error", "): catastrophic error"), follow=3, indented_only=True),
    _kind("build_failed", r"\bmake(?:\[\d+\])?: \*\*\* .{0,400}Error \d+", ("Error",)),
    _kind("lmod_error", r"Lmod has detected the following error", ("Lmod has detected",), follow=6),
    _kind("module_command_missing",
          r"\b(?:module|ml): (?:command )?not found|/lmod/libexec/lmod: No such file or directory",
          (": command not found", ": not found", "No such file or directory")),
    _kind("command_not_found", r": command not found|^\S*sh: \d+: .{1,200}: not found",
          (": command not found", ": not found")),
    _kind("killed",
          r"^\s*Killed\s*$|\d\s+Killed\s|: Killed\s*$|Killed process \d+|\(Killed\)|KILLED BY SIGNAL: 9",
          ("Killed", "KILLED BY SIGNAL")),
    _kind("abort",
          r"terminate called after throwing an instance of|Aborted \(core dumped\)|SIGABRT",
          ("\nterminate called", "Aborted (core dumped)", "SIGABRT")),
    _kind("segfault", r"Segmentation fault|SIGSEGV", ("Segmentation fault", "SIGSEGV")),
    _kind("bus_error", r"Bus error|SIGBUS", ("Bus error", "SIGBUS")),
    _kind("illegal_instruction", r"Illegal instruction|SIGILL", ("Illegal instruction", "SIGILL")),
    _kind("disk_quota", r"Disk quota exceeded|EDQUOT", ("Disk quota exceeded", "EDQUOT")),
    _kind("no_space", r"No space left on device|ENOSPC", ("No space left on device", "ENOSPC")),
    _kind("python_exception", re.escape(_TRACEBACK_HEADER) + "|" + _EXCEPTION_LINE,
          ("Traceback (most recent call last)", "Error", "Exception", "Interrupt")),
    # A line that says it is an error, from any program: "ERROR: Lost atoms", "fatal: ...".
    _kind("error_message",
          r"^" + _RANK_PREFIX + r"?\W{0,3}(?:(?:ERROR|FATAL)\b|(?:[Ee]rror|[Ff]atal|Fatal error)(?::|!))",
          ("ERROR", "FATAL", "Error", "Fatal", "\nerror", "\nfatal", ": error", ": fatal")),
    _kind("file_not_found", r"No such file or directory", ("No such file or directory",), generic=True),
    _kind("slurmstepd_error", r"slurmstepd(?:-[\w.\-]+)?: error:", (": error",), generic=True),
    _kind("srun_error", r"srun: (?:error|fatal):|srun: Job step aborted|srun: \S+ aborted before step",
          (": error", ": fatal", "Job step aborted", "StepId="), generic=True),
)

KINDS: tuple[str, ...] = tuple(k.name for k in _KINDS)
_SPECIFIC = tuple(k for k in _KINDS if not k.generic)
_GENERIC = tuple(k for k in _KINDS if k.generic)
_BY_NAME = {k.name: k for k in _KINDS}


def _literal_union(words: Iterable[str]) -> re.Pattern[bytes]:
    """One regex finding any of ``words``, as a trie (``a(?:bc|d)``): sre then tests
    about one alternative per byte instead of all of them, which is ~15x faster."""
    unique = set(words)
    # A word containing another adds nothing: the shorter one finds the same line.
    minimal = sorted(w for w in unique if not any(o != w and o in w for o in unique))
    trie: dict = {}
    for word in minimal:
        node = trie
        for byte in word.encode():
            node = node.setdefault(byte, {})
        node[None] = {}  # end of a word; by minimality it has no children

    def emit(node: dict) -> bytes:
        if None in node:
            return b""
        alternatives = [re.escape(bytes([byte])) + emit(child) for byte, child in sorted(node.items())]
        return alternatives[0] if len(alternatives) == 1 else b"(?:" + b"|".join(alternatives) + b")"

    return re.compile(emit(trie))


_CANDIDATE = _literal_union(anchor for kind in _KINDS for anchor in kind.anchors)

# CSI sequences (colours, cursor moves), OSC sequences (titles, links), two-byte escapes.
_ANSI = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]{0,512}(?:\x07|\x1b\\)?|[@-Z\\-_])")
_RANK_PREFIX_ONLY = re.compile(_RANK_PREFIX + r"?")
_TRACEBACK_AT = re.compile(re.escape(_TRACEBACK_HEADER))
_JOB_ID = re.compile(r"(?:^|[-._])([1-9]\d*(?:_\d+)?)$")


# --------------------------------------------------------------------------- public API


def job_id_from_filename(path: str | os.PathLike[str]) -> str | None:
    """The Slurm job id in a log file name, or None.

    ``slurm-1234.out`` -> ``"1234"``, ``train-1234.err`` (``%x-%j``) -> ``"1234"``,
    ``slurm-1234_7.out`` (array ``%A_%a``) -> ``"1234_7"``, ``notes.txt`` -> None.
    """
    name = os.path.basename(os.fspath(path))
    stem = name.rsplit(".", 1)[0] if "." in name else name
    m = _JOB_ID.search(stem)
    return m.group(1) if m else None


def iter_log_paths(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
                   patterns: tuple[str, ...] = LOG_NAME_PATTERNS) -> Iterator[Path]:
    """Yield log files: explicit file paths as given (never checked against ``patterns``),
    and for directory arguments only, the files below them whose names match
    ``patterns`` (sorted, symlinked directories not followed). A directory that cannot
    be listed raises InputError: skipping it would read as "no failures there"."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]

    def unreadable(exc: OSError) -> None:
        raise InputError(f"cannot read directory {exc.filename}: {exc.strerror}",
                         hint="give logs or directories you can read") from None

    for item in paths:
        path = Path(item)
        if not path.is_dir():
            yield path
            continue
        for root, dirs, files in os.walk(path, onerror=unreadable):
            dirs.sort()
            for name in sorted(files):
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
                    yield Path(root, name)


def scan_log(path: str | os.PathLike[str], regular_only: bool = False) -> LogExcerpt:
    """Read the head and tail of one job log and return its failure excerpt.

    The file is opened once; a log without any error line gives an empty excerpt.
    Raises InputError when the file cannot be opened or is a directory, and with
    ``regular_only`` when it is not a regular file (a FIFO, a socket, a device): those
    are skipped, never waited on. Otherwise a pipe is read as a stream.
    """
    name = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to would otherwise wait forever.
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"job log not found: {name}",
                         hint="the job may have written elsewhere; check StdOut/StdErr in scontrol") from None
    except OSError as exc:
        raise InputError(f"cannot open job log {name}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"job log path is a directory: {name}",
                             hint="pass it to iter_log_paths() to list the logs inside")
        if regular_only and not stat.S_ISREG(info.st_mode):
            raise InputError(f"not a regular file ({_file_kind(info.st_mode)}); skipped")
        os.set_blocking(fd, True)  # a pipe with a writer is read to its end
        regions, bytes_read, whole = _read_regions(fd, info.st_size if stat.S_ISREG(info.st_mode) else None)
    finally:
        os.close(fd)

    lines_scanned = 0
    blocks: list[_Block] = []
    for index, region in enumerate(regions):
        # data starts with a sentinel newline, which is not a line of the file
        lines_scanned += region.data.count(b"\n") - (1 if region.data.endswith(b"\n") else 0)
        if region.may_have_errors:
            blocks.extend(_region_blocks(region, index))
    excerpt, first_error, kinds, cut = _assemble(blocks)
    return LogExcerpt(
        path=name,
        job_id=job_id_from_filename(name),
        excerpt=excerpt,
        first_error=first_error,
        kinds=kinds,
        lines_scanned=lines_scanned,
        bytes_read=bytes_read,
        truncated=cut or not whole,
        file_size=info.st_size,
    )


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "a special file"


# --------------------------------------------------------------------------- reading


@dataclass
class _Region:
    # File offset of data[1], minus one. Offsets inside data are shifted by the NUL/ANSI
    # bytes removed; they only order blocks and tell adjacent ones apart.
    offset: int
    # Cleaned bytes (no NUL, no ANSI escapes) after a sentinel b"\n", so that every line,
    # the first included, follows a newline: anchors such as "\nfatal" then find it.
    data: bytes
    may_have_errors: bool = True  # False when the head scan already found none


def _clean_bytes(data: bytes) -> bytes:
    if b"\0" in data:
        data = data.replace(b"\0", b"")
    if b"\x1b" in data:
        data = _ANSI.sub(b"", data)
    return data


def _read_exact(fd: int, size: int) -> bytes:
    parts = []
    while size > 0:
        part = os.read(fd, min(size, CHUNK_SIZE * 4))
        if not part:
            break
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _read_regions(fd: int, size: int | None) -> tuple[list[_Region], int, bool]:
    """Read what the scan needs. Returns (regions, bytes read, whole file read)."""
    if size is None or size <= HEAD_LIMIT + TAIL_LIMIT:
        # Small file (or a pipe): read it whole, but never more than the two bounds.
        data = _read_exact(fd, HEAD_LIMIT + TAIL_LIMIT)
        extra = os.read(fd, 1) if size is None else b""  # a pipe has no size: is there more?
        whole = not extra if size is None else len(data) >= size
        return [_Region(-1, b"\n" + _clean_bytes(data))], len(data) + len(extra), whole

    head, head_read, head_has_error = _scan_head(fd)
    # One positioned read for the tail. It starts one byte early: if that byte is a
    # newline the tail begins on a line start. Otherwise the partial first line is
    # dropped, except for its last carriage-return segment, which is complete (a
    # traceback often follows a progress bar on the same line).
    start = size - TAIL_LIMIT - 1
    tail = os.pread(fd, TAIL_LIMIT + 1, start)
    newline = tail.find(b"\n")
    last_cr = tail.rfind(b"\r", 0, newline) if newline > 0 else -1
    cut = (last_cr if last_cr >= 0 else newline) + 1
    regions = [_Region(-1, head, head_has_error), _Region(start + cut - 1, b"\n" + _clean_bytes(tail[cut:]))]
    return regions, head_read + len(tail), False


def _scan_head(fd: int) -> tuple[bytes, int, bool]:
    """Read from the top until the first error line plus CONTEXT_AFTER, or HEAD_LIMIT.

    Returns the cleaned head (after a sentinel newline, see _Region), the number of
    bytes read and whether an error was found.
    """
    cleaned = bytearray(b"\n")
    pending = b""  # bytes after the last line end, cleaned once their line is complete
    read = 0
    error_at: int | None = None  # start of the first error line
    while read < HEAD_LIMIT and (error_at is None or len(cleaned) < error_at + CONTEXT_AFTER):
        chunk = os.read(fd, min(CHUNK_SIZE, HEAD_LIMIT - read))
        if not chunk:
            break
        read += len(chunk)
        data = pending + chunk
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) < CHUNK_SIZE:
                pending = data
                continue
            end = len(data)  # a huge line: take it in pieces (searches overlap below)
        pending = data[end:]
        search_from = max(0, len(cleaned) - 256)
        cleaned += _clean_bytes(data[:end])
        if error_at is None:
            error_at = _first_error(cleaned, search_from)
    cleaned += _clean_bytes(pending)
    if error_at is not None and error_at + CONTEXT_AFTER < len(cleaned):
        # Keep whole lines of context, but never cut into the error line itself.
        stop = error_at + CONTEXT_AFTER
        cut = cleaned.rfind(b"\n", error_at, stop) + 1
        del cleaned[cut if cut > error_at else stop :]
    return bytes(cleaned), read, error_at is not None


def _first_error(buf: bytearray, start: int) -> int | None:
    """Offset of the first line at or after ``start`` that the rules confirm as an error."""
    checked = -1
    for m in _CANDIDATE.finditer(buf, start):
        line_start = buf.rfind(b"\n", 0, m.start() + 1) + 1  # +1: anchors may start with \n
        if line_start == checked:
            continue
        checked = line_start
        line_end = buf.find(b"\n", line_start)
        line_end = len(buf) if line_end < 0 else line_end
        if _classify(_clean_line(bytes(buf[line_start:line_end]))):
            return line_start
    return None


# --------------------------------------------------------------------------- lines


_CUT_MARK = " [...]"


def _clean_line(raw: bytes) -> str:
    """Decode one line as a terminal would show it, at most LINE_LIMIT characters."""
    if b"\r" in raw:
        # A progress bar rewrites its line with \r: only the last state is visible.
        raw = raw.rstrip(b"\r")
        raw = raw[raw.rfind(b"\r") + 1 :]
    if len(raw) > LINE_LIMIT:
        raw = raw[: LINE_LIMIT * 4]  # enough bytes for LINE_LIMIT characters
    text = raw.decode("utf-8", "replace")
    if len(text) > LINE_LIMIT:
        text = text[: LINE_LIMIT - len(_CUT_MARK)]
        # Cut at a space near the end, so a token is not left half-visible.
        space = text.rfind(" ", len(text) - 256)
        text = (text[:space] if space > 0 else text) + _CUT_MARK
    return text


def _classify(line: str) -> tuple[str, ...]:
    kinds = tuple(k.name for k in _SPECIFIC if k.line.search(line))
    if kinds:
        return kinds
    return tuple(k.name for k in _GENERIC if k.line.search(line))


def _iter_lines(buf: bytes, pos: int) -> Iterator[tuple[int, str]]:
    """(end offset, cleaned text) of each line starting at ``pos``."""
    size = len(buf)
    while pos < size:
        end = buf.find(b"\n", pos)
        end = size if end < 0 else end
        yield end + 1, _clean_line(buf[pos:end])
        pos = end + 1


# --------------------------------------------------------------------------- blocks


@dataclass
class _Block:
    start: int  # offset of the first line, for ordering
    end: int  # offset just past the last line
    kinds: list[str]
    headline: str  # the line that names the error (for tracebacks: the exception)
    lines: list[str]
    traceback: bool = False
    region: int = 0  # blocks of different regions are never adjacent


def _region_blocks(region: _Region, index: int) -> list[_Block]:
    buf = region.data
    starts: list[int] = []
    for m in _CANDIDATE.finditer(buf):
        line_start = buf.rfind(b"\n", 0, m.start() + 1) + 1  # +1: anchors may start with \n
        if not starts or starts[-1] != line_start:
            starts.append(line_start)
    if len(starts) > MAX_HIT_LINES:
        # What matters is the first error and how the job ended.
        starts = starts[:16] + starts[16 - MAX_HIT_LINES :]

    blocks: list[_Block] = []
    covered = -1  # hits inside the previous block only add their kinds to it
    for line_start in starts:
        next_pos, text = next(_iter_lines(buf, line_start))
        kinds = _classify(text)
        if not kinds:
            continue
        if line_start < covered:
            _add_kinds(blocks[-1].kinds, kinds)
            continue
        if "python_exception" in kinds and _TRACEBACK_AT.search(text):
            block = _traceback_block(buf, line_start, next_pos, text, kinds)
        else:
            lines, end = _follow(buf, next_pos, text, kinds)
            block = _Block(line_start, end, list(kinds), text, lines)
        covered = block.end
        # Absolute offsets from here on, so head and tail blocks sort together.
        block.start += region.offset
        block.end += region.offset
        block.region = index
        blocks.append(block)
    return blocks


def _add_kinds(kinds: list[str], new: Iterable[str]) -> None:
    for kind in new:
        if kind not in kinds:
            kinds.append(kind)


def _follow(buf: bytes, pos: int, text: str, kinds: tuple[str, ...]) -> tuple[list[str], int]:
    """The hit line plus its continuation lines (Lmod message, MPI banner, caret)."""
    rule = max((_BY_NAME[k] for k in kinds), key=lambda k: k.follow)
    lines, end = [text], pos
    if rule.follow:
        for next_pos, line in _iter_lines(buf, pos):
            if len(lines) > rule.follow or not line.strip() or line.startswith("-----"):
                break
            if rule.indented_only and not line[:1].isspace():
                break
            lines.append(line)
            end = next_pos
    return lines, end


def _traceback_block(buf: bytes, start: int, pos: int, header: str,
                     kinds: tuple[str, ...]) -> _Block:
    """Header, the innermost frames and the exception line of one traceback."""
    at = _TRACEBACK_AT.search(header)
    assert at is not None
    prefix = header[: at.start()]
    if not _RANK_PREFIX_ONLY.fullmatch(prefix):
        prefix = ""  # e.g. a progress bar left without a newline, not a rank label
    frames: list[list[str]] = []
    exception: str | None = None
    end = pos
    for count, (next_pos, line) in enumerate(_iter_lines(buf, pos)):
        if count >= MAX_TRACEBACK_LINES:
            break
        end = next_pos
        if prefix:
            if not line.startswith(prefix):
                continue  # another rank's output interleaved
            line = line[len(prefix) :]
        if line.startswith("  File "):
            frames.append([line])
        elif line[:1].isspace():
            if frames and len(frames[-1]) < 3:
                frames[-1].append(line)  # source line and carets
        elif line.strip():
            exception = line
            break
    lines = [_TRACEBACK_HEADER]
    if len(frames) > TRACEBACK_FRAMES:
        lines.append(f"  [... {len(frames) - TRACEBACK_FRAMES} earlier frames omitted ...]")
    for frame in frames[-TRACEBACK_FRAMES:]:
        lines.extend(frame)
    block_kinds = list(kinds)
    if exception is not None:
        lines.append(exception)
        _add_kinds(block_kinds, _classify(exception))
    return _Block(start, end, block_kinds, exception or header.strip(), lines, traceback=True)


# --------------------------------------------------------------------------- excerpt


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _cut_utf8(text: str, size: int) -> str:
    return text.encode("utf-8")[: max(0, size)].decode("utf-8", "ignore")


def _fit(lines: list[str], cap: int) -> tuple[str, bool]:
    """Join ``lines`` within ``cap`` bytes. Returns the text and whether it was cut.

    The first line (the header) and the last (a traceback's exception) are kept longest;
    lines in between go first, oldest first.
    """
    text = "\n".join(lines)
    if _utf8_len(text) <= cap:
        return text, False
    if len(lines) == 1:
        return _cut_utf8(text, cap), True
    head, middle, last = lines[0], list(lines[1:-1]), lines[-1]
    while middle and _utf8_len("\n".join([head, "[...]", *middle, last])) > cap:
        del middle[0]
    kept = [head, "[...]", *middle, last]
    text = "\n".join(kept)
    if _utf8_len(text) > cap:
        share = cap // len(kept) - 1
        text = "\n".join(_cut_utf8(line, share) for line in kept)
    return text, True


def _redacted_lines(block: _Block) -> list[str]:
    # One call per block: redaction has a fixed cost per call, and a private key
    # block spans lines.
    return scrub_text("\n".join(block.lines)).split("\n")


def _assemble(blocks: list[_Block]) -> tuple[str, str | None, tuple[str, ...], bool]:
    """Excerpt text, first error, kinds, and whether blocks or lines were left out."""
    if not blocks:
        return "", None, (), False
    blocks.sort(key=lambda b: b.start)
    kinds: list[str] = []
    for block in blocks:
        _add_kinds(kinds, block.kinds)
    first_error = scrub_text(blocks[0].headline.strip()).strip()

    # Only the last traceback tells how the job ended (chained exceptions, many ranks).
    last_traceback = max((i for i, b in enumerate(blocks) if b.traceback), default=None)
    keep = [b for i, b in enumerate(blocks) if not b.traceback or i == last_traceback]
    # Repeated blocks (every rank printing the same error) are shown once, the last time.
    seen: set[tuple[str, ...]] = set()
    unique: list[_Block] = []
    for block in reversed(keep):
        if tuple(block.lines) not in seen:
            seen.add(tuple(block.lines))
            unique.append(block)
    unique.reverse()

    # The first error, then as many of the last blocks as fit.
    first, rest = unique[0], unique[1:]
    first_text, cut = _fit(_redacted_lines(first), EXCERPT_LIMIT // 2)
    budget = EXCERPT_LIMIT - _utf8_len(first_text)
    chosen: list[tuple[_Block, str]] = []
    for block in reversed(rest):
        text, block_cut = _fit(_redacted_lines(block), EXCERPT_LIMIT // 2)
        need = _utf8_len(text) + len("\n[...]\n")
        if need > budget:
            cut = True
            break
        budget -= need
        cut = cut or block_cut
        chosen.append((block, text))
    chosen.reverse()

    parts = [first_text]
    previous = first
    for block, text in chosen:
        adjacent = block.region == previous.region and block.start <= previous.end
        parts.append(("\n" if adjacent else "\n[...]\n") + text)
        previous = block
    return "".join(parts), first_error, tuple(kinds), cut
