"""Signature index: exact flat search vs IVF vs HNSW, and what a never-seen query costs.

    .venv/bin/python bench/bench_index.py [--sizes 1000,10000,20000,30000,50000,100000,200000]
        [--queries 500] [--seed 11] [--no-real] [--json results.json] [--write docs/benchmarks.md]
    .venv/bin/python bench/bench_index.py --from-json results.json --write docs/benchmarks.md

Synthetic vectors. Real all-MiniLM-L6-v2 embeddings of real failure templates are the
anchors: the Loghub 2k messages (read in place, never copied) and the project's sample
job logs, each put through ``fingerprint`` and ``text_for_embedding`` as signatures are.
Each synthetic signature vector is an anchor, pulled part of the way towards a second
anchor, plus Gaussian noise, normalised - the clusters and near-duplicates of real
templates rather than the easy spread of uniform random vectors. Queries are fresh draws.

Real vectors. The distinct raw Loghub messages, embedded for real; 500 held out as
queries. Too few to time anything, but the recall check on a real distribution.

Per size, one child process builds all three indexes: flat and IVF exactly as
``hpcmem.kb.recall.vector_index`` builds them, HNSW with the parameters below, so memory
figures are that size's alone. Latency is one query per ``search`` call (what recall
does), after a warm-up, on 1 and 2 OpenMP threads. recall@10 is an index's top 10
against the exact top 10 in the same run. "Load" is ``faiss.read_index`` of the saved
file from the page cache: every recall process pays it.

The model timings run ``hpcmem.kb.recall.embed`` in fresh child processes (files in the page
cache, the hash verification already remembered unless stated).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

# ../shared beside the repository (the workplace layout); --loghub or HPCMEM_LOGHUB elsewhere.
LOGHUB = Path(os.environ.get("HPCMEM_LOGHUB", REPO.parent / "shared" / "bench" / "loghub"))
SECTION = "## Vector index: flat vs approximate"
LATENCY_BUDGET_MS = 2.0
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 80, 64
KINDS = ("flat", "ivf", "hnsw")

# Shared by the child processes: build each kind, time it, score it against flat.
COMMON = r"""
import json, os, sys, tempfile, time
import numpy as np
import faiss
from hpcmem.kb.recall import vector_index as vi

HNSW_M, HNSW_EFC, HNSW_EF = %d, %d, %d

def rss_mb():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

def build(kind, vectors, ids):
    if kind == "flat":
        index = vi._new_flat(vectors.shape[1])
    elif kind == "ivf":
        rng = np.random.default_rng(vi.TRAIN_SEED)
        size = min(len(vectors), vi.IVF_TRAIN_PER_LIST * vi.ivf_lists(len(vectors)))
        index = vi._trained_ivf(vectors[np.sort(rng.choice(len(vectors), size, replace=False))], len(vectors))
    else:
        inner = faiss.IndexHNSWFlat(vectors.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction, inner.hnsw.efSearch = HNSW_EFC, HNSW_EF
        index = faiss.IndexIDMap2(inner)
    index.add_with_ids(vectors, ids)
    return index

def set_breadth(kind, index, value):
    if kind == "ivf":
        index.nprobe = min(value, index.nlist)
    elif kind == "hnsw":
        faiss.downcast_index(index.index).hnsw.efSearch = value

def latencies(index, queries, threads, k=10):
    faiss.omp_set_num_threads(threads)
    for q in queries[:20]:
        index.search(q[None, :], k)  # warm-up
    out = []
    for q in queries:
        t = time.perf_counter_ns()
        index.search(q[None, :], k)
        out.append((time.perf_counter_ns() - t) / 1e6)
    faiss.omp_set_num_threads(2)
    return float(np.percentile(out, 50)), float(np.percentile(out, 95))

def recall(found, truth):
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth)]))
""" % (HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH)

DRAW = r"""
anchors = np.load(sys.argv[1])

def draw(rng, count):
    a = anchors[rng.integers(len(anchors), size=count)]
    b = anchors[rng.integers(len(anchors), size=count)]
    pull = rng.uniform(0.0, 0.6, size=(count, 1)).astype(np.float32)
    noise = rng.standard_normal((count, anchors.shape[1])).astype(np.float32) * 0.03
    v = a + pull * b + noise
    return np.ascontiguousarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype=np.float32)
"""

SIZE_CHILD = COMMON + DRAW + r"""
n, n_queries, seed = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed + n)

def saved(index, tmp):
    path = os.path.join(tmp, "x.faiss")
    faiss.write_index(index, path)
    size = os.path.getsize(path)
    loads = []
    for _ in range(3):
        t = time.perf_counter()
        faiss.read_index(path)
        loads.append(time.perf_counter() - t)
    os.unlink(path)
    return size, sorted(loads)[1]

vectors = draw(rng, n)
ids = np.arange(1, n + 1, dtype=np.int64)
queries = draw(rng, n_queries)
extra = draw(rng, 1000)
result = {"n": n}
with tempfile.TemporaryDirectory() as tmp:
    for kind in ("flat", "ivf", "hnsw"):
        before = rss_mb()
        t = time.perf_counter()
        index = build(kind, vectors, ids)
        row = {"build_s": time.perf_counter() - t, "rss_mb": rss_mb() - before}
        row["p50_1"], row["p95_1"] = latencies(index, queries, 1)
        row["p50_2"], row["p95_2"] = latencies(index, queries, 2)
        size, row["load_s"] = saved(index, tmp)
        row["file_mb"] = size / 1e6
        found = index.search(queries, 10)[1]
        if kind == "flat":
            truth = found
        else:
            row["recall10"] = recall(found, truth)
            sweep = {}
            for value in ((4, 8, 16, 32, 64) if kind == "ivf" else (16, 32, 64, 128)):
                set_breadth(kind, index, value)
                p50, p95 = latencies(index, queries, 1)
                sweep[value] = {"recall10": recall(index.search(queries, 10)[1], truth), "p50": p50, "p95": p95}
            set_breadth(kind, index, vi.IVF_NPROBE if kind == "ivf" else HNSW_EF)
            row["sweep"] = sweep
        t = time.perf_counter()
        index.add_with_ids(extra, np.arange(n + 1, n + 1001, dtype=np.int64))
        row["add1k_s"] = time.perf_counter() - t
        result[kind] = row
        del index
print(json.dumps(result))
"""

# Exact search latency only, every size, in one more fresh process: repeated to see how
# much p95 moves between processes before calling a size "within budget".
FLAT_CHILD = COMMON + DRAW + r"""
sizes, n_queries, seed = [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4])
out = {}
for n in sizes:
    rng = np.random.default_rng(seed + n)
    index = build("flat", draw(rng, n), np.arange(1, n + 1, dtype=np.int64))
    out[n] = latencies(index, draw(rng, n_queries), 1)
    del index
print(json.dumps(out))
"""

REAL_CHILD = COMMON + r"""
x = np.load(sys.argv[1])
perm = np.random.default_rng(1).permutation(len(x))
queries, vectors = x[perm[:500]], np.ascontiguousarray(x[perm[500:]])
ids = np.arange(1, len(vectors) + 1, dtype=np.int64)
truth = build("flat", vectors, ids).search(queries, 10)[1]
result = {"n": len(vectors), "queries": len(queries)}
for kind in ("ivf", "hnsw"):
    index = build(kind, vectors, ids)
    result[kind] = {"recall10": recall(index.search(queries, 10)[1], truth)}
    if kind == "ivf":
        result[kind]["nlist"] = index.nlist
print(json.dumps(result))
"""

MODEL_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from hpcmem.kb.config import load_config
from hpcmem.kb.recall.embed import Embedder, model_spec, text_for_embedding, weights_sha256
spec = model_spec(load_config())
t1 = time.perf_counter()
import sentence_transformers  # noqa: F401  (torch, transformers)
t2 = time.perf_counter()
embedder = Embedder(spec)
embedder._model()
t3 = time.perf_counter()
embedder.encode([text_for_embedding("RuntimeError: CUDA error: out of memory", "cuda_oom")])
t4 = time.perf_counter()
times = []
for text in ("disk quota: OSError: [Errno] Disk quota exceeded: 'file'",
             "segfault: srun: error: node: task: Segmentation fault",
             "python import error: ModuleNotFoundError: No module named 'pandas'"):
    t = time.perf_counter()
    embedder.encode([text])
    times.append(time.perf_counter() - t)
t = time.perf_counter()
weights_sha256(spec.path, None)
hash_s = time.perf_counter() - t
print(json.dumps({"spec_s": t1 - t0, "import_s": t2 - t1, "load_s": t3 - t2, "first_encode_s": t4 - t3,
                  "encode_s": sorted(times)[1], "hash_s": hash_s, "total_s": t4 - t0}))
"""


def anchor_texts() -> list[str]:
    """Distinct embedding texts of real failure messages (Loghub 2k and data/samples)."""
    from hpcmem.kb.recall.embed import text_for_embedding
    from hpcmem.kb.signatures.fingerprint import fingerprint, signature_of_block

    texts: dict[str, None] = {}
    for row in loghub_rows():
        sig = fingerprint(row["Content"])
        texts.setdefault(text_for_embedding(sig.template, sig.category))
    for path in sorted((REPO / "data" / "samples" / "logs").glob("*.*")):
        if path.suffix in (".out", ".err"):
            sig = signature_of_block(path.read_text(errors="replace"))
            texts.setdefault(text_for_embedding(sig.template, sig.category))
    return [t for t in texts if t]


def loghub_rows():
    for path in sorted(LOGHUB.glob("*/*_2k.log_structured.csv")):
        with open(path, newline="", encoding="utf-8") as fh:
            yield from csv.DictReader(fh)


def embed(texts: list[str], path: Path) -> None:
    import numpy as np

    from hpcmem.kb.config import load_config
    from hpcmem.kb.recall.embed import Embedder, model_spec

    np.save(path, Embedder(model_spec(load_config())).encode(texts, batch_size=128))


def run(code: str, *args: str) -> dict:
    # A fixed mmap threshold stops glibc from serving the index out of freed temporaries,
    # so the RSS growth across a build is the index's own memory.
    env = dict(os.environ, HPCMEM_DISABLE_LOCAL_CONFIG="1", MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def flat_p95s(rows: list[dict], repeats: list[dict]) -> dict[int, list[float]]:
    """Exact single-query p95 per size from the main run and every repeat process."""
    return {r["n"]: [r["flat"]["p95_1"]] + [rep[str(r["n"])][1] for rep in repeats] for r in rows}


def recommend(p95s: dict[int, list[float]]) -> tuple[int, int | None]:
    """The largest size whose exact p95 stayed within the budget in every process, and the
    next measured size (the first that did not)."""
    within = [n for n, values in p95s.items() if max(values) <= LATENCY_BUDGET_MS]
    over = [n for n, values in p95s.items() if max(values) > LATENCY_BUDGET_MS]
    return (max(within) if within else 0), (min(over) if over else None)


def report(rows: list[dict], repeats: list[dict], real: dict | None, model: dict, args: argparse.Namespace,
           anchors: int) -> str:
    from hpcmem.kb.recall import vector_index as vi

    big = rows[-1]
    lines = [
        SECTION,
        "",
        f"Reproduce: `.venv/bin/python bench/bench_index.py --sizes {args.sizes} --queries {args.queries} "
        f"--seed {args.seed} --write docs/benchmarks.md` (2-core machine, faiss-cpu {rows[0]['faiss']}; "
        "about 10 minutes, a third of it embedding the real messages).",
        "",
        f"Synthetic vectors: 384-d, around {anchors} real all-MiniLM-L6-v2 embeddings of distinct failure "
        "templates (Loghub 2k + data/samples logs, through `fingerprint` and `text_for_embedding`): anchor + "
        "a pull towards a second anchor + noise, normalised. Queries are fresh draws, "
        f"{args.queries} per size, one `search` call each (k=10). flat = `IndexFlatIP` in `IndexIDMap2`; "
        f"ivf = `IndexIVFFlat`, inner product, about 4 sqrt(N) lists trained on {vi.IVF_TRAIN_PER_LIST} "
        f"sampled vectors per list, nprobe {vi.IVF_NPROBE} (both exactly as `kb/recall/vector_index.py` builds them); "
        f"hnsw = `IndexHNSWFlat` M={HNSW_M}, efConstruction={HNSW_EF_CONSTRUCTION}, efSearch={HNSW_EF_SEARCH}. "
        "recall@10: the index's top 10 against the exact top 10 of the same run. Latency in milliseconds "
        "with 1 or 2 OpenMP threads; load = `faiss.read_index` of the saved file from the page cache; "
        "build (ivf: training included) on both cores.",
        "",
        "| N | index | build (s) | memory (MB) | file (MB) | load (ms) | p50 1t | p95 1t | p50 2t "
        "| load + 1 query (ms) | recall@10 | add 1k (s) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for kind in KINDS:
            m = r[kind]
            recall = f"{m['recall10']:.3f}" if "recall10" in m else "1 (exact)"
            lines.append(
                f"| {r['n']:,} | {kind} | {m['build_s']:.2f} | {m['rss_mb']:.0f} | {m['file_mb']:.0f} | "
                f"{m['load_s'] * 1000:.1f} | {m['p50_1']:.3f} | {m['p95_1']:.3f} | {m['p50_2']:.3f} | "
                f"{m['load_s'] * 1000 + m['p50_1']:.1f} | {recall} | {m['add1k_s']:.3f} |"
            )
    lines += ["", f"Search breadth at N={big['n']:,} (one thread):", "",
              "| index | nprobe / efSearch | recall@10 | p50 (ms) | p95 (ms) |", "|---|---:|---:|---:|---:|"]
    for kind in ("ivf", "hnsw"):
        for value, m in big[kind]["sweep"].items():
            lines.append(f"| {kind} | {value} | {m['recall10']:.3f} | {m['p50']:.3f} | {m['p95']:.3f} |")
    if real:
        lines += [
            "",
            f"Real vectors: {real['n']:,} distinct raw Loghub messages embedded with the model, "
            f"{real['queries']} more held out as queries. recall@10 against exact search: "
            f"ivf ({real['ivf']['nlist']} lists, nprobe {vi.IVF_NPROBE}) **{real['ivf']['recall10']:.3f}**, "
            f"hnsw **{real['hnsw']['recall10']:.3f}**.",
        ]
    lines += [
        "",
        f"Model cost of a never-seen query template (fresh process; median of {args.model_runs} runs, seconds):",
        "",
        "| step | seconds |",
        "|---|---:|",
        f"| import hpcmem.kb.recall.embed + config + `model_spec` | {model['spec_s']:.3f} |",
        f"| import sentence_transformers (torch, transformers) | {model['import_s']:.2f} |",
        f"| load the model (hash check remembered) | {model['load_s']:.2f} |",
        f"| first encode of one query | {model['first_encode_s']:.3f} |",
        f"| later encodes of one query | {model['encode_s']:.3f} |",
        f"| **total, process start to first vector** | **{model['total_s']:.2f}** |",
        f"| SHA-256 of model.safetensors (first use only, then remembered) | {model['hash_s']:.2f} |",
        "",
        "A known template needs none of this: `query_vector` returns the stored or cached vector "
        "without importing torch (`tests/kb/recall/test_embed.py` checks `sys.modules` in a fresh process).",
        "",
    ]
    p95s = flat_p95s(rows, repeats)
    lines += [
        f"Exact search p95 (ms, one thread) in {len(repeats) + 1} separate processes - the main run and "
        f"{len(repeats)} repeats - as min / median / max:",
        "",
        "| N | " + " | ".join(f"{n:,}" for n in p95s) + " |",
        "|---|" + "---:|" * len(p95s),
        "| p95 | " + " | ".join(f"{min(v):.2f} / {statistics.median(v):.2f} / {max(v):.2f}" for v in p95s.values())
        + " |",
        "",
    ]
    lines += findings(rows, real, p95s)
    return "\n".join(lines)


def findings(rows: list[dict], real: dict | None, p95s: dict[int, list[float]]) -> list[str]:
    """The conclusions, each computed from the tables above."""
    from hpcmem.kb.recall import vector_index as vi

    flat_max, first_over = recommend(p95s)
    p95 = {n: max(values) for n, values in p95s.items()}
    big = rows[-1]
    approx = [r for r in rows if r["n"] >= 10_000] or rows
    ivf_min = min(r["ivf"]["recall10"] for r in approx)
    hnsw_min = min(r["hnsw"]["recall10"] for r in approx)
    build_ratio = big["hnsw"]["build_s"] / big["ivf"]["build_s"]
    slower_2t = sum(r[k]["p50_2"] > r[k]["p50_1"] for r in rows for k in KINDS)
    hnsw_best = max(m["recall10"] for m in big["hnsw"]["sweep"].values())
    load_wins = [r["n"] for r in rows if all(r[k]["load_s"] * 1000 > r[k]["p50_1"] for k in ("flat", "ivf"))]
    over = (f"; at {first_over:,} it reached {p95[first_over]:.2f} ms" if first_over else "")
    lines = [
        f"**Recommendation: `index.flat_max` = {flat_max:,}.** Principle: stay exact while one exact "
        f"search fits a {LATENCY_BUDGET_MS:g} ms budget at p95 on one thread, in every process measured: "
        f"the largest such size is {flat_max:,} (worst p95 {p95.get(flat_max, 0):.2f} ms){over}. "
        "Exact search also needs no training, builds instantly and has the smallest file.",
        "",
        f"**Approximate index: IVF.** From 10k vectors up, IVF's recall@10 was never below "
        f"{ivf_min:.3f} and HNSW's was as low as {hnsw_min:.3f}; at {big['n']:,} vectors HNSW took "
        f"{big['hnsw']['build_s']:.0f} s to build against IVF's {big['ivf']['build_s']:.0f} s "
        f"({build_ratio:.1f}x), and a rebuild runs inside whichever recall finds the index stale. Even at "
        f"efSearch {max(big['hnsw']['sweep'], key=int)} HNSW reached {hnsw_best:.3f} there, IVF at nprobe "
        f"{vi.IVF_NPROBE} {big['ivf']['recall10']:.3f}. IVF's single-query latency at nprobe "
        f"{vi.IVF_NPROBE} stays below {max(r['ivf']['p95_1'] for r in approx):.2f} ms (p95) at every size.",
    ]
    if ivf_min < hnsw_min or build_ratio < 1:
        lines[-1] += " **This run does not support choosing IVF over HNSW: re-examine the choice.**"
    if real:
        lines[-1] += (f" On the real message embeddings the order is the same "
                      f"(ivf {real['ivf']['recall10']:.3f}, hnsw {real['hnsw']['recall10']:.3f}).")
    lines += [
        "",
        f"**Threads.** Two OpenMP threads made a single query slower in {slower_2t} of {len(rows) * len(KINDS)} "
        "index/size pairs (p50 columns), so `SignatureIndex.search` runs fewer than "
        f"{vi.FEW_QUERIES} queries on one thread and restores the setting afterwards.",
        "",
        f"**Per recall process**, loading the file costs more than the search at sizes "
        f"{', '.join(f'{n:,}' for n in load_wins) or 'none'} (load vs p50 columns); at {big['n']:,} it is "
        f"{big['flat']['load_s'] * 1000:.0f} ms for flat and "
        f"{big['ivf']['load_s'] * 1000:.0f} ms for IVF. Memory-mapping would avoid most of it, but faiss "
        "aborts the process (an assertion, not an exception) on a later add to a mapped index, so the "
        "index is read normally.",
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,20000,30000,50000,100000,200000")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--model-runs", type=int, default=3)
    parser.add_argument("--flat-repeats", type=int, default=4, help="extra processes timing exact search")
    parser.add_argument("--no-real", action="store_true", help="skip embedding the real Loghub messages")
    parser.add_argument("--json", help="also save the raw measurements to this file")
    parser.add_argument("--from-json", help="render the report from saved measurements instead of measuring")
    parser.add_argument("--write", help=f"update the '{SECTION}' section of this markdown file")
    args = parser.parse_args()

    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        for key in ("sizes", "queries", "seed", "model_runs"):
            setattr(args, key, saved["args"][key])
        finish(args, saved["rows"], saved["flat_repeats"], saved["real"], saved["model_runs_raw"],
               saved["anchors"])
        return
    measure(args)


def measure(args: argparse.Namespace) -> None:
    import faiss

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("HPCMEM_HOME", str(Path(tmp) / "home"))
        anchors_path = Path(tmp) / "anchors.npy"
        anchors = anchor_texts()
        embed(anchors, anchors_path)
        print(f"{len(anchors)} anchor templates embedded", file=sys.stderr)
        rows = []
        for n in (int(s) for s in args.sizes.split(",")):
            row = run(SIZE_CHILD, str(anchors_path), str(n), str(args.queries), str(args.seed))
            row["faiss"] = faiss.__version__
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
        repeats = [run(FLAT_CHILD, str(anchors_path), args.sizes, str(args.queries), str(args.seed))
                   for _ in range(args.flat_repeats)]
        real = None
        if not args.no_real:
            real_path = Path(tmp) / "real.npy"
            embed(list(dict.fromkeys(r["Content"] for r in loghub_rows())), real_path)
            real = run(REAL_CHILD, str(real_path))
            print(json.dumps(real), file=sys.stderr)
        runs = [run(MODEL_CHILD) for _ in range(args.model_runs)]
    if args.json:
        Path(args.json).write_text(json.dumps({
            "args": {k: getattr(args, k) for k in ("sizes", "queries", "seed", "model_runs")},
            "rows": rows, "flat_repeats": repeats, "real": real, "model_runs_raw": runs,
            "anchors": len(anchors)}, indent=1))
    finish(args, rows, repeats, real, runs, len(anchors))


def finish(args: argparse.Namespace, rows: list[dict], repeats: list[dict], real: dict | None, runs: list[dict],
           anchors: int) -> None:
    model = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    text = report(rows, repeats, real, model, args, anchors)
    print(text)
    if args.write:
        from markdown_section import write_section

        write_section(Path(args.write), SECTION, text)


if __name__ == "__main__":
    main()
