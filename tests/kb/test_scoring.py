"""kb/scoring.py features that need no store: lex_fix (the lesson's fix vocabulary in the query)."""

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
