"""Recall's decisions on every calibration query, to compare two scorers' decisions.

    .venv/bin/python bench/recall_decisions.py OUT.json [--model kb/rules/recall_model.json]

Per query (full model, and lexical with ``--no-model``): abstained or not, and every shown
lesson (limit 40) in recall's order as (class, band, score, probability). Two dumps made
before and after a change to the scorer decide alike when everything but ``probability``
is equal (``--compare A B``). Calibration part only; the held-out part is never loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def dump(model_path: str | None) -> dict:
    from hpcmem.kb.recall import RecallQuery
    from recall_corpus import plan
    from recall_methods import HpcmemStore

    cal = plan("calibration")
    store = HpcmemStore(cal, model_path=model_path)
    out: dict = {}
    try:
        for mode, allow in (("lexical", False), ("full", True)):  # lexical first: no query vectors cached yet
            recaller = store.recaller(allow_model=allow)
            try:
                for q in cal.queries:
                    r = recaller.recall(RecallQuery(text=q.text, limit=40))
                    out.setdefault(mode, {})[q.id] = {
                        "abstained": r["abstained"], "stages": r["stages"],
                        "shown": [(store.lesson_class[m["lesson_id"]], m["band"], m["score"], m["probability"])
                                  for m in r["matches"]]}
            finally:
                recaller.close()
    finally:
        store.close()
    return out


def compare(a: dict, b: dict) -> int:
    differ = 0
    for mode in a:
        for qid, x in a[mode].items():
            y = b[mode][qid]
            same = (x["abstained"] == y["abstained"] and x["stages"] == y["stages"]
                    and [s[:3] for s in x["shown"]] == [s[:3] for s in y["shown"]])
            differ += not same
        print(f"{mode}: {len(a[mode])} queries, {sum(len(v['shown']) for v in a[mode].values())} shown lessons")
    print(f"queries whose decisions differ: {differ}")
    return differ


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--model")
    ap.add_argument("--compare", nargs=2, type=Path)
    args = ap.parse_args()
    if args.compare:
        raise SystemExit(1 if compare(*(json.loads(p.read_text()) for p in args.compare)) else 0)
    args.out.write_text(json.dumps(dump(args.model), indent=0) + "\n")


if __name__ == "__main__":
    main()
