"""Does hpcmem's masking cost ranking, or its scoring? BM25 over hpcmem's own masked excerpt
words, on the calibration and validation parts only (never heldout): known top-1 with the
model's IDF table ("frozen"), the store's lessons' ("store") or their mean ("both"), and the
unnormalised IDF sum of shared words (no term frequency, no length normalisation).

    .venv/bin/python bench/experiments/bm25_ranking_experiment.py calibration validation
"""

from __future__ import annotations

import collections
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the corpus and methods

from recall_corpus import plan  # noqa: E402


def known_top1(p, idf_mode: str, k1: float = 1.2, b: float = 0.75, term_frequency: bool = True) -> float:
    from hpcmem.kb.recall.scoring import load_model
    from hpcmem.kb.signatures.fingerprint import excerpt_template, words

    model = load_model()
    docs = [list(words(excerpt_template(i.text))) for i, _ in p.lessons]
    if not term_frequency:
        docs = [list(dict.fromkeys(d)) for d in docs]
    names = [c.name for _, c in p.lessons]
    n = len(docs)
    df = collections.Counter(w for d in docs for w in set(d))
    average = sum(map(len, docs)) / n
    tfs = [collections.Counter(d) for d in docs]

    def idf(w: str) -> float:
        store = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
        return {"store": store, "frozen": model.weight(w), "both": (store + model.weight(w)) / 2}[idf_mode]

    right = 0
    for q in p.recurrences:
        qw = set(words(excerpt_template(q.text)))
        scores = [sum(idf(w) * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(d) / average)) for w in qw if w in tf)
                  for d, tf in zip(docs, tfs)]
        best = max(range(n), key=lambda i: scores[i])
        right += scores[best] > 0 and names[best] == q.cls
    return round(right / len(p.recurrences), 3)


def main() -> None:
    for part in sys.argv[1:] or ["calibration"]:
        if part.startswith("heldout"):
            raise SystemExit("the held-out part only ever reports (bench_recall_quality.py)")
        p = plan(part)
        print(part, {m: known_top1(p, m) for m in ("store", "frozen", "both")},
              "unnormalised IDF sum:", known_top1(p, "frozen", b=0, term_frequency=False))


if __name__ == "__main__":
    main()
