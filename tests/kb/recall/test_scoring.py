"""kb/recall/scoring.py features that need no store: lex_fix (the lesson's fix vocabulary in the query)."""

from __future__ import annotations

from hpcmem.kb.recall.scoring import FULL_FEATURES, LEXICAL_FEATURES, Probe, Variant, features, load_model
from hpcmem.kb.signatures.fingerprint import excerpt_template, fingerprint


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
    from dataclasses import replace

    from hpcmem.kb.recall.scoring import describe, judge

    model = replace(load_model(), margin_cap={})  # the lead itself (the cap has its own test)
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


def test_the_shipped_model_never_counts_evidence_against_a_lesson():
    """Monotone in each signal: more agreement never lowers the probability, a conflict never
    raises it (bench/fit_recall_model.py holds the weights to these signs)."""
    model = load_model()
    against = {"conflict_matters", "conflict_version", "version_gap"}
    free = {"query_unknown", "conflict_name"}
    for linear in (model.full, model.lexical):
        for name, weight in zip(linear.features, linear.weights):
            if name in against:
                assert weight <= 0, name
            elif name not in free:
                assert weight >= 0, name


def test_a_lone_candidate_counts_as_a_typical_leader_not_infinitely_far_ahead():
    from hpcmem.kb.recall.scoring import describe, judge

    model = load_model()
    query = "Python 3.9.7\n>>> import numpy\nIllegal instruction (core dumped)"
    probe = Probe.of(query, fingerprint(query))
    exact = describe(probe, [_variant(LESSON)], FIX, [], model, with_vectors=False)
    judge([exact], model, with_vectors=False)
    assert exact.features["exact"] == 1.0
    assert exact.features["margin"] == model.lone_margin["lexical"]["margin_exact"]
    other = describe(probe, [_variant("Segmentation fault (core dumped)")], FIX, [], model, with_vectors=False)
    judge([other], model, with_vectors=False)
    assert other.features["margin"] == model.lone_margin["lexical"]["margin"]
    assert other.probability < exact.probability


def test_margins_are_against_the_best_rival_and_copies_of_one_lesson_do_not_compete():
    from hpcmem.kb.recall.scoring import give_margins

    def x(sim: float, cause: float) -> dict:
        return {"exact": 0.0, "lex_lesson": sim, "lex_decisive": 0.0, "emb_decisive": 0.0, "emb_excerpt": 0.0,
                "emb_cause": cause}

    rows = [x(0.9, 0.5), x(0.9, 0.5), x(0.4, 0.7), x(0.1, 0.1)]
    give_margins(rows, ["fp-a", "fp-a", "fp-b", "fp-c"], {}, with_vectors=True)
    assert [round(r["margin"], 6) for r in rows] == [0.5, 0.5, -0.5, -0.8]  # the copy is no rival
    assert [round(r["emb_cause_margin"], 6) for r in rows] == [-0.2, -0.2, 0.2, -0.6]
    alone = [x(0.3, 0.2), x(0.3, 0.2)]
    give_margins(alone, ["fp-a", "fp-a"], {"margin": 0.25, "emb_cause_margin": 0.01}, with_vectors=True)
    assert [(r["margin"], r["emb_cause_margin"]) for r in alone] == [(0.25, 0.01), (0.25, 0.01)]
    lexical = [x(0.3, 0.2)]
    give_margins(lexical, ["fp-a"], {}, with_vectors=False)
    assert lexical[0]["margin"] == 0.3 and "emb_cause_margin" not in lexical[0]


def test_a_lead_counts_at_most_its_cap_and_exact_hits_have_their_own():
    from hpcmem.kb.recall.scoring import give_margins

    def x(sim: float, cause: float, exact: float = 0.0) -> dict:
        return {"exact": exact, "lex_lesson": sim, "lex_decisive": 0.0, "emb_decisive": 0.0, "emb_excerpt": 0.0,
                "emb_cause": cause}

    cap = {"margin": 0.2, "margin_exact": 0.6, "emb_cause_margin": 0.05}
    rows = [x(0.9, 0.5), x(0.1, 0.1), x(0.0, 0.0)]
    give_margins(rows, ["fp-a", "fp-b", "fp-c"], {}, with_vectors=True, cap=cap)
    # far ahead of two unrelated lessons: the lead is held to the cap; those behind keep theirs
    assert [round(r["margin"], 6) for r in rows] == [0.2, -0.8, -0.9]
    assert [round(r["emb_cause_margin"], 6) for r in rows] == [0.05, -0.4, -0.5]
    exact = [x(0.9, 0.5, exact=1.0), x(0.1, 0.1)]
    give_margins(exact, ["fp-a", "fp-b"], {}, with_vectors=False, cap=cap)
    assert exact[0]["margin"] == 0.6  # 1.9 - 0.1 = 1.8, held to the exact hits' cap


def test_a_models_margin_cap_is_read_and_applied_when_judging(tmp_path):
    import json
    from pathlib import Path

    from hpcmem.kb.recall.scoring import MODEL_PATH, describe, judge

    spec = json.loads(Path(MODEL_PATH).read_text(encoding="utf-8"))
    spec["margin_cap"] = {"lexical": {"margin": 0.05, "margin_exact": 0.07}}
    path = tmp_path / "capped.json"
    path.write_text(json.dumps(spec))
    capped, shipped = load_model(str(path)), load_model()
    assert capped.margin_cap["lexical"] == {"margin": 0.05, "margin_exact": 0.07}

    query = "Python 3.9.7\n>>> import numpy\nIllegal instruction (core dumped)"
    probe = Probe.of(query, fingerprint(query))
    leads = {}
    for name, model in (("capped", capped), ("shipped", shipped)):
        near = describe(probe, [_variant(LESSON)], FIX, [], model, with_vectors=False)
        far = describe(probe, [_variant("slurmstepd: error: Detected 1 oom_kill event in StepId=7.batch")], FIX, [],
                       model, with_vectors=False)
        judge([near, far], model, with_vectors=False)
        leads[name] = near.features["margin"]
    assert leads["shipped"] > 0.07  # far ahead of an unrelated lesson...
    assert leads["capped"] == 0.07  # ...counts as the cap (an exact hit: margin_exact)


def test_lex_shared_is_the_amount_of_rare_information_two_excerpts_share():
    """Loader errors in their real wording: a longer match on rare words counts more; a lesson that
    shares only common words counts little; the leader's relative amount is 1."""
    from hpcmem.kb.recall.scoring import describe, judge

    model = load_model()
    query = ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\n"
             "  File \"/opt/app/lib/python3.8/site-packages/tensorflow/python/platform/self_check.py\"")
    probe = Probe.of(query, fingerprint(query))
    same = _variant("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory")
    other = _variant("ImportError: No module named 'torch'")
    with_same, _ = features(probe, same, "module load cuda/11.0", [], model, with_vectors=False)
    with_other, _ = features(probe, other, "pip install torch", [], model, with_vectors=False)
    assert with_same["lex_shared"] > with_other["lex_shared"] > 0.0

    # BM25's length normalisation: the same shared words in a longer lesson count less
    longer = _variant(same.excerpt + "\n" + "\n".join(f"warning: unrelated line {w}" for w in
                                                        ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")))
    with_longer, _ = features(probe, longer, "module load cuda/11.0", [], model, with_vectors=False)
    assert with_longer["lex_shared"] < with_same["lex_shared"]

    near = describe(probe, [same], "module load cuda/11.0", [], model, with_vectors=False)
    far = describe(probe, [other], "pip install torch", [], model, with_vectors=False)
    judge([near, far], model, with_vectors=False)
    assert near.features["lex_shared_rel"] == 1.0
    assert 0.0 < far.features["lex_shared_rel"] < 1.0
    lone = describe(probe, [other], "pip install torch", [], model, with_vectors=False)
    judge([lone], model, with_vectors=False)
    assert lone.features["lex_shared_rel"] == 1.0  # nothing to be behind


def test_a_models_rel_floor_keeps_a_weak_leader_of_a_few_lessons_below_one(tmp_path):
    """Leading a store of one unrelated lesson is not leading: with ``bm25["rel_floor"]`` the
    relative amount divides by at least the floor, while a strong leader still gets 1."""
    import json
    import math
    from pathlib import Path

    from hpcmem.kb.recall.scoring import MODEL_PATH, describe, judge

    query = ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\n"
             "  File \"/opt/app/lib/python3.8/site-packages/tensorflow/python/platform/self_check.py\"")
    probe = Probe.of(query, fingerprint(query))
    same = _variant("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory")
    other = _variant("ImportError: No module named 'torch'")
    shipped = load_model()
    strong, _ = features(probe, same, "module load cuda/11.0", [], shipped, with_vectors=False)
    weak, _ = features(probe, other, "pip install torch", [], shipped, with_vectors=False)
    floor = (math.expm1(strong["lex_shared"]) + math.expm1(weak["lex_shared"])) / 2  # between the two

    spec = json.loads(Path(MODEL_PATH).read_text(encoding="utf-8"))
    spec["bm25"] = {**spec.get("bm25", {}), "rel_floor": floor}
    path = tmp_path / "floored.json"
    path.write_text(json.dumps(spec))
    model = load_model(str(path))
    assert model.bm25["rel_floor"] == floor

    lone_weak = describe(probe, [other], "pip install torch", [], model, with_vectors=False)
    judge([lone_weak], model, with_vectors=False)
    assert 0.0 < lone_weak.features["lex_shared_rel"] < 1.0
    lone_strong = describe(probe, [same], "module load cuda/11.0", [], model, with_vectors=False)
    judge([lone_strong], model, with_vectors=False)
    assert lone_strong.features["lex_shared_rel"] == 1.0
    # the shipped model has no floor: a lone leader counts as 1 whatever it shares
    unfloored = describe(probe, [other], "pip install torch", [], shipped, with_vectors=False)
    judge([unfloored], shipped, with_vectors=False)
    assert unfloored.features["lex_shared_rel"] == 1.0
