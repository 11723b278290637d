"""Graded evidence: the calibrated probability that a stored lesson applies to a failure.

Recall finds candidate lessons cheaply (exact fingerprint or alias, FAISS neighbours,
rare-token overlap) and then scores every candidate from several signals:

==================  =====================================================================
exact               the query's fingerprint is the lesson's or one of its aliases
same_category       the rule categories agree (``query_unknown``: no rule matched the query)
lex_lesson          IDF-weighted share of the lesson's excerpt words found in the query
lex_query           IDF-weighted share of the query's excerpt words found in the lesson
lex_decisive        the same overlap between the two decisive lines (templates)
lex_cross_lesson    the lesson's decisive-line words found anywhere in the query's excerpt
lex_cross_query     the query's decisive-line words found anywhere in the lesson's excerpt
                    (two instances of one failure whose decisive lines were chosen apart)
lex_shared          how much rare information the two excerpts share: the BM25 sum of the IDF
                    weights of their common words (the lesson's excerpt as the document, its
                    length normalised against the calibration lessons'), as log(1 + sum).
                    The shares above are ratios; this is the amount, which ranks fresh
                    material better than any share (docs/benchmarks.md, validation)
lex_shared_rel      ``lex_shared``'s sum over the best candidate's (1 for the leader), or over
                    a typical right lesson's when the best shares less (``bm25["rel_floor"]``):
                    leading a store of a few unrelated lessons is not leading
lex_fix             IDF weight of the query's excerpt words that the lesson's fix or actions
                    name, beyond the decisive words the two share (/10, capped at 1): the
                    fix's own vocabulary (OPENBLAS_CORETYPE, --gres, -Xmx) in the query
emb_decisive        cosine of the decisive lines' embeddings (MiniLM)
emb_excerpt         cosine of the excerpts' embeddings
emb_cause           cosine of the query excerpt's embedding and the lesson's cause text's (the
                    cause's vector is encoded once and cached in the user's store, like a query's)
fix_agree           fix-deciding tokens (sonames, versions, modules...) the two share
conflict_matters    such tokens that differ where the lesson's fix names them, or whose kind names
                    another failure outright (Slurm's verdict, another errno, library family,
                    symbol-version family or message phrase; see ``kb/recall/fixtokens.py``)
conflict_version    such a token with the lesson's name but another version, where the fix
                    does not name the version (GLIBCXX_3.4.29 vs 3.4.32)
conflict_name       such a token of the same kind with another name, where the fix does not
                    name it (``conflict_other``, their sum, serves models fitted before)
version_gap         how far apart such versions are: log(1 + the difference at the first
                    component that differs), capped at 3
margin              how far this lesson's similarity is ahead of the best other candidate's
emb_cause_margin    how far this lesson's ``emb_cause`` is ahead of the best other candidate's
                    (a candidate with no competitor gets typical leaders' margins: ``lone_margin``;
                    no lead counts for more than a typical leader's: ``margin_cap``)
==================  =====================================================================

A logistic regression fitted on the calibration part of the real-world corpus
(``bench/fit_recall_model.py``, ``data/corpus/``), monotone in its evidence and conflict
signals (no weight counts evidence against a lesson or a conflict for it), turns them into
a probability. Two models are fitted: ``full`` (with the embeddings) and ``lexical`` (without), which serves the
exact-match fast path and ``--no-model``. Bands:

- **match** (probability >= ``bands.match``): apply it;
- **related** (>= ``bands.related``): shown with what differs, never applied silently.

The query job's context (``kb/recall/context_match.py``) moves the probability in log-odds:
fields that agree raise it, fields that differ lower it. A lesson whose job's facts differ
from the query's where its fix or its failure depends on them, whose fix the job already
satisfies, or whose cause depends on a partition or GPU type the job lacks, is at most
*related*, with the reason: never applied against the facts.

A lesson with a token that differs from the query's where it decides (``conflict_matters``:
the fix names it, or the kind names another failure outright) is at most *related*,
whatever its probability: its fix is about another library, version or failure. It
is *related* whenever it would match without the difference: never a silent veto.

Pure Python: the exact-match path scores without numpy or the model.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from hpcmem.kb.recall.fixtokens import (Comparison, Difference, FixToken, compare, fix_text, fix_tokens,
                                       location_differences)
from hpcmem.kb.signatures.fingerprint import FailureSignature, excerpt_template, failure_chain, words

MODEL_PATH = os.path.join(os.path.dirname(__file__), "recall_model.json")
FULL_FEATURES = ("exact", "same_category", "query_unknown", "lex_lesson", "lex_query", "lex_decisive",
                 "lex_cross_lesson", "lex_cross_query", "lex_fix", "emb_decisive", "emb_excerpt", "fix_agree",
                 "conflict_matters", "conflict_version", "conflict_name", "version_gap", "margin",
                 "emb_cause", "emb_cause_margin", "lex_shared", "lex_shared_rel")
# What "similarity" means for the margin and for choosing among a lesson's variants.
_SIMILARITY = ("exact", "lex_lesson", "lex_decisive", "emb_decisive", "emb_excerpt")
LEXICAL_FEATURES = tuple(f for f in FULL_FEATURES if not f.startswith("emb_"))
BM25_DEFAULTS = {"k1": 1.2, "b": 0.75, "average_words": 40.0}
_NO_CONFLICT = {"conflict_matters": 0.0, "conflict_version": 0.0, "conflict_name": 0.0, "version_gap": 0.0}


@dataclass(frozen=True)
class LinearModel:
    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float

    def probability(self, x: dict[str, float]) -> float:
        z = self.bias + sum(w * x[f] for f, w in zip(self.features, self.weights))
        return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))


@dataclass(frozen=True)
class RecallModel:
    full: LinearModel
    lexical: LinearModel
    match: float
    related: float
    idf: dict[str, float]
    idf_default: float
    meta: dict[str, Any]
    # The margins a candidate with no competitor gets, per model ("full", "lexical"): the
    # median margins of the calibration queries' leading candidates, exact hits apart
    # ("margin_exact"; none given: ahead of nothing by its whole value).
    lone_margin: dict[str, dict[str, float]] = field(default_factory=dict)
    # The most a lead counts, per model, in the same keys ("margin_cap"; none given: uncapped).
    # A store of a few lessons puts any query far ahead of unrelated rivals; capped, such a
    # lead counts as a clear leader's among many lessons, not more.
    margin_cap: dict[str, dict[str, float]] = field(default_factory=dict)
    # BM25's document-length normalisation for ``lex_shared``: the calibration lessons' mean
    # excerpt length in distinct words, and the usual k1 and b; "rel_floor" (when given) is
    # the least sum ``lex_shared_rel`` divides by.
    bm25: dict[str, float] = field(default_factory=lambda: dict(BM25_DEFAULTS))
    # Log-odds weights of the job context's agreements and differences (``context_match``'s
    # DEFAULT_WEIGHTS when the model file gives none).
    context_weights: dict[str, float] = field(default_factory=dict)

    def weight(self, word: str) -> float:
        return self.idf.get(word, self.idf_default)


def _linear(spec: dict[str, Any]) -> LinearModel:
    return LinearModel(tuple(spec["features"]), tuple(float(w) for w in spec["weights"]), float(spec["bias"]))


@lru_cache(maxsize=4)
def load_model(path: str = MODEL_PATH) -> RecallModel:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    n = float(data["idf"]["documents"])
    idf = {w: _idf(n, df) for w, df in data["idf"]["df"].items()}
    return RecallModel(
        full=_linear(data["models"]["full"]), lexical=_linear(data["models"]["lexical"]),
        match=float(data["bands"]["match"]), related=float(data["bands"]["related"]),
        idf=idf, idf_default=_idf(n, 0), meta=data.get("fitted_on", {}),
        lone_margin=_per_model(data.get("lone_margin", {})), margin_cap=_per_model(data.get("margin_cap", {})),
        bm25=BM25_DEFAULTS | {k: float(v) for k, v in data.get("bm25", {}).items()},
        context_weights={k: float(v) for k, v in data.get("context", {}).items()},
    )


def with_match_probability(model: RecallModel, threshold: float | None) -> RecallModel:
    """``model`` with a site's own match threshold (``recall.match_probability``); None keeps
    the fitted one. Probabilities are calibrated, so a stricter threshold trades answers for
    fewer wrong ones (docs/benchmarks.md, risk-coverage). The related band never starts above
    the match band."""
    if threshold is None:
        return model
    return replace(model, match=threshold, related=min(model.related, threshold))


def _per_model(spec: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {m: {k: float(v) for k, v in values.items()} for m, values in spec.items()}


def _idf(documents: float, df: float) -> float:
    return math.log(1.0 + (documents - df + 0.5) / (df + 0.5))


# ----------------------------------------------------------------------------- the two sides


@dataclass
class Probe:
    """The query side, computed once per recall."""

    signature: FailureSignature
    excerpt: str
    excerpt_words: frozenset[str]
    decisive_words: frozenset[str]
    tokens: tuple[FixToken, ...]
    vectors: dict[str, Any] = field(default_factory=dict)  # "decisive" / "excerpt" -> unit vector
    context: dict[str, Any] = field(default_factory=dict)  # the query job's facts (kb/jobs/context.py)
    site: Any = None  # recall.site_match.SiteFacts for a refused submission on a known site

    @classmethod
    def of(cls, text: str, signature: FailureSignature) -> "Probe":
        excerpt = excerpt_template(text)
        return cls(signature, excerpt, frozenset(words(excerpt)), frozenset(words(signature.template)),
                   fix_tokens(signature.template))


@dataclass
class Variant:
    """One form a lesson is known under: its own signature or an alias."""

    fingerprint: str
    template: str
    category: str
    excerpt: str
    vectors: dict[str, Any] = field(default_factory=dict)

    @property
    def excerpt_words(self) -> frozenset[str]:
        return frozenset(words(self.excerpt or self.template))

    @property
    def decisive_words(self) -> frozenset[str]:
        return frozenset(words(self.template))


@dataclass
class Evidence:
    features: dict[str, float]
    probability: float
    band: str | None  # "match" | "related" | None (dropped)
    comparison: Comparison
    variant: Variant
    # How the query job's context bears on the lesson (``kb/recall/context_match.py``);
    # None when the query carries no context.
    context: Any = None
    # The same judgement from the text alone: recall says when the context decided.
    text_probability: float = 0.0
    text_band: str | None = None


def _overlap(a: frozenset[str], b: frozenset[str], model: RecallModel) -> float:
    """IDF-weighted share of ``a``'s words that ``b`` has too."""
    total = sum(model.weight(w) for w in a)
    return sum(model.weight(w) for w in a & b) / total if total else 0.0


def _cosine(a: Any, b: Any) -> float:
    return float(sum(float(x) * float(y) for x, y in zip(a, b)))


def features(probe: Probe, variant: Variant, fix: str, actions: list[dict[str, Any]], model: RecallModel,
             *, with_vectors: bool, cause_vector: Any = None) -> tuple[dict[str, float], Comparison]:
    q = probe.signature
    comparison = compare(probe.tokens, fix_tokens(variant.template), fix_text(fix, actions))
    located = location_differences((q.template, probe.excerpt), (variant.template, variant.excerpt or variant.template))
    if located:
        comparison = replace(comparison, differences=comparison.differences + located)
    x = {
        "exact": 1.0 if variant.fingerprint == q.fingerprint else 0.0,
        "same_category": 1.0 if variant.category == q.category and q.category != "unknown" else 0.0,
        "query_unknown": 1.0 if q.category == "unknown" else 0.0,
        "lex_lesson": _overlap(variant.excerpt_words, probe.excerpt_words, model),
        "lex_query": _overlap(probe.excerpt_words, variant.excerpt_words, model),
        "lex_decisive": _overlap(variant.decisive_words, probe.decisive_words, model),
        "lex_cross_lesson": _overlap(variant.decisive_words, probe.excerpt_words, model),
        "lex_cross_query": _overlap(probe.decisive_words, variant.excerpt_words, model),
        **conflict_features(comparison),
    }
    # query words the lesson's fix (and actions) names, beyond the decisive line both share:
    # the fix's own vocabulary (OPENBLAS_CORETYPE, --gres, -Xmx) showing up in the query
    shared_fix = (probe.excerpt_words & _fix_words(fix_text(fix, actions))) - variant.decisive_words
    x["lex_fix"] = min(1.0, sum(model.weight(w) for w in shared_fix) / 10.0)
    x["lex_shared"] = math.log1p(_shared_information(probe.excerpt_words, variant.excerpt_words, model))
    if with_vectors:
        x["emb_decisive"] = _cosine(probe.vectors["decisive"], variant.vectors["decisive"])
        x["emb_excerpt"] = _cosine(probe.vectors["excerpt"], variant.vectors["excerpt"])
        # what the lesson says the failure is, against what the query shows
        x["emb_cause"] = _cosine(probe.vectors["excerpt"], cause_vector) if cause_vector is not None else 0.0
    return x, comparison


def conflict_features(comparison: Comparison) -> dict[str, float]:
    return {
        "fix_agree": float(min(comparison.agree, 2)),
        "conflict_matters": float(min(comparison.conflicts_that_matter, 2)),
        "conflict_other": float(min(comparison.conflicts_that_do_not, 2)),
        "conflict_version": float(min(comparison.version_conflicts, 2)),
        "conflict_name": float(min(comparison.name_conflicts, 2)),
        "version_gap": min(comparison.version_gap, 3.0),
    }


def without_rejection_wording(e: "Evidence") -> "Evidence":
    """``e`` without differences between two of Slurm's rejection messages (``kb/environment/
    rejections.py``): for when the site's limits said both jobs broke the same limit."""
    from hpcmem.kb.environment.rejections import kinds_for_message

    kept = tuple(d for d in e.comparison.differences if not (kinds_for_message(d.query) and kinds_for_message(d.lesson)))
    if len(kept) == len(e.comparison.differences):
        return e
    comparison = replace(e.comparison, differences=kept)
    return replace(e, comparison=comparison, features={**e.features, **conflict_features(comparison)})


def with_failure_chain(e: "Evidence", probe: "Probe", fix: str) -> tuple["Evidence", bool]:
    """What two job outputs began with (``fingerprint.failure_chain``; for whole job outputs
    only, the caller's to know: a pasted excerpt may be cut anywhere). An earlier failure is
    usually the cause of the later one, so:

    - one output began with a failure the other does not report at all (a ``module(s) are
      unknown`` above the missing library both end on): they failed for different reasons,
      a difference that matters is added to ``e``;
    - one output began with the failure the other one *is* (``module(s) are unknown`` and then
      the missing library it caused, against the unknown module alone): the same cause when
      their decisive tokens agree (the second value is True), another one when they conflict
      (``hpcfft/3.0`` against ``hpcblas/3.0``: the differences are added to ``e``).
    ``fix``: the lesson's fix and actions as ``fixtokens.fix_text`` gives them."""
    (q_all, q_earlier, q_before) = failure_chain(probe.excerpt)
    (l_all, l_earlier, l_before) = failure_chain(e.variant.excerpt or e.variant.template)
    query_only, lesson_only = q_earlier - l_all, l_earlier - q_all
    if query_only or lesson_only:
        shown = [", ".join(sorted(x)) or "nothing before it" for x in (query_only, lesson_only)]
        return _with_differences(e, (Difference(*shown, "name", True),)), False
    if e.variant.category in q_earlier:  # the query's root cause is the lesson's failure
        found = compare(fix_tokens(q_before), fix_tokens(e.variant.template), fix)
    elif probe.signature.category in l_earlier:  # the lesson's root cause is the query's failure
        found = compare(probe.tokens, fix_tokens(l_before), fix)
    else:
        return e, False
    against = tuple(d for d in found.differences if d.matters)
    return (_with_differences(e, against), False) if against else (e, True)


def _with_differences(e: "Evidence", more: tuple[Difference, ...]) -> "Evidence":
    comparison = replace(e.comparison, differences=e.comparison.differences + more)
    return replace(e, comparison=comparison, features={**e.features, **conflict_features(comparison)})


def _shared_information(query: frozenset[str], lesson: frozenset[str], model: RecallModel) -> float:
    """BM25 of the query's words against the lesson's excerpt (each word once: excerpts are
    word sets), with the model's IDF weights."""
    k1, b, average = model.bm25["k1"], model.bm25["b"], model.bm25["average_words"]
    saturation = (k1 + 1.0) / (1.0 + k1 * (1.0 - b + b * len(lesson) / average))
    return saturation * sum(model.weight(w) for w in query & lesson)


@lru_cache(maxsize=1024)
def _fix_words(text: str) -> frozenset[str]:
    return frozenset(words(text))


def similarity(x: dict[str, float]) -> float:
    return sum(x.get(f, 0.0) for f in _SIMILARITY)


def describe(probe: Probe, variants: list[Variant], fix: str, actions: list[dict[str, Any]],
             model: RecallModel | None = None, *, with_vectors: bool, cause_vector: Any = None) -> Evidence:
    """Features of the closest of a lesson's variants (its signature and its aliases)."""
    model = model or load_model()
    best: Evidence | None = None
    for variant in variants:
        x, comparison = features(probe, variant, fix, actions, model, with_vectors=with_vectors,
                                 cause_vector=cause_vector)
        if best is None or similarity(x) > similarity(best.features):
            best = Evidence(x, 0.0, None, comparison, variant)
    assert best is not None
    return best


def give_margins(features: list[dict[str, float]], fingerprints: list[str], lone: dict[str, float], *,
                 with_vectors: bool, cap: dict[str, float] | None = None, shared_floor: float = 0.0) -> None:
    """Set ``margin`` (and ``emb_cause_margin``, ``lex_shared_rel``) of each of one query's
    candidates: how far it is ahead of the best other candidate, at most ``cap``'s value
    (``RecallModel.margin_cap``); ``shared_floor``: ``bm25["rel_floor"]``.
    The calibration script gives simulated small stores their margins with this too."""
    sims = [similarity(x) for x in features]
    best_shared = max([shared_floor, *(math.expm1(x.get("lex_shared", 0.0)) for x in features)])
    for i, x in enumerate(features):
        # Copies of one lesson in several stores (proposed, promoted) share its fingerprint
        # and do not compete with each other.
        rivals = [j for j in range(len(features)) if fingerprints[j] != fingerprints[i]]
        # A lone candidate (a store with few lessons) has no one to be ahead of: it counts as
        # a typical leader of the calibration queries, not as infinitely far ahead.
        x["margin"] = ((sims[i] - max(sims[j] for j in rivals)) if rivals else
                       lone.get("margin_exact" if x["exact"] else "margin", sims[i]))
        # the amount of shared information against the best candidate's, or a typical right lesson's
        x["lex_shared_rel"] = math.expm1(x.get("lex_shared", 0.0)) / best_shared if best_shared > 0 else 0.0
        if with_vectors:
            # the same per feature family: is this lesson's cause the one that best describes the query?
            x["emb_cause_margin"] = ((x["emb_cause"] - max(features[j]["emb_cause"] for j in rivals)) if rivals
                                     else lone.get("emb_cause_margin", x["emb_cause"]))
        if cap:
            cap_margins(x, cap)


def cap_margins(x: dict[str, float], cap: dict[str, float]) -> None:
    """Hold one candidate's margins to ``cap`` (keys as in ``RecallModel.lone_margin``)."""
    limit = cap.get("margin_exact" if x["exact"] else "margin")
    if limit is not None:
        x["margin"] = min(x["margin"], limit)
    if "emb_cause_margin" in x and "emb_cause_margin" in cap:
        x["emb_cause_margin"] = min(x["emb_cause_margin"], cap["emb_cause_margin"])


def judge(evidence: list[Evidence], model: RecallModel | None = None, *, with_vectors: bool) -> None:
    """Probability and band of every candidate of one query (the margin compares them)."""
    model = model or load_model()
    linear = model.full if with_vectors else model.lexical
    which = "full" if with_vectors else "lexical"
    give_margins([e.features for e in evidence], [e.variant.fingerprint for e in evidence],
                 model.lone_margin.get(which, {}), with_vectors=with_vectors, cap=model.margin_cap.get(which),
                 shared_floor=model.bm25.get("rel_floor", 0.0))
    for e in evidence:
        e.text_probability, e.text_band = _judged(e, linear, model, None)
        if e.context is None:
            e.probability, e.band = e.text_probability, e.text_band
        else:
            e.probability, e.band = _judged(e, linear, model, e.context)


def _judged(e: Evidence, linear: LinearModel, model: RecallModel, context: Any) -> tuple[float, str | None]:
    """(probability, band) of one candidate, with the job's context as evidence or without."""
    # The job's context is evidence too: agreement and difference move the log-odds.
    adjust = context.adjust if context is not None else (lambda p: p)
    text_only = linear.probability(e.features)
    probability = adjust(text_only)
    found = band(probability, e.comparison, model)
    if found is None and e.comparison.conflicts_that_matter:
        # Never a silent veto: a lesson that would match but for a difference its fix
        # depends on is shown as related, with that difference spelled out.
        if adjust(linear.probability({**e.features, **_NO_CONFLICT})) >= model.match:
            found = "related"
    if context is not None and (context.inapplicable or context.contradicts):
        # The job already has what the fix asks for, lacks what the cause depends on, or its
        # facts contradict the lesson's (another request, another module version): at most
        # related, with the reasons; related whenever the text alone would match.
        if found == "match" or (found is None and text_only >= model.match):
            found = "related"
    return probability, found


def band(probability: float, comparison: Comparison, model: RecallModel) -> str | None:
    if probability >= model.match and not comparison.conflicts_that_matter:
        return "match"
    if probability >= model.related:
        return "related"
    return None
