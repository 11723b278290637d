"""Fit recall's scorer (kb/recall/recall_model.json) on the corpus's calibration part only.

This is how the shipped ``kb/recall/recall_model.json`` is refit: run it without options and
commit the file it writes, with the held-out run (bench/bench_recall_quality.py) that judges it.
The options make candidate fits for experiments (bench/experiments/, docs/benchmarks.md).

    .venv/bin/python bench/fit_recall_model.py [--rotations N] [--cap-margins Q] [--failures] [--cv]
        [--ceilings] [--dry-run] [--out kb/recall/recall_model.json]

Without ``--dry-run`` it writes ``--out``: by default over the shipped model.

1. IDF weights: document frequencies of the masked excerpt words of every calibration text.
2. Lessons: one per known calibration class, recorded in a fresh store (recall_methods).
3. Every calibration query's candidates (``Recaller.candidates(exhaustive=True)``) give one
   row of features per candidate lesson, labelled 1 when the lesson is of the query's class.
   With ``--small-stores`` (an experiment, not the shipped fit), every query also meets
   simulated small stores (``small_stores``: 1, 3 and 5 lessons, with and without its own),
   every lesson in them a candidate, margins as recall gives them there.
4. Two L2-regularised logistic regressions (IRLS): ``full`` and ``lexical`` (no embeddings),
   each weight held to its sign (``sign_of``: evidence never counts against a lesson, a
   conflict never for it). A query's only candidate gets the median margins of calibration
   leaders (``give_lone_margins``, ``lone_margin`` in the model), as recall gives it.
5. The match band's threshold maximises the calibration decision accuracy (right lesson first
   on recurrences, abstention where no lesson exists); related is half of it. As in recall,
   the answer is the most probable lesson in the match band: a lesson whose fix names a token
   that differs from the query's is never applied, whatever its probability, and none is
   when lessons of two classes tie exactly.

``--cv`` reports family-grouped 5-fold cross-validation on calibration (model and threshold
fitted on four folds' queries, judged on the fifth; mean of 6 fold assignments). Each fold's
IDF table comes from its four training folds' texts only, and every query's candidates and
features are collected again with it: the fifth fold's rare words are then as new to the
table as the held-out part's, or a user's, are to the fitted one (``--cv-shared-idf`` also
reports the CV whose folds share the table of all calibration texts; ``--cv-unseen-lessons``
the CV whose training rows leave out the candidates that are the test fold's lessons). The stored lessons are
the same in every fold, as a store holds lessons the table has not seen. ``--ceilings``
reports the ranking ceiling (right lesson first ignoring the threshold, recall@5 and @all of
``Recaller.candidates``), the four kinds of decision error, and how many queries share their
masked decisive line or excerpt with a lesson of another class (text alone cannot tell them).

``--rotations N`` adds the rows of N other plans of the calibration texts (``plan(rotation=r)``:
another instance is each class's lesson, other classes have lessons); the match threshold is
still chosen on the calibration plan's own decisions. ``--cap-margins Q`` holds every margin to
quantile Q of the calibration leaders' margins (``margin_cap`` in the model): in a store of a
few lessons, a query is far ahead of unrelated rivals, and that lead alone made a fit answer
foreign queries with an unrelated lesson.

The shipped model (``fitted_on``: 64 lessons) is this script's plain fit on the calibration part
as it was before the corpus's second collection (bf13f49). Two fits on the grown part (70
lessons) were each committed, run once on the held-out part, and not kept: the plain refit
(97fc483: the same held-out decision accuracy, twice as many other-category answers in small
stores), and ``--rotations 1 --cap-margins 0.5`` (130f19e: better on calibration CV and in
small stores, but on the held-out part abstention 0.532 against 0.727 and decision accuracy
0.622 against 0.652). docs/benchmarks.md, "Recall quality", has both runs.

``--shared-floor Q`` makes ``lex_shared_rel`` divide by at least quantile Q of the right lessons'
shared sums (``bm25["rel_floor"]`` in the model), so that the leader of a few unrelated lessons
is not 1 (measured, not shipped: docs/benchmarks.md, "Recall quality: choosing a fit").

``--l2``, ``--without F1,F2`` (fit without those features) and ``--parts`` (fit on several parts
together, e.g. ``calibration,validation:a``; never heldout) make candidate fits, written with
``--out`` and compared on the validation collection (docs/benchmarks.md, "Recall quality:
choosing a fit"), which is what a choice between fits rests on: calibration CV did not predict it.

The held-out part is never loaded here. ``--failures`` prints the calibration queries the
fitted model gets wrong, for inspection.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recall_corpus import REPO, combined, plan  # noqa: E402

OUT = REPO / "kb" / "recall" / "recall_model.json"
L2 = 1.0


def idf_table(texts: list[str]) -> dict:
    from hpcmem.kb.signatures.fingerprint import excerpt_template, words

    df: Counter = Counter()
    for text in texts:
        df.update(set(words(excerpt_template(text))))
    return {"documents": len(texts), "df": dict(sorted((w, n) for w, n in df.items() if n >= 2))}


# Evidence must never count against a lesson, nor a conflict for it: the fitted weights of
# these features are held to their sign (monotone in each). On the corpus, exact hits of
# generic templates that others share made `exact` weigh negative, which then turned a plain
# recurrence of a user's own failure (one lesson, one exact hit) into an abstention.
NEGATIVE = ("conflict_matters", "conflict_version", "version_gap")
FREE = ("query_unknown", "conflict_name")


def sign_of(feature: str) -> int:
    """+1: the weight must be >= 0; -1: <= 0; 0: free."""
    return 0 if feature in FREE else -1 if feature in NEGATIVE else 1


def fit_logistic(rows: list[list[float]], labels: list[int], l2: float = L2,
                 features: tuple[str, ...] | None = None,
                 weights: list[float] | None = None) -> tuple[list[float], float]:
    """L2-regularised logistic regression (Newton-Raphson, the bias not penalised). Given the
    ``features``, each weight is held to ``sign_of`` it: a weight that comes out with the
    wrong sign is fixed at 0 and the rest refitted, until none does (an active set).
    ``weights``: one per row (default 1), scaled to sum to the number of rows."""
    import numpy as np

    X = np.asarray(rows, dtype=float)
    s = np.ones(X.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    s = s * (len(s) / s.sum())
    signs = [sign_of(f) for f in features] if features else [0] * X.shape[1]
    free = list(range(X.shape[1]))
    while True:
        w = _irls(X[:, free], np.asarray(labels, dtype=float), l2, s)
        wrong = [i for i, v in zip(free, w[:-1]) if signs[i] * v < 0]
        if not wrong:
            break
        free = [i for i in free if i not in wrong]
    weights = [0.0] * X.shape[1]
    for i, v in zip(free, w[:-1]):
        weights[i] = round(float(v), 6)
    return weights, round(float(w[-1]), 6)


def _irls(X, y, l2: float, s):
    import numpy as np

    X = np.hstack([X, np.ones((X.shape[0], 1))])
    w = np.zeros(X.shape[1])
    penalty = np.eye(X.shape[1]) * l2
    penalty[-1, -1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -40, 40)))
        grad = X.T @ (s * (p - y)) + penalty @ w
        hess = X.T @ (X * (s * p * (1 - p))[:, None]) + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


@dataclass
class Collected:
    """Every calibration query's candidates: (lesson class, full features, lexical features).

    ``recollect(idf)`` collects them again with another IDF table (the store stays open until
    ``close()``): the features and the lexical candidates both depend on it."""

    plan: Any
    family: dict[str, str]  # query id -> family of its class
    # query id -> its candidates in the calibration store: (lesson class, full features,
    # lexical features, the lesson's fingerprint); "<query id>|<n>": the query's n-th
    # simulated small store (``small_stores``)
    rows: dict[str, list[tuple[str, dict[str, float], dict[str, float], str]]]
    idf: dict
    recollect: Any = None  # IDF table -> rows
    close: Any = None
    fold_cache: dict = field(default_factory=dict)  # training families -> rows (fold_rows)
    lone_margin: dict = field(default_factory=dict)  # the margins of a candidate without competitors
    bm25: dict = field(default_factory=dict)  # lex_shared's length normalisation (bm25_lengths)
    margin_cap: dict = field(default_factory=dict)  # the most a lead counts (``--cap-margins``)
    embedder: Any = None  # the store's encoder (experiments encode more texts with it)


def with_idf(model, idf: dict):
    """``model`` with another IDF table (as load_model reads one from recall_model.json)."""
    import dataclasses

    from hpcmem.kb.recall.scoring import _idf

    n = float(idf["documents"])
    return dataclasses.replace(model, idf={w: _idf(n, df) for w, df in idf["df"].items()}, idf_default=_idf(n, 0))


def calibration_texts(cal, families: set[str] | None = None, family: dict[str, str] | None = None) -> list[str]:
    """Lesson and query texts of the calibration part (of ``families`` only, when given)."""
    lessons = [i.text for i, c in cal.lessons if families is None or c.family in families]
    queries = [q.text for q in cal.queries if families is None or family[q.id] in families]
    return lessons + queries


def collect(cal, with_small_stores: bool = False, cap_quantile: float | None = None,
            caps: dict | None = None, floor_quantile: float | None = None) -> Collected:
    """``cap_quantile``: hold every margin to that quantile of the leaders' margins (computed on
    the first collection, or given as ``caps``: other plans use the calibration plan's).
    ``floor_quantile``: ``lex_shared_rel`` divides by at least that quantile of the right
    lessons' shared sums (``bm25["rel_floor"]``, computed on the first collection)."""
    from hpcmem.kb.recall.recaller import RecallQuery
    from hpcmem.kb.recall.scoring import FULL_FEATURES, LEXICAL_FEATURES, Probe, cap_margins
    from hpcmem.kb.signatures.fingerprint import fingerprint

    idf = idf_table(calibration_texts(cal))
    bm25 = bm25_lengths(cal)
    zero = {"features": list(FULL_FEATURES), "weights": [0.0] * len(FULL_FEATURES), "bias": 0.0}
    provisional = {"idf": idf, "models": {"full": zero, "lexical": {**zero, "features": list(LEXICAL_FEATURES),
                                                                      "weights": [0.0] * len(LEXICAL_FEATURES)}},
                   "bands": {"match": 0.5, "related": 0.25}, "bm25": bm25}
    tmp = Path(tempfile.mkdtemp()) / "provisional.json"
    tmp.write_text(json.dumps(provisional))

    from recall_methods import HpcmemStore

    store = HpcmemStore(cal, model_path=str(tmp))
    recaller = store.recaller()
    base_model = recaller.model
    probes = {q.id: (Probe.of(q.text, fingerprint(q.text)), RecallQuery(text=q.text)) for q in cal.queries}

    def scored(probe, query, every_lesson: bool) -> list[tuple[str, dict, dict, str]]:
        full, _ = recaller.candidates(probe, query, exhaustive=True, every_lesson=every_lesson)
        lexical, _ = recaller.candidates(probe, query, exhaustive=True, lexical_only=True,
                                         every_lesson=every_lesson)
        lex_by_id = {c.lesson["id"]: c.evidence.features for c in lexical}
        out = []
        for c in full:
            if "emb_excerpt" not in c.evidence.features:
                raise SystemExit("no vectors: the fit needs the ml extra and the model")
            out.append((store.lesson_class[c.lesson["id"]], dict(c.evidence.features),
                        dict(lex_by_id[c.lesson["id"]]), c.evidence.variant.fingerprint))
        return out

    def gather(table: dict | None = None) -> dict[str, list]:
        recaller.model = base_model if table is None else with_idf(base_model, table)
        rows = {q.id: scored(*probes[q.id], every_lesson=False) for q in cal.queries}
        give_lone_margins(rows, lone)
        if floor_quantile is not None:
            if "rel_floor" not in bm25:
                bm25["rel_floor"] = shared_floor(rows, {q.id: q.cls for q in cal.queries}, floor_quantile)
            for cands in rows.values():
                relative_shares(cands, bm25["rel_floor"])
        if cap_quantile is not None and not caps:
            caps.update(margin_caps(rows, cap_quantile))
        if caps:
            for cands in rows.values():
                for c in cands:
                    cap_margins(c[1], caps["full"])
                    cap_margins(c[2], caps["lexical"])
        if with_small_stores:
            every = {q.id: scored(*probes[q.id], every_lesson=True) for q in cal.queries}
            rows.update(small_stores(cal, every, lone, caps, bm25.get("rel_floor", 0.0)))
        return rows

    def close() -> None:
        recaller.close()
        store.close()

    lone: dict[str, dict[str, float]] = {}
    caps = {} if caps is None else caps
    try:
        rows = gather()
    except BaseException:
        close()
        raise
    family = {q.id: cal.family[q.cls] for q in cal.queries}
    return Collected(cal, family, rows, idf, gather, close, lone_margin=lone, margin_cap=caps,
                     embedder=store.embedder, bm25=bm25)


def bm25_lengths(cal) -> dict[str, float]:
    """``lex_shared``'s length normalisation: the lessons' mean excerpt length in distinct words."""
    from hpcmem.kb.recall.scoring import BM25_DEFAULTS
    from hpcmem.kb.signatures.fingerprint import excerpt_template, words

    sizes = [len(set(words(excerpt_template(i.text)))) for i, _ in cal.lessons]
    return BM25_DEFAULTS | {"average_words": round(sum(sizes) / len(sizes), 2)}


def shared_floor(rows: dict[str, list], classes: dict[str, str], quantile: float) -> float:
    """``bm25["rel_floor"]``: that quantile of the right lessons' shared sums (``lex_shared``
    before its log), so that leading a store of a few unrelated lessons is not leading."""
    sums = [math.expm1(full["lex_shared"]) for qid, cands in rows.items()
            for cls, full, _lex, _fp in cands if cls == classes[qid]]
    return round(statistics.quantiles(sums, n=100, method="inclusive")[round(quantile * 100) - 1], 4)


def relative_shares(cands: list, floor: float) -> None:
    """Set ``lex_shared_rel`` of one query's candidates again with ``floor`` (both models)."""
    best = max([floor, *(math.expm1(c[1]["lex_shared"]) for c in cands)])
    for c in cands:
        for feats in (c[1], c[2]):
            feats["lex_shared_rel"] = math.expm1(feats["lex_shared"]) / best if best > 0 else 0.0


def give_lone_margins(rows: dict[str, list], lone: dict[str, dict[str, float]]) -> None:
    """A query's only candidate has nobody to be ahead of, so recall gives it the median
    margins of the leading candidates of queries that have competitors, per model and apart
    for exact hits (``margin_exact``: recall's exact stage judges its hits alone) -
    ``lone_margin`` in recall_model.json; the rows of such queries get the same here.
    ``lone`` is filled from the first collection and kept for later ones (fold-honest IDF)."""
    if not lone:
        for model, values in leader_margins(rows).items():
            lone[model] = {name: round(statistics.median(v), 4) for name, v in values.items() if v}
    for cands in rows.values():
        if len(cands) == 1:
            for which, model in enumerate(("full", "lexical")):
                feats = cands[0][1 + which]
                feats["margin"] = lone[model]["margin_exact" if feats["exact"] else "margin"]
                if "emb_cause_margin" in feats:
                    feats["emb_cause_margin"] = lone[model]["emb_cause_margin"]


def margin_caps(rows: dict[str, list], quantile: float) -> dict[str, dict[str, float]]:
    """``margin_cap`` in recall_model.json: per model, that quantile of the margins of the
    leading candidates of queries with competitors (exact hits apart), as ``lone_margin``."""
    return {model: {name: round(statistics.quantiles(v, n=100, method="inclusive")[round(quantile * 100) - 1], 4)
                     for name, v in values.items() if len(v) > 1}
            for model, values in leader_margins(rows).items()}


def leader_margins(rows: dict[str, list]) -> dict[str, dict[str, list[float]]]:
    """Per model, the margins of the leading candidates of queries with competitors: non-exact
    and exact leaders apart ("margin", "margin_exact"), and their ``emb_cause_margin``."""
    out = {}
    for which, model in enumerate(("full", "lexical")):
        leaders = [max((c[1 + which] for c in cands), key=lambda f: f["margin"])
                   for cands in rows.values() if len(cands) > 1]
        out[model] = {"margin": [f["margin"] for f in leaders if not f["exact"]],
                      "margin_exact": [f["margin"] for f in leaders if f["exact"]],
                      "emb_cause_margin": [f["emb_cause_margin"] for f in leaders if "emb_cause_margin" in f]}
    return out


SMALL_STORES = (1, 3, 5)


def small_stores(cal, every: dict[str, list], lone: dict[str, dict[str, float]],
                 caps: dict[str, dict[str, float]], floor: float = 0.0) -> dict[str, list]:
    """Rows of every calibration query against simulated small stores (a user's own store
    often holds a few lessons): for each size k in ``SMALL_STORES``, one store of the query's
    own lesson (when it has one) and k - 1 others, and one store of k other lessons, drawn
    with a fixed seed. Each store's candidates are every lesson in it, with the margins recall
    would give them there (``give_margins``). They were to teach the model that being far
    ahead of a few unrelated lessons is weak evidence; measured (docs/benchmarks.md, "Scorer
    experiments", "Recall with small stores"), CV fell and foreign answers in small stores did
    not drop, so the shipped fit leaves them out.
    Their keys in ``Collected.rows`` are "<query id>|<n>" (``simulated`` finds them)."""
    import random

    from hpcmem.kb.recall.scoring import give_margins

    lessons = sorted({c.name for _, c in cal.lessons})
    out: dict[str, list] = {}
    for q in cal.queries:
        rng = random.Random(f"small-stores {q.id}")
        others = [c for c in lessons if c != q.cls]
        stores = []
        for k in SMALL_STORES:
            if q.cls in lessons:
                stores.append({q.cls, *rng.sample(others, k - 1)})
            stores.append(set(rng.sample(others, k)))
        for n, members in enumerate(stores):
            cands = [(cls, dict(full), dict(lex), fp) for cls, full, lex, fp in every[q.id] if cls in members]
            for which, model in ((1, "full"), (2, "lexical")):
                give_margins([c[which] for c in cands], [c[3] for c in cands], lone[model],
                             with_vectors=model == "full", cap=caps.get(model), shared_floor=floor)
            out[f"{q.id}|{n}"] = cands
    return out


def simulated(rows: dict[str, list], qids) -> list[str]:
    """The keys of the given queries' simulated small stores in ``rows``."""
    wanted = set(qids)
    return [key for key in rows if "|" in key and key.partition("|")[0] in wanted]


def design(data: Collected, qids, features: tuple[str, ...], which: int,
           collected: dict | None = None) -> tuple[list, list, list]:
    """Rows, labels and owners of the given queries: (query id, lesson class, whether the
    lesson's fix names a token that differs - such a lesson is never in the match band).
    ``collected``: rows collected with another IDF table (default: ``data.rows``)."""
    rows, labels, owners = [], [], []
    by_id = {q.id: q for q in data.plan.queries}
    collected = data.rows if collected is None else collected
    for qid in qids:
        for cls, full, lex, _fp in collected[qid]:
            x = full if which == 0 else lex
            rows.append([x[f] for f in features])
            labels.append(int(cls == by_id[qid.partition("|")[0]].cls))
            owners.append((qid, cls, bool(full["conflict_matters"])))
    return rows, labels, owners


def rank(owners, probabilities) -> dict[str, list[tuple[str, float, bool]]]:
    """Per query: (lesson class, probability, blocked) by probability, best first."""
    answers: dict[str, list[tuple[str, float, bool]]] = {}
    for (qid, cls, blocked), prob in zip(owners, probabilities):
        answers.setdefault(qid, []).append((cls, prob, blocked))
    for qid in answers:
        answers[qid].sort(key=lambda t: -t[1])
    return answers


def best_threshold(answers, queries, recurrent: set[str]) -> tuple[float, float]:
    """The match threshold with the best decision accuracy over ``queries`` (the middle of ties)."""
    cuts = [i / 100 for i in range(5, 96)]
    scored = [(decide(answers, queries, recurrent, t), t) for t in cuts]
    best = max(s for s, _ in scored)
    winners = [t for s, t in scored if s == best]
    return best, winners[len(winners) // 2]


def decide(answers, queries, recurrent: set[str], threshold: float) -> float:
    """Decision accuracy of answering with the top lesson when its probability >= threshold."""
    return sum(outcome(q, answers, recurrent, threshold) == "right" for q in queries) / len(queries)


def answer(hits, threshold: float):
    """What recall applies: the most probable lesson in the match band (probability at the
    threshold, and no differing token its fix names), or None (abstained); None too when
    another class's lesson ties it exactly (``kb.recall.recaller.unresolved_ties``)."""
    matching = [h for h in hits if h[1] >= threshold and not h[2]]
    if not matching:
        return None
    first = matching[0]
    tied = any(h[0] != first[0] and round(h[1], 4) == round(first[1], 4) for h in matching[1:])
    return None if tied else first


def outcome(q, answers, recurrent: set[str], threshold: float) -> str:
    """Which kind of decision a query got: right, or one of the four error buckets."""
    hits = answers.get(q.id) or []
    given = answer(hits, threshold)
    if q.id not in recurrent:
        return "no_lesson_answered" if given is not None else "right"
    if given is not None:
        return "right" if given[0] == q.cls else "answered_wrong"
    return "abstained_right_top" if hits and hits[0][0] == q.cls else "abstained_wrong_top"


def summary(answers, queries, recurrent: set[str], threshold: float) -> dict:
    rec = [q for q in queries if q.id in recurrent]
    out = Counter(outcome(q, answers, recurrent, threshold) for q in queries)
    ranks = []
    for q in rec:
        classes = [h[0] for h in answers.get(q.id) or []]
        ranks.append(classes.index(q.cls) + 1 if q.cls in classes else None)
    n = len(rec)
    return {
        "decision_accuracy": round(out["right"] / len(queries), 4),
        "class_decision_accuracy": class_accuracy(answers, queries, recurrent, threshold),
        "known_top1": round(sum(1 for q in rec if outcome(q, answers, recurrent, threshold) == "right") / n, 4),
        "abstention": round(sum(1 for q in queries if q.id not in recurrent
                                and outcome(q, answers, recurrent, threshold) == "right")
                            / max(1, len(queries) - n), 4),
        "rank_top1": round(sum(1 for r in ranks if r == 1) / n, 4),
        "recall_at_5": round(sum(1 for r in ranks if r is not None and r <= 5) / n, 4),
        "recall_at_all": round(sum(1 for r in ranks if r is not None) / n, 4),
        "errors": {k: out[k] for k in ("abstained_right_top", "abstained_wrong_top", "answered_wrong",
                                         "no_lesson_answered")},
    }


def class_accuracy(answers, queries, recurrent: set[str], threshold: float) -> float:
    """Decision accuracy with every class counted once (the mean of its queries' accuracies):
    a class with many collected instances does not outweigh the rest."""
    by_class: dict[str, list[bool]] = {}
    for q in queries:
        by_class.setdefault(q.cls, []).append(outcome(q, answers, recurrent, threshold) == "right")
    return round(statistics.mean(sum(v) / len(v) for v in by_class.values()), 4)


def fold_rows(data: Collected, train_families: set[str]) -> dict:
    """Every query's rows collected with the IDF table of the training folds' texts alone
    (their lessons and queries): the test fold's words are then as new to the table as the
    held-out part's, or a user's, are to the fitted one. Cached per set of training families."""
    key = frozenset(train_families)
    if key not in data.fold_cache:
        data.fold_cache[key] = data.recollect(idf_table(calibration_texts(data.plan, set(key), data.family)))
    return data.fold_cache[key]


def rotation_rows(others: list[Collected], features: tuple[str, ...], unseen_lessons: bool = False):
    """``cross_validate``'s more_rows: the training families' queries of other plans of the
    calibration texts (``plan(rotation=r)``: another instance is each class's lesson, other
    classes have lessons), each judged in its own plan's store with the fold's IDF table
    (``unseen_lessons``: without the candidates that are lessons of the test fold's families)."""
    def more(train_families, which):
        rows, labels = [], []
        for d in others:
            qids = [q.id for q in d.plan.queries if d.family[q.id] in train_families]
            r, l, _ = training_rows(d, qids, features, which, fold_rows(d, train_families),
                                    train_families if unseen_lessons else None)
            rows += r
            labels += l
        return rows, labels
    return more


def training_rows(data: Collected, qids, features: tuple[str, ...], which: int, collected: dict,
                  lesson_families: set[str] | None = None) -> tuple[list, list, list]:
    """``design``'s rows, keeping only candidates that are lessons of ``lesson_families`` when
    given (CV with unseen lessons: the test fold's lessons are then new to the model)."""
    rows, labels, owners = design(data, qids, features, which, collected)
    if lesson_families is None:
        return rows, labels, owners
    family = {c.name: c.family for _, c in data.plan.lessons}
    keep = [i for i, o in enumerate(owners) if family[o[1]] in lesson_families]
    return [rows[i] for i in keep], [labels[i] for i in keep], [owners[i] for i in keep]


def logistic_scorer(rows: list, labels: list, features: tuple[str, ...], l2: float = L2,
                    weights: list[float] | None = None):
    """The shipped kind of model, fitted: rows -> probabilities."""
    from hpcmem.kb.recall.scoring import LinearModel

    w, b = fit_logistic(rows, labels, l2, features, weights)
    model = LinearModel(features, tuple(w), b)
    return lambda batch: [model.probability(dict(zip(features, r))) for r in batch]


def fit_fold(data: Collected, train_families: set[str], features: tuple[str, ...], which: int, scorer, *,
             honest: bool = True, small: bool = True, more_rows=None, transform=None,
             unseen_lessons: bool = False, balance: bool = False) -> tuple[dict, float]:
    """One CV fold: model and threshold fitted on the training families' queries; the test
    queries' ranked answers and that threshold (options as ``cross_validate``)."""
    queries = data.plan.queries
    recurrent = {q.id for q in data.plan.recurrences}
    train = [q for q in queries if data.family[q.id] in train_families]
    test = [q for q in queries if data.family[q.id] not in train_families]
    collected = fold_rows(data, train_families) if honest else data.rows
    collected = transform(collected) if transform else collected
    train_ids = [q.id for q in train]
    rows, labels, owners = training_rows(data, train_ids, features, which, collected,
                                         train_families if unseen_lessons else None)
    more, more_labels, _ = (design(data, simulated(collected, train_ids), features, which, collected)
                            if small else ([], [], []))
    if more_rows:
        extra, extra_labels = more_rows(train_families, which)
        more, more_labels = more + extra, more_labels + extra_labels
    if balance:
        model = scorer(rows + more, labels + more_labels, features,
                       weights=class_weights(data, owners) + [1.0] * len(more))
    else:
        model = scorer(rows + more, labels + more_labels, features)
    _, t = best_threshold(rank(owners, model(rows)), train, recurrent)
    rows, _, owners = design(data, [q.id for q in test], features, which, collected)
    return rank(owners, model(rows)), t


def class_weights(data: Collected, owners) -> list[float]:
    """A weight per row: 1 / (queries of the row's query's class), so that every class counts
    once in the fit however many of its instances were collected (``--balance-classes``)."""
    cls = {q.id: q.cls for q in data.plan.queries}
    per_class = Counter(cls[qid] for qid in {o[0] for o in owners})
    return [1.0 / per_class[cls[o[0]]] for o in owners]


def judged(answers: dict, thresholds: dict, queries, recurrent: set[str]) -> dict:
    """``summary`` of answers whose folds chose different thresholds: each query's
    probabilities are shifted so that its fold's threshold sits at 0.5."""
    scaled = {qid: [(c, p - thresholds[qid] + 0.5, b) for c, p, b in hits] for qid, hits in answers.items()}
    return summary(scaled, queries, recurrent, 0.5)


def fold_assignment(families: list[str], seed: int, folds: int) -> dict[str, int]:
    """family -> fold, for fold assignment ``seed`` (the families in sorted order, shuffled)."""
    import random

    order = sorted(families)
    random.Random(seed).shuffle(order)
    return {f: i % folds for i, f in enumerate(order)}


def cross_validate(data: Collected, features: tuple[str, ...], which: int = 0, folds: int = 5,
                   seeds: int = 6, l2: float = L2, honest: bool = True, small: bool = True,
                   scorer=None, more_rows=None, transform=None, unseen_lessons: bool = False,
                   balance: bool = False) -> dict:
    """Family-grouped k-fold CV: the model and its threshold are fitted on the other folds'
    queries; every query is judged once per seed. Mean of ``seeds`` fold assignments.
    ``honest``: the IDF table of each fold is computed from the training folds' texts only
    (``fold_rows``); otherwise the table of all calibration texts serves every fold.
    ``small``: the training queries' simulated small stores are fitted too (when collected:
    ``--small-stores``); the test fold is judged in the calibration store.
    Experiments (bench/experiments/scorer_experiments.py) swap parts: ``scorer(rows, labels, features)``
    fits another kind of model; ``more_rows(train_families, which)`` adds training rows;
    ``transform(collected)`` adds features to the collected rows.
    ``unseen_lessons``: the training rows leave out candidates that are the test fold's lessons,
    so those lessons are as new to the model as the held-out part's are to the fitted one."""
    scorer = scorer or (lambda rows, labels, feats, weights=None: logistic_scorer(rows, labels, feats, l2, weights))

    queries = data.plan.queries
    recurrent = {q.id for q in data.plan.recurrences}
    families = sorted(set(data.family.values()))
    accs, pooled = [], []
    for seed in range(seeds):
        fold_of = fold_assignment(families, seed, folds)
        answers: dict[str, list[tuple[str, float]]] = {}
        thresholds: dict[str, float] = {}
        for k in range(folds):
            train_families = {f for f in families if fold_of[f] != k}
            fold_answers, t = fit_fold(data, train_families, features, which, scorer, honest=honest, small=small,
                                       more_rows=more_rows, transform=transform, unseen_lessons=unseen_lessons,
                                       balance=balance)
            answers.update(fold_answers)
            thresholds.update({qid: t for qid in fold_answers})
        s = judged(answers, thresholds, queries, recurrent)
        accs.append(s["decision_accuracy"])
        pooled.append(s)
    mean = {k: round(sum(s[k] for s in pooled) / seeds, 4) for k in pooled[0] if k != "errors"}
    mean["errors"] = {k: round(sum(s["errors"][k] for s in pooled) / seeds, 1) for k in pooled[0]["errors"]}
    mean["per_seed"] = accs  # decision accuracy of each fold assignment (for paired comparisons)
    return mean


def template_collisions(cal) -> dict:
    """Shares of queries whose masked decisive template / masked excerpt equals a lesson's of
    another class (recurrences), or any lesson's (no-lesson queries): text alone cannot tell them."""
    from hpcmem.kb.signatures.fingerprint import excerpt_template, fingerprint

    lessons = [(cls.name, fingerprint(i.text).template, excerpt_template(i.text)) for i, cls in cal.lessons]
    out = {}
    for name, queries, other in (("recurrences", cal.recurrences, True), ("no_lesson", cal.no_lesson, False)):
        same_t = same_e = 0
        for q in queries:
            t, e = fingerprint(q.text).template, excerpt_template(q.text)
            rivals = [l for l in lessons if not other or l[0] != q.cls]
            same_t += any(l[1] == t for l in rivals)
            same_e += any(l[2] == e for l in rivals)
        out[name] = {"queries": len(queries), "decisive_template_collides": same_t, "excerpt_collides": same_e}
    # the right lesson's template equals the query's (an exact fingerprint hit is possible)
    by_class = {l[0]: l for l in lessons}
    out["recurrences"]["decisive_template_equals_own_lesson"] = sum(
        fingerprint(q.text).template == by_class[q.cls][1] for q in cal.recurrences)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--failures", action="store_true", help="print misjudged calibration queries")
    ap.add_argument("--cv", action="store_true",
                    help="also report family-grouped 5-fold CV (6 fold seeds, fold-honest IDF; ~1 min)")
    ap.add_argument("--cv-shared-idf", action="store_true",
                    help="with --cv, also the CV whose folds share the IDF table of all calibration texts")
    ap.add_argument("--small-stores", action="store_true",
                    help="experiment: fit simulated small stores' rows too (not the shipped fit)")
    ap.add_argument("--cv-without-small-stores", action="store_true",
                    help="with --cv --small-stores, also the CV of a fit without them")
    ap.add_argument("--cv-unseen-lessons", action="store_true",
                    help="with --cv, also the CV whose training rows leave out the test fold's lessons")
    ap.add_argument("--ceilings", action="store_true", help="also report ranking ceilings and error buckets")
    ap.add_argument("--rotations", type=int, default=0, metavar="N",
                    help="also fit the rows of N other plans of the calibration texts")
    ap.add_argument("--cap-margins", type=float, default=None, metavar="Q",
                    help="hold margins to quantile Q (0-1) of the calibration leaders' margins")
    ap.add_argument("--shared-floor", type=float, default=None, metavar="Q",
                    help="lex_shared_rel divides by at least quantile Q (0-1) of the right lessons' shared sums")
    ap.add_argument("--balance-classes", action="store_true",
                    help="weigh each calibration query's rows by 1 / its class's queries")
    ap.add_argument("--l2", type=float, default=L2, help=f"L2 penalty of both models (default {L2})")
    ap.add_argument("--without", default="", metavar="F1,F2",
                    help="experiment: fit both models without these features (kb/scoring.FULL_FEATURES)")
    ap.add_argument("--parts", default="calibration", metavar="P1,P2",
                    help="fit on these parts together (calibration, validation, validation:a|b); never heldout")
    ap.add_argument("--dry-run", action="store_true", help="do not write the model")
    args = ap.parse_args()
    parts = args.parts.split(",")
    if any(p.startswith("heldout") for p in parts):
        ap.error("--parts: the held-out part only ever reports")
    if args.shared_floor is not None and args.rotations:
        ap.error("--shared-floor: not with --rotations (other plans would compute their own floor)")
    from hpcmem.kb.recall.scoring import FULL_FEATURES

    args.without = frozenset(filter(None, args.without.split(",")))
    unknown = args.without - set(FULL_FEATURES)
    if unknown:
        ap.error(f"--without: unknown features {sorted(unknown)}")

    cal = combined([plan(p) for p in parts])
    data = collect(cal, with_small_stores=args.small_stores, cap_quantile=args.cap_margins,
                   floor_quantile=args.shared_floor)
    others: list[Collected] = []
    try:
        for rotation in range(1, args.rotations + 1):
            others.append(collect(combined([plan(p, rotation=rotation) for p in parts]), caps=data.margin_cap))
        report(args, cal, data, others)
    finally:
        for d in [data, *others]:
            d.close()


def report(args, cal, data: Collected, others: list[Collected]) -> None:
    from hpcmem.kb.recall import scoring
    from hpcmem.kb.recall.scoring import LinearModel

    dropped = args.without
    FULL_FEATURES = tuple(f for f in scoring.FULL_FEATURES if f not in dropped)
    LEXICAL_FEATURES = tuple(f for f in scoring.LEXICAL_FEATURES if f not in dropped)
    l2 = args.l2

    recurrent = {q.id for q in cal.recurrences}
    qids = [q.id for q in cal.queries]
    rows_full, labels, owners = design(data, qids, FULL_FEATURES, 0)
    rows_lex, _, _ = design(data, qids, LEXICAL_FEATURES, 1)
    small = simulated(data.rows, qids)
    small_full, small_labels, _ = design(data, small, FULL_FEATURES, 0)
    small_lex, _, _ = design(data, small, LEXICAL_FEATURES, 1)
    # other plans' rows: every instance of a class in turn is its lesson (the threshold is
    # still chosen on the calibration plan's own decisions)
    more_full, more_lex, more_labels = [], [], []
    for d in others:
        ids = [q.id for q in d.plan.queries]
        r, l, _ = design(d, ids, FULL_FEATURES, 0)
        more_full += r
        more_labels += l
        more_lex += design(d, ids, LEXICAL_FEATURES, 1)[0]
    weights = (class_weights(data, owners) + [1.0] * (len(small_labels) + len(more_labels))
               if args.balance_classes else None)
    w_full, b_full = fit_logistic(rows_full + small_full + more_full, labels + small_labels + more_labels, l2,
                                  features=FULL_FEATURES, weights=weights)
    w_lex, b_lex = fit_logistic(rows_lex + small_lex + more_lex, labels + small_labels + more_labels, l2,
                                features=LEXICAL_FEATURES, weights=weights)

    fitted = LinearModel(FULL_FEATURES, tuple(w_full), b_full)
    answers = rank(owners, [fitted.probability(dict(zip(FULL_FEATURES, r))) for r in rows_full])
    best, match = best_threshold(answers, cal.queries, recurrent)

    model = {
        "version": 1,
        "fitted_on": {
            "part": cal.part, "date": dt.date.today().isoformat(), "lessons": len(cal.lessons),
            "recurrences": len(cal.recurrences), "no_lesson": len(cal.no_lesson), "rows": len(labels),
            "positives": sum(labels),
            **({"other_plans": len(others), "other_plan_rows": len(more_labels)} if others else {}),
            **({"small_stores": len(small), "small_store_rows": len(small_labels)} if small else {}),
            **({"balanced_classes": True} if args.balance_classes else {}),
            **({"without": sorted(dropped)} if dropped else {}),
            "calibration_decision_accuracy": round(best, 4), "l2": l2,
        },
        "idf": data.idf,
        "models": {
            "full": {"features": list(FULL_FEATURES), "weights": w_full, "bias": b_full},
            "lexical": {"features": list(LEXICAL_FEATURES), "weights": w_lex, "bias": b_lex},
        },
        "bands": {"match": match, "related": round(match / 2, 3)},
        "lone_margin": data.lone_margin,
        "bm25": data.bm25,
        **({"margin_cap": data.margin_cap} if data.margin_cap else {}),
    }
    if not args.dry_run:
        args.out.write_text(json.dumps(model, indent=1, sort_keys=False) + "\n")
        scoring.load_model.cache_clear()
    print(json.dumps({k: v for k, v in model.items() if k != "idf"}, indent=1))
    if args.ceilings:
        print("in-sample:", json.dumps(summary(answers, cal.queries, recurrent, match)))
        print("collisions:", json.dumps(template_collisions(cal)))
    if args.cv:
        more = rotation_rows(others, FULL_FEATURES) if others else None
        print("cv full:", json.dumps(cross_validate(data, FULL_FEATURES, 0, more_rows=more, l2=l2,
                                                    balance=args.balance_classes)))
        if args.cv_unseen_lessons:
            more = rotation_rows(others, FULL_FEATURES, unseen_lessons=True) if others else None
            print("cv full (unseen lessons):", json.dumps(cross_validate(data, FULL_FEATURES, 0, more_rows=more,
                                                                         unseen_lessons=True)))
        if args.cv_without_small_stores:
            print("cv full (calibration store only):", json.dumps(cross_validate(data, FULL_FEATURES, 0, small=False)))
        if args.cv_shared_idf:
            print("cv full (shared IDF):", json.dumps(cross_validate(data, FULL_FEATURES, 0, honest=False)))
    if args.failures:
        for q in cal.queries:
            kind = outcome(q, answers, recurrent, match)
            if kind != "right":
                top = answers[q.id][0] if answers.get(q.id) else None
                print(f"--- {q.id} class={q.cls} {kind} top={top}\n{q.text[:600]}\n")


if __name__ == "__main__":
    main()
