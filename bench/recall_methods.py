"""The recall methods the corpus benchmarks compare, over the same recorded lessons.

- hpcmem: lessons recorded with ``kb.lessons.from_error.record`` in a fresh user store, signatures
  embedded as a site would, queries answered by ``kb.recall.recaller.Recaller`` (library code only).
- BM25 (bm25s) over the raw texts the lessons were recorded from.
- raw MiniLM: cosine of the same model's embeddings of the raw texts.

Each answer is a ranked list of (class name, score); a baseline's threshold is applied by
the caller.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from recall_corpus import Plan


class HpcmemStore:
    """A temporary HPCMEM_HOME holding one lesson per known class of a plan."""

    def __init__(self, plan: Plan, model_path: str | None = None) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="hpcmem-corpus-")
        os.environ["HPCMEM_HOME"] = self.tmp.name
        os.environ["HPCMEM_DISABLE_LOCAL_CONFIG"] = "1"
        from hpcmem.kb.lessons.actions import parse_action
        from hpcmem.kb.config import load_config
        from hpcmem.kb.recall.embed import Embedder, embed_missing_signatures, model_spec
        from hpcmem.kb.errors import InputError
        from hpcmem.kb.lessons.from_error import record
        from hpcmem.kb.recall.scoring import load_model
        from hpcmem.kb.store.stack import StoreStack

        self.config = load_config()
        self.stack = StoreStack.from_config(self.config)
        self.lesson_class: dict[str, str] = {}
        for inst, cls in plan.lessons:
            actions = []
            for a in cls.actions:
                try:
                    parse_action(a)
                    actions.append(a)
                except InputError:
                    pass  # an action the corpus wrote in another form: the fix text still says it
            lesson = record(self.stack, cause=cls.cause, fix=cls.fix, author="bench", source="human",
                            error_text=inst.text, actions=actions)
            self.lesson_class[lesson["lesson_id"]] = cls.name
        self.embedder = Embedder(model_spec(self.config))
        embed_missing_signatures(self.stack.user, self.embedder)
        self.model = load_model(model_path) if model_path else load_model()

    def recaller(self, *, allow_model: bool = True):
        from hpcmem.kb.recall.recaller import Recaller

        return Recaller(self.stack, self.config, allow_model=allow_model, embedder_factory=lambda: self.embedder,
                        record_events=False, model=self.model)

    def close(self) -> None:
        self.stack.dispose()
        self.tmp.cleanup()


def hpcmem_answers(store: HpcmemStore, queries, *, allow_model: bool = True) -> dict[str, dict[str, Any]]:
    """Per query id: ranked [(class, probability, band)] of stored lessons, and whether it abstained."""
    from hpcmem.kb.recall.recaller import RecallQuery

    recaller = store.recaller(allow_model=allow_model)
    out = {}
    try:
        for q in queries:
            result = recaller.recall(RecallQuery(text=q.text, limit=5))
            out[q.id] = {
                "ranked": [(store.lesson_class[m["lesson_id"]], m["probability"], m["band"]) for m in result["matches"]],
                "abstained": result["abstained"],
                "category": result["query"]["category"],
                "stages": result["stages"],
            }
    finally:
        recaller.close()
    return out


def bm25_scores(plan: Plan) -> dict[str, list[tuple[str, float]]]:
    """BM25 over the raw recorded texts (no normalisation): ranked (class, score) per query."""
    import bm25s

    docs = [inst.text for inst, _ in plan.lessons]
    names = [cls.name for _, cls in plan.lessons]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(docs, stopwords=None, show_progress=False), show_progress=False)
    out = {}
    for q in plan.queries:
        tokens = bm25s.tokenize([q.text], stopwords=None, show_progress=False)
        k = min(5, len(docs))
        results, scores = retriever.retrieve(tokens, k=k, show_progress=False)
        out[q.id] = [(names[int(i)], float(s)) for i, s in zip(results[0], scores[0]) if float(s) > 0]
    return out


def minilm_scores(plan: Plan, embedder) -> dict[str, list[tuple[str, float]]]:
    """Cosine of the MiniLM embeddings of the raw texts: ranked (class, score) per query."""
    import numpy as np

    docs = embedder.encode([inst.text for inst, _ in plan.lessons])
    names = [cls.name for _, cls in plan.lessons]
    queries = embedder.encode([q.text for q in plan.queries])
    sims = queries @ docs.T
    out = {}
    for q, row in zip(plan.queries, sims):
        order = np.argsort(-row)[:5]
        out[q.id] = [(names[int(i)], float(row[i])) for i in order]
    return out
