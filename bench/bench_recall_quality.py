"""Recall quality: does `hpcmem recall` return the right lesson, or abstain when none applies?

    .venv/bin/python bench/bench_recall_quality.py [--data data/samples/recall-dev]
        [--json results.json] [--write docs/benchmarks.md] [--failures]

Data: data/samples/recall-dev/ (see its README). Every pair's ``record_error`` becomes one
lesson in a fresh user store (``kb.record.record``, source "human") in a temporary
HPCMEM_HOME; the store's signatures are then embedded (``kb.embed.embed_missing_signatures``,
the step that gives recall its vectors). Every ``query_error`` - pairs and unknowns - is then
asked of three methods over the same lessons:

- hpcmem: ``kb.recall.Recaller`` (model loaded once), as configured, and with the vector
  threshold the dev split chooses; plus hpcmem without the model (exact + lexical only).
- BM25 (bm25s) over the raw record_error texts.
- raw embeddings: the same MiniLM model on the raw record_error / query_error texts, cosine.

Each method returns at most ``LIMIT`` stored lessons (built-in advice is not a stored lesson
and is not counted). Abstained = no stored lesson returned. A baseline returns the documents
scoring at or above its threshold, calibrated on the dev split (the threshold maximising the
correct decision rate there). hpcmem is run once with the vector threshold at -1 and its
vector matches are then filtered per threshold - what recall itself does, checked against a
real run at the configured threshold. Metrics are reported on the test split.

The category and decisive-token gates this script once prototyped (``gate``) are now part
of kb/recall.py (``same_fix_class``); ``--prototypes`` still prints the re-gated rows, which
must now equal hpcmem's own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

SECTION = "## Recall quality"
DATA = REPO / "data" / "samples" / "recall-dev"
LIMIT = 5  # what `hpcmem recall` shows by default
SWEEP = (0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


# ----------------------------------------------------------------------------- data


@dataclass
class Query:
    id: str
    text: str
    split: str
    expected: str | None  # the pair id whose lesson is right; None for an unknown failure
    variant: str | None = None


@dataclass
class Ranked:
    """One method's answer to one query: stored lessons (pair ids), best first, with scores."""

    hits: list[tuple[str, float]]
    kinds: list[str] = field(default_factory=list)  # hpcmem only: match_kind per hit

    def above(self, threshold: float, gated: set[str] | None = None) -> "Ranked":
        """Hits that pass the threshold (only hits of a ``gated`` kind are tested), top LIMIT."""
        keep = [i for i, (_, score) in enumerate(self.hits)
                if score >= threshold or (gated is not None and self.kinds[i] not in gated)]
        keep = keep[:LIMIT]
        return Ranked([self.hits[i] for i in keep], [self.kinds[i] for i in keep] if self.kinds else [])


def load(data: Path) -> tuple[list[dict], list[Query]]:
    pairs = [json.loads(line) for line in (data / "pairs.jsonl").read_text().splitlines() if line.strip()]
    unknown = [json.loads(line) for line in (data / "unknown.jsonl").read_text().splitlines() if line.strip()]
    queries = [Query(p["id"], p["query_error"], p["split"], p["id"], p["variant"]) for p in pairs]
    queries += [Query(u["id"], u["query_error"], u["split"], None) for u in unknown]
    return pairs, queries


# ----------------------------------------------------------------------------- metrics


def metrics(queries: list[Query], answers: dict[str, Ranked]) -> dict[str, float]:
    pairs = [q for q in queries if q.expected]
    unknown = [q for q in queries if not q.expected]
    top1 = sum(1 for q in pairs if answers[q.id].hits and answers[q.id].hits[0][0] == q.expected)
    rr = []
    for q in pairs:
        ids = [pid for pid, _ in answers[q.id].hits]
        rr.append(1.0 / (ids.index(q.expected) + 1) if q.expected in ids else 0.0)
    abstained = [q for q in queries if not answers[q.id].hits]
    abstained_unknown = sum(1 for q in abstained if not q.expected)
    correct = top1 + abstained_unknown
    wrong = sum(1 for q in pairs if answers[q.id].hits and answers[q.id].hits[0][0] != q.expected)
    wrong += sum(1 for q in unknown if answers[q.id].hits)
    return {
        "top1": top1 / len(pairs) if pairs else 0.0,
        "mrr": sum(rr) / len(rr) if rr else 0.0,
        "abstain_precision": abstained_unknown / len(abstained) if abstained else 1.0,
        "abstain_recall": abstained_unknown / len(unknown) if unknown else 1.0,
        "correct_decision_rate": correct / len(queries) if queries else 0.0,
        "confidently_wrong": wrong / len(queries) if queries else 0.0,
        "pairs": len(pairs),
        "unknown": len(unknown),
    }


def calibrate(queries: list[Query], answer_at: Callable[[str, float], Ranked], scores: list[float]) -> float:
    """The threshold with the best correct decision rate on ``queries`` (middle of the best run).

    ``answer_at(query_id, threshold)`` is what a method shows at that threshold.
    """
    values = sorted(set(scores))
    cuts = [values[0] - 1e-3] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1] + 1e-3]
    rates = [metrics(queries, {q.id: answer_at(q.id, c) for q in queries})["correct_decision_rate"] for c in cuts]
    best = max(rates)
    winners = [c for c, r in zip(cuts, rates) if r == best]
    return round(winners[len(winners) // 2], 4)


# ----------------------------------------------------------------------------- methods


def run_hpcmem(pairs: list[dict], queries: list[Query], home: Path) -> dict:
    """Record the lessons, embed them, and recall every query (model loaded once)."""
    os.environ["HPCMEM_HOME"] = str(home)
    os.environ["HPCMEM_DISABLE_LOCAL_CONFIG"] = "1"
    from hpcmem.kb.config import load_config
    from hpcmem.kb.embed import Embedder, embed_missing_signatures, model_spec
    from hpcmem.kb.recall import Recaller, RecallQuery
    from hpcmem.kb.record import record
    from hpcmem.kb.stack import StoreStack

    config = load_config()
    stack = StoreStack.from_config(config)
    lesson_pair: dict[str, str] = {}
    t0 = time.perf_counter()
    for p in pairs:
        lesson = record(stack, cause=p["cause"], fix=p["fix"], author="bench", source="human",
                        error_text=p["record_error"])
        lesson_pair[lesson["lesson_id"]] = p["id"]
    record_s = time.perf_counter() - t0
    embedder = Embedder(model_spec(config))
    t0 = time.perf_counter()
    embedded = embed_missing_signatures(stack.user, embedder)
    embed_s = time.perf_counter() - t0

    def ask(recaller, limit: int) -> tuple[dict[str, Ranked], dict[str, dict]]:
        ranked, raw = {}, {}
        for q in queries:
            result = recaller.recall(RecallQuery(text=q.text, limit=limit))
            stored = [m for m in result["matches"] if m["lesson_id"] is not None]
            # Advice takes a slot of the shown list; keep it in the order so LIMIT cuts the same way.
            ranked[q.id] = Ranked([(lesson_pair.get(m["lesson_id"], "?") if m["lesson_id"] else "<advice>",
                                    m["similarity"]) for m in result["matches"]],
                                  [m["match_kind"] for m in result["matches"]])
            raw[q.id] = {"template": result["query"]["template"], "category": result["query"]["category"],
                         "stages": result["stages"], "warnings": result["warnings"],
                         "stored": [(lesson_pair.get(m["lesson_id"], "?"), m["match_kind"], m["similarity"],
                                     m["score"]) for m in stored]}
        return ranked, raw

    # First, before any query vector is cached: without the model only exact and lexical can match.
    no_model = Recaller(stack, config, allow_model=False)
    plain, _ = ask(no_model, LIMIT)
    no_model.close()
    recaller = Recaller(stack, config, allow_model=True, embedder_factory=lambda: embedder)
    configured = recaller.min_similarity["vector"]
    t0 = time.perf_counter()
    checked, _ = ask(recaller, LIMIT)  # exactly as configured: the reference for the sweep
    recall_s = (time.perf_counter() - t0) / len(queries)
    recaller.min_similarity["vector"] = -1.0
    swept, raw = ask(recaller, 50)
    recaller.close()
    for q in queries:  # the post-hoc filter must reproduce the configured run
        assert strip_advice(swept[q.id].above(configured, {"vector"})).hits == strip_advice(checked[q.id]).hits, q.id

    stack.dispose()
    return {"swept": swept, "raw": raw, "configured": configured, "no_model": plain, "embedder": embedder,
            "timing": {"record_s": record_s, "embed_s": embed_s, "embedded": embedded,
                       "recall_ms": recall_s * 1000}}


def strip_advice(r: Ranked) -> Ranked:
    keep = [i for i, (pid, _) in enumerate(r.hits) if pid != "<advice>"]
    return Ranked([r.hits[i] for i in keep], [r.kinds[i] for i in keep] if r.kinds else [])


def run_bm25(pairs: list[dict], queries: list[Query]) -> dict[str, Ranked]:
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([p["record_error"] for p in pairs], stopwords="en", show_progress=False),
                    show_progress=False)
    tokens = bm25s.tokenize([q.text for q in queries], stopwords="en", show_progress=False)
    docs, scores = retriever.retrieve(tokens, k=len(pairs), show_progress=False, n_threads=1)
    return {q.id: Ranked([(pairs[int(d)]["id"], float(s)) for d, s in zip(docs[i], scores[i]) if s > 0])
            for i, q in enumerate(queries)}


def run_raw_embedding(pairs: list[dict], queries: list[Query], embedder) -> dict[str, Ranked]:
    import numpy as np

    docs = embedder.encode([p["record_error"] for p in pairs])
    asked = embedder.encode([q.text for q in queries])
    sims = asked @ docs.T  # normalised vectors: cosine
    out = {}
    for i, q in enumerate(queries):
        order = np.argsort(-sims[i], kind="stable")
        out[q.id] = Ranked([(pairs[j]["id"], float(sims[i, j])) for j in order])
    return out


# ----------------------------------------------------------------------------- prototype gates
# NOT hpcmem behaviour: what two proposed changes to kb/recall.py would do, applied to the
# vector matches hpcmem returned. (1) category gate: a neighbour filed under another failure
# class is dropped (today it only loses 15%). (2) decisive-token gate: a neighbour whose
# fix-deciding tokens (soname, symbol version, module/version, CUDA arch, header, and the
# tokens its rule keeps: Python module, command, partition, symbol) are not all in the
# query's template is dropped - libcudnn.so.8 is not libcudnn.so.9, torch is not torchvision.

_DECISIVE = [re.compile(p) for p in (
    r"(?<![\w+.-])[\w+-][\w+.-]*\.so(?:\.\d+)*(?![\w.])",
    r"\b[A-Z][A-Z0-9]*_\d+(?:\.\d+)+\b",
    r"(?<![\w/.:@-])[A-Za-z][\w.+-]*/\d[\w.+-]*(?![\w/])",
    r"\b(?:sm|compute|lto)_\d+[a-z]?\b",
    r"\b[\w+-]+\.(?:h|hh|hpp|hxx|cuh)\b",
)]
_WORD = re.compile(r"[A-Za-z0-9_+-]+")


def decisive_words(template: str, category: str) -> set[str]:
    from hpcmem.kb.signatures import load_rules

    found = [m.group(0) for regex in _DECISIVE for m in regex.finditer(template)]
    for rule in load_rules():
        if rule.category == category:
            for regex in rule.keep:
                for m in regex.finditer(template):
                    found += [v for v in m.groupdict().values() if v] if regex.groupindex else [m.group(0)]
    return {w.lower() for token in found for w in _WORD.findall(token)}


def gate(r: Ranked, query: dict, lessons: dict[str, tuple[str, str]], *, tokens: bool) -> Ranked:
    """``r`` without the vector/lexical matches the proposed gates would drop."""
    words = {w.lower() for w in _WORD.findall(query["template"])}
    keep = []
    for i, (pid, _) in enumerate(r.hits):
        if r.kinds[i] in ("vector", "lexical"):
            template, category = lessons[pid]
            if category != query["category"] and query["category"] != "unknown":
                continue
            if tokens and not decisive_words(template, category) <= words:
                continue
        keep.append(i)
    return Ranked([r.hits[i] for i in keep], [r.kinds[i] for i in keep])


# ----------------------------------------------------------------------------- report


def top_scores(queries: list[Query], ranked: dict[str, Ranked]) -> list[float]:
    return [ranked[q.id].hits[0][1] for q in queries if ranked[q.id].hits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", help="also write the figures and every hpcmem answer to this file")
    parser.add_argument("--write", help=f"update the '{SECTION}' section of this markdown file")
    parser.add_argument("--prototypes", action="store_true", help="also print hpcmem's answers re-gated by the prototype gates")
    parser.add_argument("--failures", action="store_true", help="print every wrong decision of hpcmem as configured")
    args = parser.parse_args()

    pairs, queries = load(args.data)
    with tempfile.TemporaryDirectory(prefix="hpcmem-recall-bench-") as tmp:
        os.chmod(tmp, 0o700)
        hp = run_hpcmem(pairs, queries, Path(tmp))
    bm25 = run_bm25(pairs, queries)
    raw = run_raw_embedding(pairs, queries, hp["embedder"])
    ev = evaluate(pairs, queries, hp, bm25, raw, prototypes=args.prototypes)

    report = render(pairs, queries, hp, ev)
    print(report)
    if args.failures:
        print("\nhpcmem (configured) wrong decisions, all splits:")
        print("\n".join(failure_lines(queries, ev["answers"][ev["configured"]], hp["raw"])))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "results": ev["results"], "thresholds": ev["thresholds"], "sweep": ev["sweep"],
            "timing": hp["timing"], "hpcmem_answers": hp["raw"]}, indent=1))
    if args.write:
        from bench_ingest import write_section

        write_section(Path(args.write), SECTION, report)


def evaluate(pairs, queries, hp, bm25, raw, prototypes: bool = False) -> dict:
    """Calibrate every method on dev, then score all of them on each split."""
    from hpcmem.kb.redact import redact_text
    from hpcmem.kb.signatures import fingerprint

    dev = [q for q in queries if q.split == "dev"]
    test = [q for q in queries if q.split == "test"]
    swept, configured = hp["swept"], hp["configured"]
    lessons = {p["id"]: (sig.template, sig.category) for p in pairs
               for sig in [fingerprint(redact_text(p["record_error"]))]}

    def hpcmem_at(qid: str, threshold: float) -> Ranked:
        return strip_advice(swept[qid].above(threshold, {"vector"}))

    def gated_at(tokens: bool) -> Callable[[str, float], Ranked]:
        return lambda qid, t: strip_advice(gate(swept[qid], hp["raw"][qid], lessons, tokens=tokens)
                                           .above(t, {"vector"}))

    # hpcmem's candidate thresholds: the vector similarities seen on dev (exact/lexical are not gated)
    sims = [s for q in dev for (_, s), k in zip(swept[q.id].hits, swept[q.id].kinds) if k == "vector"]
    sims.append(configured)
    chosen = calibrate(dev, hpcmem_at, sims)
    proto = {"category gate": gated_at(False), "category + decisive-token gates": gated_at(True)}
    proto_t = {name: calibrate(dev, fn, sims) for name, fn in proto.items()}
    bm25_t = calibrate(dev, lambda qid, t: bm25[qid].above(t), top_scores(dev, bm25))
    raw_t = calibrate(dev, lambda qid, t: raw[qid].above(t), top_scores(dev, raw))

    names = {"configured": f"hpcmem, configured (vector >= {configured:g})",
             "calibrated": f"hpcmem, dev-calibrated (vector >= {chosen:g})"}
    answers = {
        names["configured"]: {q.id: hpcmem_at(q.id, configured) for q in queries},
        names["calibrated"]: {q.id: hpcmem_at(q.id, chosen) for q in queries},
        "hpcmem without the model (exact + lexical)": {q.id: strip_advice(hp["no_model"][q.id]) for q in queries},
        f"BM25 on raw text (score >= {bm25_t:g})": {q.id: bm25[q.id].above(bm25_t) for q in queries},
        f"raw-text embedding, cosine (>= {raw_t:g})": {q.id: raw[q.id].above(raw_t) for q in queries},
    }
    for name, fn in proto.items() if prototypes else ():
        answers[f"prototype, not hpcmem: {name} (vector >= {proto_t[name]:g})"] = {
            q.id: fn(q.id, proto_t[name]) for q in queries}
    results = {name: {"test": metrics(test, a), "dev": metrics(dev, a), "all": metrics(queries, a)}
               for name, a in answers.items()}
    sweep = []
    for t in SWEEP:
        row = {"threshold": t}
        for label, fn in (("hpcmem", hpcmem_at), ("gated", proto["category + decisive-token gates"])):
            for split, qs in (("dev", dev), ("test", test)):
                row[f"{label}_{split}"] = metrics(qs, {q.id: fn(q.id, t) for q in qs})
        sweep.append(row)
    return {
        "answers": answers, "results": results, "sweep": sweep, **names,
        "thresholds": {"configured": configured, "dev_calibrated": chosen, "bm25": bm25_t,
                       "raw_embedding": raw_t, "prototypes": proto_t},
        "breakdown": failure_breakdown(queries, answers[names["calibrated"]], hp["raw"], lessons),
    }


def failure_breakdown(queries, answers, raw, lessons) -> dict[str, list[str]]:
    """Every wrong decision of one hpcmem run, grouped by why it happened."""
    groups: dict[str, list[str]] = defaultdict(list)
    for q in queries:
        a = answers[q.id]
        if not a.hits:
            if q.expected:
                groups["pair abstained on: its lesson's similarity is below the threshold"].append(q.id)
            continue
        pid, sim = a.hits[0]
        if pid == q.expected:
            continue
        label = f"{q.id} -> {pid} ({a.kinds[0]} {sim:.2f})"
        query, (template, category) = raw[q.id], lessons[pid]
        if q.expected:
            groups["pair answered with another lesson"].append(label)
        elif a.kinds[0] == "exact":
            groups["exact fingerprint match on a lesson that does not apply"].append(label)
        elif category != query["category"]:
            groups["neighbour filed under another failure class"].append(label)
        elif not decisive_words(template, category) <= {w.lower() for w in _WORD.findall(query["template"])}:
            groups["same class, but a fix-deciding token differs"].append(label)
        else:
            groups["same class and tokens, only the message differs"].append(label)
    return groups


def render(pairs, queries, hp, ev) -> str:
    test = [q for q in queries if q.split == "test"]
    n_test_pairs = sum(1 for q in test if q.expected)
    shown = {"configured": ev["answers"][ev["configured"]], "calibrated": ev["answers"][ev["calibrated"]]}
    lines = [
        SECTION,
        "",
        f"Data: `data/samples/recall-dev/` - {len(pairs)} recorded lessons over "
        f"{len({p['class'] for p in pairs})} failure classes (1-4 lessons per class, with different fixes) and "
        f"{len(queries) - len(pairs)} unknown failures (classes with no lesson, and hard negatives that look like a "
        f"recorded lesson but need another fix). Test split: {n_test_pairs} pairs + {len(test) - n_test_pairs} "
        "unknowns; every threshold is calibrated on the dev split (best correct-decision rate). All methods "
        f"see the same lessons and return at most {LIMIT}; abstained = no stored lesson returned (built-in "
        "advice is not counted). Correct decision = a pair answered with its lesson first, or an unknown "
        "abstained on; confidently wrong = a wrong lesson first.",
        "",
        "| method | top-1 | MRR | abstain precision | abstain recall | correct decisions | confidently wrong "
        "| correct decisions, dev / all |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in ev["results"].items():
        m = r["test"]
        lines.append(f"| {name} | {m['top1']:.3f} | {m['mrr']:.3f} | {m['abstain_precision']:.3f} | "
                     f"{m['abstain_recall']:.3f} | {m['correct_decision_rate']:.3f} | {m['confidently_wrong']:.3f} | "
                     f"{r['dev']['correct_decision_rate']:.3f} / {r['all']['correct_decision_rate']:.3f} |")
    lines += ["", "hpcmem top-1 accuracy by how the query differs from the recorded error (test / all splits):", "",
              "| variant | configured | dev-calibrated |", "|---|---:|---:|"]
    for variant in ("ids", "wording", "noise"):
        cells = []
        for answers in shown.values():
            counts = []
            for subset in (test, queries):
                qs = [q for q in subset if q.variant == variant]
                ok = sum(1 for q in qs if answers[q.id].hits and answers[q.id].hits[0][0] == q.expected)
                counts.append(f"{ok}/{len(qs)}")
            cells.append(" / ".join(counts))
        lines.append(f"| {variant} | {cells[0]} | {cells[1]} |")
    lines += ["", "hpcmem by the match kind of the first stored lesson, all splits (pairs answered / right / "
              "unknowns answered):", "", "| match kind | configured | dev-calibrated |", "|---|---:|---:|"]
    for kind in ("exact", "vector", "lexical"):
        cells = []
        for answers in shown.values():
            firsts = [(q, answers[q.id]) for q in queries if answers[q.id].hits and answers[q.id].kinds[0] == kind]
            cells.append(f"{sum(1 for q, _ in firsts if q.expected)} / "
                         f"{sum(1 for q, a in firsts if a.hits[0][0] == q.expected)} / "
                         f"{sum(1 for q, _ in firsts if not q.expected)}")
        lines.append(f"| {kind} | {cells[0]} | {cells[1]} |")
    lines += ["", "Vector threshold sweep: correct decisions dev / test, and top-1 and abstain recall on test, "
              "for hpcmem and for hpcmem with both prototype gates:", "",
              "| vector >= | hpcmem | top-1 | abstain recall | with gates | top-1 | abstain recall |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in ev["sweep"]:
        h, g = (row["hpcmem_dev"], row["hpcmem_test"]), (row["gated_dev"], row["gated_test"])
        lines.append(f"| {row['threshold']:g} | {h[0]['correct_decision_rate']:.3f} / "
                     f"{h[1]['correct_decision_rate']:.3f} | {h[1]['top1']:.3f} | {h[1]['abstain_recall']:.3f} | "
                     f"{g[0]['correct_decision_rate']:.3f} / {g[1]['correct_decision_rate']:.3f} | "
                     f"{g[1]['top1']:.3f} | {g[1]['abstain_recall']:.3f} |")
    lines += ["", f"Wrong decisions of {ev['calibrated']}, all splits, by cause:", ""]
    for cause, items in ev["breakdown"].items():
        lines.append(f"- {cause} ({len(items)}): " + "; ".join(f"`{item}`" for item in items))
    timing = hp["timing"]
    lines += ["",
              f"Recording {len(pairs)} lessons: {timing['record_s']:.1f} s; embedding their {timing['embedded']} "
              f"signatures: {timing['embed_s']:.1f} s; recall: {timing['recall_ms']:.0f} ms per query (model "
              "loaded, one process).",
              "",
              "Reproduce: `.venv/bin/python bench/bench_recall_quality.py --failures --write docs/benchmarks.md`",
              ""]
    return "\n".join(lines)


def failure_lines(queries, hp_answers, raw) -> list[str]:
    out = []
    for q in queries:
        a = hp_answers[q.id]
        got = a.hits[0][0] if a.hits else None
        if got == q.expected:
            continue
        seen = raw[q.id]
        top = ", ".join(f"{pid} {kind} {sim:.3f}" for pid, kind, sim, _ in seen["stored"][:3]) or "nothing"
        verdict = "abstained" if got is None else f"answered {got}"
        out.append(f"- [{q.split}] {q.id} ({q.variant or 'unknown'}): {verdict}; "
                   f"template {seen['category']}: {seen['template']!r}; candidates: {top}")
    return out


if __name__ == "__main__":
    main()
