"""kb/scoring.py without a store: lex_fix (the lesson's fix vocabulary in the query), the recalibration."""

from __future__ import annotations

from hpcmem.kb.scoring import FULL_FEATURES, LEXICAL_FEATURES, Probe, Variant, features, load_model
from hpcmem.kb.signatures import excerpt_template, fingerprint


def _variant(text: str) -> Variant:
    sig = fingerprint(text)
    return Variant(sig.fingerprint, sig.template, sig.category, excerpt_template(text))


LESSON = "Python 3.8.10 (default)\n>>> import numpy\nIllegal instruction (core dumped)"
FIX = "Set OPENBLAS_CORETYPE=ARMV8 before starting Python, or pin numpy to 1.19.4."


def test_lex_fix_counts_query_words_the_fix_names_beyond_the_shared_decisive_line():
    model = load_model()
    names_it = "OpenBLAS : Your OS does not support AVX instructions. OPENBLAS_CORETYPE=ARMV8\nIllegal instruction (core dumped)"
    plain = "./a.out\nIllegal instruction (core dumped)"
    with_fix, _ = features(Probe.of(names_it, fingerprint(names_it)), _variant(LESSON), FIX, [], model,
                           with_vectors=False)
    without, _ = features(Probe.of(plain, fingerprint(plain)), _variant(LESSON), FIX, [], model, with_vectors=False)
    assert without["lex_fix"] == 0.0  # "illegal", "instruction": the decisive line both share does not count
    assert 0.0 < with_fix["lex_fix"] <= 1.0


def test_lex_fix_is_a_lexical_feature():
    assert "lex_fix" in FULL_FEATURES and "lex_fix" in LEXICAL_FEATURES
    assert "lex_fix" in load_model().lexical.features


def test_emb_cause_and_its_margin_are_full_model_features_only():
    assert {"emb_cause", "emb_cause_margin"} <= set(FULL_FEATURES) & set(load_model().full.features)
    assert not {"emb_cause", "emb_cause_margin"} & set(LEXICAL_FEATURES)
    assert not {"emb_cause", "emb_cause_margin"} & set(load_model().lexical.features)


def test_emb_cause_margin_is_ahead_of_the_best_other_lessons_cause():
    from hpcmem.kb.scoring import describe, judge

    model = load_model()
    query = "./a.out\nIllegal instruction (core dumped)"
    probe = Probe.of(query, fingerprint(query))
    probe.vectors = {"decisive": (1.0, 0.0, 0.0), "excerpt": (1.0, 0.0, 0.0)}
    near, far = _variant(LESSON), _variant("Segmentation fault (core dumped)")
    for v in (near, far):
        v.vectors = {"decisive": (0.0, 1.0, 0.0), "excerpt": (0.0, 1.0, 0.0)}
    told = describe(probe, [near], FIX, [], model, with_vectors=True, cause_vector=(0.8, 0.6, 0.0))
    other = describe(probe, [far], FIX, [], model, with_vectors=True, cause_vector=(0.2, 0.0, 0.98))
    without = describe(probe, [far], FIX, [], model, with_vectors=False, cause_vector=(0.2, 0.0, 0.98))
    judge([told, other], model, with_vectors=True)
    assert abs(told.features["emb_cause"] - 0.8) < 1e-9
    assert abs(told.features["emb_cause_margin"] - 0.6) < 1e-9
    assert abs(other.features["emb_cause_margin"] + 0.6) < 1e-9
    assert told.probability > other.probability
    judge([without], model, with_vectors=False)
    assert "emb_cause" not in without.features and "emb_cause_margin" not in without.features


def test_exact_margin_is_the_margin_of_exact_hits_only():
    from hpcmem.kb.scoring import describe, judge

    model = load_model()
    assert "exact_margin" in model.full.features and "exact_margin" in model.lexical.features
    query = "Python 3.9.7\n>>> import numpy\nIllegal instruction (core dumped)"
    probe = Probe.of(query, fingerprint(query))
    exact = describe(probe, [_variant(LESSON)], FIX, [], model, with_vectors=False)
    other = describe(probe, [_variant("Segmentation fault (core dumped)")], FIX, [], model, with_vectors=False)
    judge([exact, other], model, with_vectors=False)
    assert exact.features["exact"] == 1.0 and other.features["exact"] == 0.0
    assert exact.features["exact_margin"] == exact.features["margin"] > 0
    assert other.features["exact_margin"] == 0.0 and other.features["margin"] < 0


# ----------------------------------------------------------------------------- recalibration

def _old_band(p: float, blocked: bool, model) -> str | None:
    """The band as decided before the recalibration: the logistic's output against bands.*"""
    if p >= model.match and not blocked:
        return "match"
    return "related" if p >= model.related else None


def test_recalibration_is_monotone_and_a_probability():
    model = load_model()
    for linear in (model.full, model.lexical):
        r = linear.recalibration
        assert r.scale > 0 and r.leader >= 0
        zs = [z / 100 for z in range(-4000, 4001, 7)]
        for leads in (False, True):
            ps = [r(z, leads) for z in zs]
            assert all(0.0 <= p <= 1.0 for p in ps)
            assert all(a <= b for a, b in zip(ps, ps[1:]))
        assert all(r(z, True) >= r(z, False) for z in zs)  # the leader, already first, stays first


def test_recalibration_keeps_every_decision_on_calibration_feature_rows():
    """The four most probable candidates of each calibration query (features only, classes
    hashed; bench/fit_recall_model.py's collection): band, answer and order are those of the
    logistic before the recalibration."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from hpcmem.kb.scoring import band

    model = load_model()
    data = json.loads((Path(__file__).parent / "data" / "recall_calibration_rows.json").read_text())
    checked = 0
    for q in data["queries"]:
        for name in ("full", "lexical"):
            linear = getattr(model, name)
            names = data[f"{name}_features"]
            rows = [(cls, bool(blocked), linear.logit(dict(zip(names, x)))) for cls, blocked, x in q[name]]
            new, old = [], []
            for cls, blocked, z in rows:
                leads = z >= max((z2 for c2, _, z2 in rows if c2 != cls), default=-1e9)
                p_new = linear.recalibration(z, leads)
                match, related = linear.thresholds(model.match, model.related, leads)
                assert 0.0 <= p_new <= 1.0
                new.append((band(p_new, SimpleNamespace(conflicts_that_matter=blocked), match, related), p_new, cls))
                p_old = linear.probability(dict(zip(names, q[name][[r[0] for r in rows].index(cls)][2])))
                old.append((_old_band(p_old, blocked, model), p_old, cls))
                checked += 1
            assert [b for b, _, _ in new] == [b for b, _, _ in old]
            # order by probability is the order by the logistic's output (and so is the answer)
            assert [c for _, p, c in sorted(new, key=lambda t: -t[1])] == [c for _, p, c in sorted(old, key=lambda t: -t[1])]
    assert checked > 1500


def test_judge_orders_by_the_logistic_and_bands_with_mapped_thresholds():
    from hpcmem.kb.scoring import describe, judge

    model = load_model()
    query = "OpenBLAS : Your OS does not support AVX instructions. OPENBLAS_CORETYPE=ARMV8\nIllegal instruction (core dumped)"
    probe = Probe.of(query, fingerprint(query))
    a = describe(probe, [_variant(LESSON)], FIX, [], model, with_vectors=False)
    b = describe(probe, [_variant("Segmentation fault (core dumped)")], "ulimit -s unlimited", [], model,
                 with_vectors=False)
    judge([a, b], model, with_vectors=False)
    assert a.score > b.score and a.probability > b.probability
    for e in (a, b):
        assert 0.0 <= e.probability <= 1.0
        assert e.band == _old_band(e.score, bool(e.comparison.conflicts_that_matter), model)
