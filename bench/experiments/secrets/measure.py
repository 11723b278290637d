"""Coverage, false positives and speed of each candidate redactor, in one process.

    venv/bin/python -W ignore measure.py [--only NAME,...] [--speed-mb 4] [--json results.json]

coverage: fakes.jsonl (gen_fakes.py). A gitleaks-shape item counts only if the gitleaks
  binary itself catches it (`gitleaks: true`); HPC and ANSI items always count. An item
  is *caught* when no 8-character window of its secret that holds >= 4 random characters
  survives in the output (after ANSI and zero-width characters are removed from the
  output, so a split secret still counts as leaked). A rule shape is caught when all of
  its counted placements are.
false positives: ordinary.jsonl (build_ordinary.py); an item is altered when the output
  differs from the input.
speed: mixed job-log text built as bench/bench_logscan.py builds it (sample logs, Loghub
  messages, training/solver noise), redacted in 4 KiB line-aligned chunks and line by
  line; MB/s and the ratio to a regex-free baseline (text.split on newlines) measured in
  the same process.
"""
from __future__ import annotations

import argparse
import csv
import json
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import candidates as C  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
ZW = re.compile("[\u200b-\u200f\u2060-\u2064\ufeff\u202a-\u202e]")
GL_FAMILIES = ("self_identifying", "service_named", "context_form")


def clean(s: str) -> str:
    return ZW.sub("", ANSI.sub("", s))


MARKER = re.compile(r"\[REDACTED[^\]]*\]")


def leaked(out: str, secret: str, mask: str) -> bool:
    out = MARKER.sub("\x00", clean(out))
    n = len(secret)
    w = min(8, n)
    need = min(4, mask.count("1"))
    for i in range(0, n - w + 1):
        if mask[i : i + w].count("1") >= need and secret[i : i + w] in out:
            return True
    return False


def load_jsonl(p):
    return [json.loads(l) for l in open(p, encoding="utf-8")]


def counted(it) -> bool:
    return it["family"] not in GL_FAMILIES or it["gitleaks"]


def coverage(cand, fakes):
    res = []
    idem_bad = 0
    collateral = []
    for it in fakes:
        if not counted(it):
            continue
        out = cand.redact(it["text"])
        ok = not leaked(out, it["secret"], it["mask"])
        res.append((it, ok))
        if cand.redact(out) != out:
            idem_bad += 1
        if ok and it["secret"] in it["text"]:
            # characters of the line other than the secret that the redaction also removed
            expected = clean(it["text"]).replace(it["secret"], "")
            got = MARKER.sub("", clean(out))
            collateral.append(max(0, len(expected) - len(got)))
    by_fam = defaultdict(lambda: [0, 0])
    by_rule = defaultdict(lambda: True)
    by_ctx = defaultdict(lambda: [0, 0])
    for it, ok in res:
        by_fam[it["family"]][0] += ok
        by_fam[it["family"]][1] += 1
        by_ctx[it["context"]][0] += ok
        by_ctx[it["context"]][1] += 1
        key = (it["family"], it["rule"])
        by_rule[key] = by_rule[key] and ok
    rules_fam = defaultdict(lambda: [0, 0])
    missed = defaultdict(list)
    for (fam, rule), ok in by_rule.items():
        rules_fam[fam][0] += ok
        rules_fam[fam][1] += 1
    for it, ok in res:
        if not ok:
            missed[it["family"]].append(f'{it["rule"]}:{it["context"]}')
    return {"items": {k: v for k, v in by_fam.items()}, "shapes": {k: v for k, v in rules_fam.items()},
            "contexts": dict(by_ctx), "missed": dict(missed), "not_idempotent": idem_bad,
            "collateral_chars": {"items_with_any": sum(1 for c in collateral if c),
                                 "max": max(collateral, default=0), "n": len(collateral)}}


def false_positives(cand, ordinary):
    altered = defaultdict(lambda: [0, 0])
    examples = defaultdict(list)
    norm = getattr(cand, "normalise_input", None)  # normalisation is not redaction
    for it in ordinary:
        out = cand.redact(it["text"])
        bad = out != (norm(it["text"]) if norm else it["text"])
        altered[it["source"]][0] += bad
        altered[it["source"]][1] += 1
        if bad and len(examples[it["source"]]) < 400:
            examples[it["source"]].append([it["text"][:200], out[:200]])
    return {"altered": dict(altered), "examples": dict(examples)}


# ---------------------------------------------------------------------------------------
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


def mixed_text(mb: float, seed: int = 7) -> str:
    """Same recipe as bench/bench_logscan.py's _mixed_text (re-implemented here)."""
    rng = random.Random(seed)
    samples = Path(__file__).resolve().parents[3] / "data" / "samples" / "logs"
    parts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(samples.rglob("*.out"))]
    parts += [p.read_text(encoding="utf-8", errors="replace") for p in sorted(samples.rglob("*.err"))]
    loghub = []
    for path in sorted((Path(__file__).resolve().parents[4] / "shared" / "bench" / "loghub").glob("*/*_2k.log_structured_corrected.csv")):
        with open(path, newline="", encoding="utf-8") as fh:
            loghub.extend(row["Content"] for row in csv.DictReader(fh))
    body = "".join(parts) + "\n".join(loghub) + "\n"
    lines, total = [], 0
    while total < len(body):
        i = rng.randint(0, 10**6)
        line = rng.choice(NOISE).format(i=i, m=i % 60, s=(i // 7) % 60, ms=i % 1000, f=rng.random() * 10,
                                        g=rng.random() * 100, n=i % 32, r=i % 8, c=i % 32, e=i % 90)
        lines.append(line)
        total += len(line) + 1
    text = body + "\n".join(lines) + "\n"
    reps = int(mb * 1_000_000 // len(text.encode())) + 1
    return (text * reps)[: int(mb * 1_000_000)]


def _best(fn, repeat=3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def speed(cand, text: str, per_line=True, repeat=3):
    size = len(text.encode()) / 1e6
    base = _best(lambda: text.split("\n"), repeat)
    chunks = []
    i = 0
    while i < len(text):
        j = text.rfind("\n", i, i + 4096) + 1 or len(text)
        if j <= i:
            j = len(text)
        chunks.append(text[i:j])
        i = j

    def run_chunks():
        for c in chunks:
            cand.redact(c)

    t_chunks = _best(run_chunks, repeat)
    out = {"mb": round(size, 2), "baseline_split_mb_s": round(size / base, 1),
           "chunks4k_mb_s": round(size / t_chunks, 2)}
    if per_line:
        lines = text.split("\n")

        def run_lines():
            for line in lines:
                cand.redact(line)

        t_lines = _best(run_lines, repeat)
        out["per_line_mb_s"] = round(size / t_lines, 2)
    out["ratio_baseline_over_chunks"] = round((size / base) / (size / t_chunks), 1)
    return out


def build(names):
    reg = {
        "hpcmem-today": lambda: C.Current(),
        "detect-secrets-noentropy": lambda: C.DetectSecrets(False),
        "detect-secrets+assign-entropy": lambda: C.DetectSecrets(True),
        "llm-guard-plugins+detect-secrets": lambda: C.DetectSecrets(False, C.llm_guard_plugins(),
                                                                   name="llm-guard-plugins+detect-secrets"),
        "credsweeper-ml-off": lambda: C.CredSweeper(False),
        "credsweeper-ml-off-doc": lambda: C.CredSweeper(True),
        "gitleaks-rules-py-prefiltered": lambda: C.gitleaks_python(),
        "credsweeper-yaml-py-prefiltered": lambda: C.credsweeper_yaml(),
        "credsweeper-yaml(strong+moderate)-py-prefiltered": lambda: C.credsweeper_yaml(("strong", "moderate")),
    }
    try:
        import proposal

        reg.update(proposal.REGISTRY)
    except ImportError:
        pass
    return [(n, reg[n]) for n in (names or reg)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--speed-mb", type=float, default=4.0)
    ap.add_argument("--slow-speed-mb", type=float, default=0.5)
    ap.add_argument("--json", default=str(HERE / "results.json"))
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--fakes", default=str(HERE / "fakes.jsonl"))
    ap.add_argument("--no-fp", action="store_true")
    args = ap.parse_args()
    fakes = load_jsonl(args.fakes)
    ordinary = load_jsonl(HERE / "ordinary.jsonl")
    names = [n for n in args.only.split(",") if n]
    results = json.loads(Path(args.json).read_text()) if Path(args.json).exists() else {}
    text = mixed_text(args.speed_mb)
    slow_text = text[: int(args.slow_speed_mb * 1_000_000)]
    slow_text = slow_text[: slow_text.rfind("\n") + 1]
    for name, make in build(names):
        cand = make()
        t = time.perf_counter()
        cand.load()
        load_s = time.perf_counter() - t
        r = {"load_s_in_process": round(load_s, 3)}
        t = time.perf_counter()
        r["coverage"] = coverage(cand, fakes)
        r["fp"] = {"altered": {"-": [0, 1]}} if args.no_fp else false_positives(cand, ordinary)
        r["eval_s"] = round(time.perf_counter() - t, 1)
        if not args.no_speed:
            slow = name.startswith(("detect-secrets", "llm-guard", "credsweeper-ml-off"))
            r["speed"] = speed(cand, slow_text if slow else text, per_line=True, repeat=1 if slow else 3)
        if args.no_fp:
            results.setdefault(name, {})["coverage_" + Path(args.fakes).stem] = r["coverage"]
            print(name, {k: f"{v[0]}/{v[1]}" for k, v in r["coverage"]["shapes"].items()}, flush=True)
            Path(args.json).write_text(json.dumps(results, indent=1))
            continue
        results[name] = r
        cov = r["coverage"]["shapes"]
        fp = r["fp"]["altered"]
        tot_fp = sum(v[0] for v in fp.values()), sum(v[1] for v in fp.values())
        print(name, {k: f"{v[0]}/{v[1]}" for k, v in cov.items()},
              "fp/1000:", round(1000 * tot_fp[0] / tot_fp[1], 2), "nine:", fp.get("nine"),
              r.get("speed"), "load", r["load_s_in_process"], flush=True)
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
