"""Fit recall's scorer (kb/rules/recall_model.json) on the corpus's calibration part only.

    .venv/bin/python bench/fit_recall_model.py [--failures] [--out kb/rules/recall_model.json]

1. IDF weights: document frequencies of the masked excerpt words of every calibration text.
2. Lessons: one per known calibration class, recorded in a fresh store (recall_methods).
3. Every calibration query's candidates (``Recaller.candidates(exhaustive=True)``) give one
   row of features per candidate lesson, labelled 1 when the lesson is of the query's class.
4. Two L2-regularised logistic regressions (IRLS): ``full`` and ``lexical`` (no embeddings).
5. The match band's threshold maximises the calibration decision accuracy (right lesson first
   on recurrences, abstention where no lesson exists); related is half of it.

The held-out part is never loaded here. ``--failures`` prints the calibration queries the
fitted model gets wrong, for inspection.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recall_corpus import REPO, plan  # noqa: E402

OUT = REPO / "kb" / "rules" / "recall_model.json"
L2 = 1.0


def idf_table(texts: list[str]) -> dict:
    from hpcmem.kb.signatures import excerpt_template, words

    df: Counter = Counter()
    for text in texts:
        df.update(set(words(excerpt_template(text))))
    return {"documents": len(texts), "df": dict(sorted((w, n) for w, n in df.items() if n >= 2))}


def fit_logistic(rows: list[list[float]], labels: list[int], l2: float = L2) -> tuple[list[float], float]:
    """Newton-Raphson (IRLS) for L2-regularised logistic regression; the bias is not penalised."""
    import numpy as np

    X = np.hstack([np.asarray(rows, dtype=float), np.ones((len(rows), 1))])
    y = np.asarray(labels, dtype=float)
    w = np.zeros(X.shape[1])
    penalty = np.eye(X.shape[1]) * l2
    penalty[-1, -1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -40, 40)))
        grad = X.T @ (p - y) + penalty @ w
        hess = X.T @ (X * (p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return [round(float(v), 6) for v in w[:-1]], round(float(w[-1]), 6)


def decide(answers: dict[str, list[tuple[str, float]]], p, threshold: float) -> float:
    """Decision accuracy of answering with the top lesson when its probability >= threshold."""
    right = 0
    for q in p.recurrences:
        top = answers[q.id][0] if answers[q.id] else None
        right += top is not None and top[1] >= threshold and top[0] == q.cls
    for q in p.no_lesson:
        top = answers[q.id][0] if answers[q.id] else None
        right += top is None or top[1] < threshold
    return right / len(p.queries)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--failures", action="store_true", help="print misjudged calibration queries")
    args = ap.parse_args()

    from hpcmem.kb import scoring
    from hpcmem.kb.recall import RecallQuery
    from hpcmem.kb.scoring import FULL_FEATURES, LEXICAL_FEATURES, LinearModel, Probe
    from hpcmem.kb.signatures import fingerprint

    cal = plan("calibration")
    texts = [i.text for i, _ in cal.lessons] + [q.text for q in cal.queries]
    idf = idf_table(texts)
    zero = {"features": list(FULL_FEATURES), "weights": [0.0] * len(FULL_FEATURES), "bias": 0.0}
    provisional = {"idf": idf, "models": {"full": zero, "lexical": {**zero, "features": list(LEXICAL_FEATURES),
                                                                      "weights": [0.0] * len(LEXICAL_FEATURES)}},
                   "bands": {"match": 0.5, "related": 0.25}}
    tmp = Path(tempfile.mkdtemp()) / "provisional.json"
    tmp.write_text(json.dumps(provisional))

    from recall_methods import HpcmemStore

    store = HpcmemStore(cal, model_path=str(tmp))
    recaller = store.recaller()
    rows_full, rows_lex, labels, owners = [], [], [], []
    for q in cal.queries:
        full, _ = recaller.candidates(Probe.of(q.text, fingerprint(q.text)), RecallQuery(text=q.text), exhaustive=True)
        lexical, _ = recaller.candidates(Probe.of(q.text, fingerprint(q.text)), RecallQuery(text=q.text),
                                         exhaustive=True, lexical_only=True)
        lex_by_id = {c.lesson["id"]: c.evidence.features for c in lexical}
        for c in full:
            x_full = c.evidence.features
            if "emb_excerpt" not in x_full:
                raise SystemExit("no vectors: the fit needs the ml extra and the model")
            rows_full.append([x_full[f] for f in FULL_FEATURES])
            rows_lex.append([lex_by_id[c.lesson["id"]][f] for f in LEXICAL_FEATURES])
            labels.append(int(store.lesson_class[c.lesson["id"]] == q.cls))
            owners.append((q.id, store.lesson_class[c.lesson["id"]]))
    recaller.close()
    w_full, b_full = fit_logistic(rows_full, labels)
    w_lex, b_lex = fit_logistic(rows_lex, labels)

    fitted = LinearModel(FULL_FEATURES, tuple(w_full), b_full)
    answers: dict[str, list[tuple[str, float]]] = {q.id: [] for q in cal.queries}
    for (qid, cls), row in zip(owners, rows_full):
        answers[qid].append((cls, fitted.probability(dict(zip(FULL_FEATURES, row)))))
    for qid in answers:
        answers[qid].sort(key=lambda t: -t[1])
    cuts = [i / 100 for i in range(5, 96)]
    scored = [(decide(answers, cal, t), t) for t in cuts]
    best = max(s for s, _ in scored)
    winners = [t for s, t in scored if s == best]
    match = winners[len(winners) // 2]

    model = {
        "version": 1,
        "fitted_on": {
            "part": "calibration", "date": dt.date.today().isoformat(), "lessons": len(cal.lessons),
            "recurrences": len(cal.recurrences), "no_lesson": len(cal.no_lesson), "rows": len(labels),
            "positives": sum(labels), "calibration_decision_accuracy": round(best, 4), "l2": L2,
        },
        "idf": idf,
        "models": {
            "full": {"features": list(FULL_FEATURES), "weights": w_full, "bias": b_full},
            "lexical": {"features": list(LEXICAL_FEATURES), "weights": w_lex, "bias": b_lex},
        },
        "bands": {"match": match, "related": round(match / 2, 3)},
    }
    args.out.write_text(json.dumps(model, indent=1, sort_keys=False) + "\n")
    scoring.load_model.cache_clear()
    print(json.dumps({k: v for k, v in model.items() if k != "idf"}, indent=1))
    if args.failures:
        for q in cal.recurrences + cal.no_lesson:
            top = answers[q.id][0] if answers[q.id] else None
            ok = (top is not None and top[1] >= match and top[0] == q.cls) if q in cal.recurrences else (
                top is None or top[1] < match)
            if not ok:
                print(f"--- {q.id} class={q.cls} top={top}\n{q.text[:600]}\n")
    store.close()


if __name__ == "__main__":
    main()
