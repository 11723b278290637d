"""Experiment: bands from the shipped fit, the order inside the match band from another fit.

    .venv/bin/python bench/experiments/rank_within_band_experiment.py RANKER_MODEL.json [--part calibration]

A fit that uses ``lex_shared`` ranks better but abstains less (docs/benchmarks.md, "Fits that
keep lex_shared"). Taking only its order among the lessons the shipped fit already puts in
the match band keeps the shipped abstention on every query, in any store, by construction;
known top-1 can change only where two or more lessons are in the match band. Prints
aggregates only; never the held-out part.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/: the corpus, methods and fit it reuses
sys.path.insert(0, str(HERE))

from recall_corpus import plan  # noqa: E402


def answer(shipped: list, ranker: list, reorder: bool) -> str | None:
    """The class applied: the shipped fit's first match, or the ranker's favourite among
    the shipped matches (a lesson the ranker does not show counts as 0)."""
    matches = [cls for cls, _p, band in shipped if band == "match"]
    if not matches:
        return None
    if not reorder:
        return matches[0]
    score = {cls: p for cls, p, _band in ranker}
    return max(matches, key=lambda cls: (score.get(cls, 0.0), -matches.index(cls)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ranker", type=Path, help="recall_model.json of the fit that orders the match band")
    ap.add_argument("--part", default="calibration", choices=("calibration", "validation"))
    args = ap.parse_args()

    from recall_methods import HpcmemStore, hpcmem_answers

    from hpcmem.kb.recall.scoring import load_model

    p = plan(args.part)
    store = HpcmemStore(p)
    try:
        shipped = hpcmem_answers(store, p.queries)
        store.model = load_model(str(args.ranker))
        ranker = hpcmem_answers(store, p.queries)
    finally:
        store.close()
    several = sum(sum(b == "match" for _c, _p, b in shipped[q.id]["ranked"]) > 1 for q in p.recurrences)
    for reorder in (False, True):
        top1 = sum(answer(shipped[q.id]["ranked"], ranker[q.id]["ranked"], reorder) == q.cls for q in p.recurrences)
        abstained = sum(answer(shipped[q.id]["ranked"], ranker[q.id]["ranked"], reorder) is None for q in p.no_lesson)
        print(json.dumps({
            "part": args.part, "order_in_match_band": "ranker" if reorder else "shipped",
            "known_top1": round(top1 / len(p.recurrences), 4),
            "abstention": round(abstained / len(p.no_lesson), 4),
            "decision_accuracy": round((top1 + abstained) / len(p.queries), 4),
            "recurrences_with_several_matches": round(several / len(p.recurrences), 4),
        }))


if __name__ == "__main__":
    main()
