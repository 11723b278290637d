"""Scorer experiments on the calibration part: changes to recall's scorer against the shipped
fit, all judged by the same fold-honest, family-grouped CV (``fit_recall_model.cross_validate``:
5 folds, 6 fold assignments, each fold's IDF table from its training folds only).

    .venv/bin/python bench/experiments/scorer_experiments.py [--only NAME ...] [--write docs/benchmarks.md]

- ``gbm``: monotone gradient boosting (scikit-learn, each feature held to the logistic's sign)
  instead of the logistic regression;
- ``rotations``: more training rows from the same texts: other plans of the calibration part,
  where another instance is each class's lesson and other classes have lessons (the test fold
  is still judged in the shipped plan);
- ``lines``: line-alignment embedding features: each query line's best cosine to a lesson
  line and back (``line_q_cov``, ``line_l_cov``: means; ``line_best``, ``line_q_min``),
  MiniLM on the masked excerpt lines;
- ``small``: simulated small stores (``fit_recall_model.py --small-stores``).

The held-out part is never loaded. Runtime about 15 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/: the corpus, methods and fit it reuses
sys.path.insert(0, str(HERE))

import fit_recall_model as fit  # noqa: E402
import recall_corpus as corpus  # noqa: E402

SECTION = "## Scorer experiments (calibration)"
EXPERIMENTS = ("gbm", "rotations", "lines", "small")
GBM_SETTINGS = (
    dict(max_iter=100, max_depth=3, learning_rate=0.05, min_samples_leaf=20),
    dict(max_iter=200, max_depth=2, learning_rate=0.05, min_samples_leaf=20),
    dict(max_iter=100, max_depth=3, learning_rate=0.1, min_samples_leaf=40, l2_regularization=1.0),
    dict(max_iter=300, max_depth=2, learning_rate=0.03, min_samples_leaf=30),
)
LINE_FEATURES = (("line_q_cov",), ("line_l_cov",), ("line_q_cov", "line_l_cov"),
                 ("line_q_cov", "line_l_cov", "line_best", "line_q_min"))
LINES_PER_TEXT = 12


def gbm_scorer(settings: dict):
    def scorer(rows, labels, features):
        from sklearn.ensemble import HistGradientBoostingClassifier

        model = HistGradientBoostingClassifier(monotonic_cst=[fit.sign_of(f) for f in features], **settings)
        model.fit(rows, labels)
        return lambda batch: list(model.predict_proba(batch)[:, 1])
    return scorer


def line_features(data: fit.Collected):
    """transform: adds the line-alignment features to every (query, lesson) row."""
    import numpy as np

    from hpcmem.kb.signatures.fingerprint import excerpt_template

    def lines(text: str) -> list[str]:
        return list(dict.fromkeys(l for l in excerpt_template(text).split("\n") if l.strip()))[-LINES_PER_TEXT:]

    texts = {q.id: q.text for q in data.plan.queries}
    lesson_text = {c.name: i.text for i, c in data.plan.lessons}
    unique = sorted({l for t in [*texts.values(), *lesson_text.values()] for l in lines(t)})
    vectors = np.asarray(data.embedder.encode(unique), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-9
    index = dict(zip(unique, vectors))

    def matrix(text: str):
        got = lines(text)
        return np.stack([index[l] for l in got]) if got else np.zeros((1, vectors.shape[1]), dtype=np.float32)

    q_m = {k: matrix(t) for k, t in texts.items()}
    l_m = {k: matrix(t) for k, t in lesson_text.items()}
    extra = {}
    for qid in texts:
        for cls in lesson_text:
            sim = q_m[qid] @ l_m[cls].T
            extra[(qid, cls)] = {"line_best": float(sim.max()), "line_q_cov": float(sim.max(axis=1).mean()),
                                 "line_l_cov": float(sim.max(axis=0).mean()), "line_q_min": float(sim.max(axis=1).min())}

    def transform(collected):
        return {qid: [(cls, {**full, **extra[(qid.partition("|")[0], cls)]}, lex, fp) for cls, full, lex, fp in cands]
                for qid, cands in collected.items()}
    return transform


def run(only: tuple[str, ...]) -> list[tuple[str, dict]]:
    from hpcmem.kb.recall.scoring import FULL_FEATURES

    cal = corpus.plan("calibration")
    results: list[tuple[str, dict]] = []
    data = fit.collect(cal, with_small_stores="small" in only)
    opened = [data]
    try:
        results.append(("logistic regression (the shipped kind of scorer), calibration store only",
                        fit.cross_validate(data, FULL_FEATURES, small=False)))
        if "gbm" in only:
            for settings in GBM_SETTINGS:
                label = ", ".join(f"{k}={v}" for k, v in settings.items())
                results.append((f"monotone gradient boosting ({label})",
                                fit.cross_validate(data, FULL_FEATURES, small=False, scorer=gbm_scorer(settings))))
        if "lines" in only:
            transform = line_features(data)
            for added in LINE_FEATURES:
                results.append((f"+ {', '.join(added)}", fit.cross_validate(
                    data, FULL_FEATURES + added, small=False, transform=transform)))
        if "small" in only:
            results.append(("+ simulated small stores (1, 3, 5 lessons)",
                            fit.cross_validate(data, FULL_FEATURES, small=True)))
        if "rotations" in only:
            others = []
            for rotation in (1, 2, 3):
                others.append(fit.collect(corpus.plan("calibration", rotation=rotation)))
                opened.append(others[-1])
                results.append((f"+ rows of {rotation} other plan{'s' if rotation > 1 else ''} of the same texts",
                                fit.cross_validate(data, FULL_FEATURES, small=False,
                                                   more_rows=fit.rotation_rows(others, FULL_FEATURES))))
    finally:
        for d in opened:
            d.close()
    return results


def markdown(results: list[tuple[str, dict]], seconds: float) -> str:
    cal = corpus.plan("calibration")
    lines = [
        SECTION, "",
        f"Calibration part: {len(cal.lessons)} lessons, {len(cal.recurrences)} recurrences, {len(cal.no_lesson)} "
        "no-lesson queries. "
        "`bench/experiments/scorer_experiments.py`, calibration part only: each change to the scorer judged by the same "
        "fold-honest, family-grouped CV as the shipped fit (5 folds, 6 fold assignments, each fold's IDF table "
        "from its training folds). Per-assignment decision accuracies spread over about 3 points, so differences "
        "under 1.5 points are noise.", "",
        "| scorer | decision accuracy | known top-1 | abstention | right lesson first (no threshold) | "
        "decision accuracy per fold assignment |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, r in results:
        lines.append(f"| {name} | {r['decision_accuracy']:.3f} | {r['known_top1']:.3f} | {r['abstention']:.3f} | "
                     f"{r['rank_top1']:.3f} | {' '.join(f'{a:.3f}' for a in r['per_seed'])} |")
    lines += ["", f"Runtime {seconds:.0f} s.", "",
              "Reproduce: `.venv/bin/python bench/experiments/scorer_experiments.py --write docs/benchmarks.md`", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    ap.add_argument("--write", type=Path, help="replace the section in this markdown file")
    args = ap.parse_args()
    t0 = time.perf_counter()
    results = run(tuple(args.only))
    text = markdown(results, time.perf_counter() - t0)
    print(text)
    if args.write:
        from markdown_section import write_section

        write_section(args.write, SECTION, text)


if __name__ == "__main__":
    main()
