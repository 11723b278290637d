"""Is recall's ``probability`` calibrated as a user reads it? Reliability on the calibration part.

    .venv/bin/python bench/recall_reliability.py [--seeds 6] [--json out.json] [--dump PREFIX]

Fold-honest cross-validated predictions (``cv_predictions``): family-grouped 5-fold CV as in
``fit_recall_model.py --cv`` - every query's candidates are scored by a logistic fitted on
the other four folds' queries, with the IDF table of those folds' texts alone, and the
match threshold is chosen on those folds too (related is half of it). A candidate is
*shown* when it is in the match or related band of its fold's thresholds, at most five per
query as ``recall`` shows them; *top* is each query's most probable shown candidate. A
candidate applies when its lesson is of the query's class (never, on no-lesson queries).

Reliability of the shown candidates and of the top ones, before and after the monotone
recalibration (``recalibration`` in recall_model.json, see kb/scoring.py: sigmoid(scale * z +
shift + leader * [highest logit of its query]), fitted here by ``recalibration_from``): bins of the
probability, count, mean probability, empirical rate, and the expected calibration error
(ECE: the count-weighted mean of |mean probability - rate| over the bins). "After" is
cross-fitted: each fold's candidates are mapped by a recalibration fitted on the other
folds' CV predictions only (those predictions come from models that saw this fold: a small
leak). Counts are pooled over the fold assignments (each query once per assignment).
Calibration part only; the held-out part is never loaded. About 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SHOWN = 5  # recall's default --limit
BINS = 10


def cv_predictions(data, features: tuple[str, ...], which: int, seeds: int = 6, folds: int = 5) -> list[dict]:
    """Per fold assignment: one dict per candidate of every calibration query, with its CV
    logit ``z``, probability ``p``, label ``y``, the query's fold, the fold's thresholds
    (``match``, ``related``), and whether the lesson's fix names a differing token."""
    from fit_recall_model import best_threshold, design, fit_logistic, fold_rows, rank
    from hpcmem.kb.scoring import LinearModel

    queries = data.plan.queries
    recurrent = {q.id for q in data.plan.recurrences}
    families = sorted(set(data.family.values()))
    out = []
    for seed in range(seeds):
        order = families[:]
        random.Random(seed).shuffle(order)
        fold_of = {f: i % folds for i, f in enumerate(order)}
        rows_out = []
        for k in range(folds):
            train = [q for q in queries if fold_of[data.family[q.id]] != k]
            test = [q for q in queries if fold_of[data.family[q.id]] == k]
            collected = fold_rows(data, {f for f in families if fold_of[f] != k})
            rows, labels, owners = design(data, [q.id for q in train], features, which, collected)
            w, b = fit_logistic(rows, labels)
            model = LinearModel(features, tuple(w), b)
            _, t = best_threshold(rank(owners, [model.probability(dict(zip(features, r))) for r in rows]),
                                  train, recurrent)
            rows, labels, owners = design(data, [q.id for q in test], features, which, collected)
            for r, y, (qid, cls, blocked) in zip(rows, labels, owners):
                z = b + sum(wi * xi for wi, xi in zip(w, r))
                rows_out.append({"qid": qid, "cls": cls, "z": z, "p": model.probability(dict(zip(features, r))),
                                 "y": y, "fold": k, "match": t, "related": round(t / 2, 3), "blocked": blocked})
        out.append({"seed": seed, "rows": rows_out})
    return out


def shown_and_top(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The candidates recall would show (match or related band, at most SHOWN per query, by
    probability) and each query's top shown candidate."""
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(r["qid"], []).append(r)
    shown, top = [], []
    for hits in by_q.values():
        hits = sorted(hits, key=lambda r: -r["z"])
        # recall puts match-band lessons first (a blocked one is at most related)
        seen = [r for r in hits if r["p"] >= r["related"]]
        seen.sort(key=lambda r: (not (r["p"] >= r["match"] and not r["blocked"]), -r["z"]))
        seen = seen[:SHOWN]
        shown += seen
        if seen:
            top.append(seen[0])
    return shown, top


def reliability(pairs: list[tuple[float, int]], bins: int = BINS) -> dict:
    table = []
    ece = 0.0
    n = len(pairs)
    for i in range(bins):
        lo, hi = i / bins, (i + 1) / bins
        inside = [(p, y) for p, y in pairs if lo <= p < hi or (i == bins - 1 and p == 1.0)]
        if not inside:
            table.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": 0})
            continue
        mean_p = sum(p for p, _ in inside) / len(inside)
        rate = sum(y for _, y in inside) / len(inside)
        ece += len(inside) / n * abs(mean_p - rate)
        table.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": len(inside), "mean_p": round(mean_p, 3),
                      "rate": round(rate, 3)})
    return {"n": n, "mean_p": round(sum(p for p, _ in pairs) / max(1, n), 3),
            "rate": round(sum(y for _, y in pairs) / max(1, n), 3), "ece": round(ece, 4), "bins": table}


def leaders(rows: list[dict]) -> set[int]:
    """Indices of the rows that lead their query: the highest logit among its candidates
    (ties all lead), as ``kb.scoring.judge`` marks them."""
    best: dict[str, float] = {}
    for r in rows:
        best[r["qid"]] = max(best.get(r["qid"], -math.inf), r["z"])
    return {i for i, r in enumerate(rows) if r["z"] >= best[r["qid"]]}


def design_rows(rows: list[dict]) -> list[tuple[float, bool, int]]:
    """(logit, leads its query, label) of the shown candidates: what the map is fitted on."""
    lead = leaders(rows)
    shown_ids = {id(r) for r in shown_and_top(rows)[0]}
    return [(r["z"], i in lead, r["y"]) for i, r in enumerate(rows) if id(r) in shown_ids]


def fit_recalibration(data: list[tuple[float, bool, int]], l2: float = 1e-3) -> dict:
    """p = sigmoid(scale * z + shift + leader * [the candidate leads its query]), fitted by
    Newton's method on (logit, leads, label); ``l2`` pulls towards the identity map."""
    import numpy as np

    X = np.array([[z, 1.0, float(lead)] for z, lead, _ in data])
    y = np.array([float(lab) for _, _, lab in data])
    prior = np.array([1.0, 0.0, 0.0])
    w = prior.copy()
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -40, 40)))
        grad = X.T @ (p - y) + l2 * (w - prior)
        hess = X.T @ (X * (p * (1 - p))[:, None]) + l2 * np.eye(3)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    if w[0] <= 0 or w[2] < 0:
        raise SystemExit(f"recalibration not monotone: {w}")
    return {"scale": round(float(w[0]), 6), "shift": round(float(w[1]), 6), "leader": round(float(w[2]), 6)}


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, v))))


def mapped(m: dict, z: float, lead: bool) -> float:
    return sigmoid(m["scale"] * z + m["shift"] + (m["leader"] if lead else 0.0))


def recalibration_from(preds: list[dict]) -> dict:
    """The map fitted on every fold assignment's CV predictions (what recall_model.json stores)."""
    return fit_recalibration([d for run in preds for d in design_rows(run["rows"])])


def report(preds: list[dict]) -> dict:
    """Reliability (pooled over fold assignments) before, and after a cross-fitted map: each
    fold's candidates are mapped by a map fitted on the other folds' CV predictions only."""
    before_shown, before_top, after_shown, after_top = [], [], [], []
    for run in preds:
        rows = run["rows"]
        shown, top = shown_and_top(rows)
        lead = {id(rows[i]) for i in leaders(rows)}
        before_shown += [(r["p"], r["y"]) for r in shown]
        before_top += [(r["p"], r["y"]) for r in top]
        for k in sorted({r["fold"] for r in rows}):
            m = fit_recalibration(design_rows([r for r in rows if r["fold"] != k]))
            after_shown += [(mapped(m, r["z"], id(r) in lead), r["y"]) for r in shown if r["fold"] == k]
            after_top += [(mapped(m, r["z"], id(r) in lead), r["y"]) for r in top if r["fold"] == k]
    return {"before": {"shown": reliability(before_shown), "top": reliability(before_top)},
            "after_cross_fitted": {"shown": reliability(after_shown), "top": reliability(after_top)}}


def print_table(name: str, rel: dict) -> None:
    print(f"  {name}: n={rel['n']} mean_p={rel['mean_p']} rate={rel['rate']} ECE={rel['ece']}")
    for b in rel["bins"]:
        if b["n"]:
            print(f"    {b['bin']}  n={b['n']:5d}  mean_p={b['mean_p']:.3f}  rate={b['rate']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dump", help="write the CV predictions to DUMP.full.json / DUMP.lexical.json")
    args = ap.parse_args()

    from fit_recall_model import collect
    from hpcmem.kb.scoring import FULL_FEATURES, LEXICAL_FEATURES
    from recall_corpus import plan

    data = collect(plan("calibration"))
    try:
        result = {}
        for name, features, which in (("full", FULL_FEATURES, 0), ("lexical", LEXICAL_FEATURES, 1)):
            preds = cv_predictions(data, features, which, args.seeds)
            if args.dump:
                Path(f"{args.dump}.{name}.json").write_text(json.dumps(preds))
            m = recalibration_from(preds)
            result[name] = {"recalibration": m, **report(preds)}
            print(f"== {name} model (CV, {args.seeds} fold assignments pooled); map on all CV predictions: {m}")
            for when in ("before", "after_cross_fitted"):
                print(f" {when}")
                print_table("shown", result[name][when]["shown"])
                print_table("top", result[name][when]["top"])
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
    finally:
        data.close()


if __name__ == "__main__":
    main()
