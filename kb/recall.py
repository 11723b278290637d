"""Recall: the lessons that apply to a failure, from every store the caller can read.

Pipeline, cheapest first:

1. **exact** - lessons on the query's own fingerprint, in every store. Uses plain SQL
   (``StoreReader``): no SQLAlchemy, numpy, FAISS or model on this path.
2. **vector** - only when no exact lesson exists: FAISS neighbours of the query's
   embedding. The vector comes from the signature table or the query-vector cache when
   the template is known; the model is loaded only for a never-seen template.
3. **lexical** - when vectors are unavailable or found nothing: token overlap with the
   templates of lessons in the same category.
4. **advice** - built-in, data-driven advice for the category (lowest precedence).

Matches from all stores are merged and ranked by ``score`` (see ``_score``): similarity,
scope precedence (user > lab > cluster > built-in), status and confidence, plus a boost
when a lesson's conditions match the caller's context. Below the calibrated threshold
recall abstains: "no known lesson" is better than a wrong lesson stated with confidence.
Expired and rejected lessons are never shown unless asked for; stale ones are shown
with the reasons they went stale.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from hpcmem.kb.errors import NotFound
from hpcmem.kb.reader import StoreReader
from hpcmem.kb.redact import redact_text
from hpcmem.kb.signatures import Signature, decisive_tokens, fingerprint, template_words
from hpcmem.kb.trust import trust_level

RECALL_SCHEMA_VERSION = "1.0"

SCOPE_WEIGHT = {"user": 1.0, "lab": 0.95, "cluster": 0.9, "builtin": 0.7}
STATUS_WEIGHT = {"validated": 1.0, "candidate": 0.85, "stale": 0.6, "expired": 0.3}
DEFAULT_MIN_SIMILARITY = {"vector": 0.75, "lexical": 0.6}
NEIGHBOURS = 10
GENERIC_CATEGORIES = {"unknown"}

_TOKEN = re.compile(r"<[A-Z]+>|[A-Za-z_][A-Za-z0-9_.+/-]*|\d+")


@dataclass
class RecallQuery:
    text: str | None = None
    job_id: str | None = None
    partition: str | None = None
    modules: list[str] = field(default_factory=list)
    cluster: str | None = None
    include_expired: bool = False
    limit: int = 5
    id: Any = None


@dataclass
class Candidate:
    lesson: dict[str, Any]
    store: str
    scope: str
    match_kind: str
    similarity: float
    matched_fingerprint: str
    score: float = 0.0
    boosts: list[str] = field(default_factory=list)


def tokens(template: str) -> set[str]:
    return {t.lower() for t in _TOKEN.findall(template) if not t.startswith("<")}


def lexical_similarity(a: str, b: str) -> float:
    ta, tb = tokens(a), tokens(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def same_fix_class(query: Signature, template: str, category: str) -> bool:
    """Gates for similar (not identical) signatures, measured on the recall dev set.

    A neighbour from another failure class is a different problem, however close its
    wording (a CUDA OOM is not a host OOM). Within a class, a neighbour whose
    fix-deciding tokens are not all in the query is about a different fix:
    ``libcudnn.so.8`` vs ``libcudnn.so.9``, ``cuda/11.8`` vs ``cuda/10.2``, ``torch``
    vs ``torchvision``. Similarity alone cannot tell these apart.
    """
    if category != query.category and query.category not in GENERIC_CATEGORIES:
        return False
    return decisive_tokens(template, category) <= template_words(query.template)


def context_boost(conditions: list[dict[str, Any]], query: RecallQuery) -> tuple[float, list[str]]:
    """Reward lessons whose conditions match the caller's context; penalise conflicts."""
    boost, notes = 0.0, []
    loaded = {m.split("/", 1)[0]: m for m in query.modules}
    for cond in conditions:
        kind, name = cond["kind"], cond["name"]
        if kind == "partition" and query.partition:
            if name == query.partition:
                boost += 0.05
                notes.append(f"partition {name} matches")
            else:
                boost -= 0.05
        elif kind == "module" and loaded:
            module = name if "/" in name else f"{name}/{cond.get('value') or ''}".rstrip("/")
            base = module.split("/", 1)[0]
            if module in query.modules:
                boost += 0.05
                notes.append(f"module {module} matches")
            elif base in loaded:
                boost -= 0.03
        elif kind == "cluster" and query.cluster and name != query.cluster:
            boost -= 0.1
    return boost, notes


def _score(c: Candidate, query: RecallQuery) -> float:
    lesson = c.lesson
    status_w = STATUS_WEIGHT.get(lesson["status"], 0.5)
    confidence = float(lesson.get("confidence") or 0.0)
    boost, notes = context_boost(lesson.get("conditions", []), query)
    c.boosts = notes
    return round(c.similarity * SCOPE_WEIGHT.get(c.scope, 0.7) * status_w * (0.5 + 0.5 * confidence) + boost, 4)


class Recaller:
    """Holds open stores, the index and the model across queries (``--batch``)."""

    def __init__(self, stack, config, *, allow_model: bool = True,
                 embedder_factory: Callable[[], Any] | None = None, record_events: bool = True) -> None:
        self.stack = stack
        self.record_events = record_events
        self.config = config
        self.allow_model = allow_model
        self._embedder_factory = embedder_factory
        self._embedder = None
        self._indexes: dict[str, Any] = {}
        self.readers: list[StoreReader] = []
        self.store_status: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.min_similarity = {
            "vector": float(config.get("recall.abstain_below", DEFAULT_MIN_SIMILARITY["vector"])),
            "lexical": DEFAULT_MIN_SIMILARITY["lexical"],
        }
        self._open_readers()

    # -- stores ---------------------------------------------------------------------
    def _open_readers(self) -> None:
        from hpcmem.kb.errors import HpcmemError

        for store in self.stack.all():
            try:
                self.readers.append(StoreReader.open(store))
                self.store_status.append({"name": store.name, "scope": store.scope, "reachable": True})
            except HpcmemError as exc:
                if store is self.stack.user:
                    raise  # the caller's own store must work
                self.store_status.append({"name": store.name, "scope": store.scope, "reachable": False,
                                          "error": str(exc)})
                self.warnings.append(f"store '{store.name}' skipped: {exc}")

    def close(self) -> None:
        for reader in self.readers:
            reader.close()
        self.readers = []

    def _store_for(self, reader: StoreReader):
        return next(s for s in self.stack.all() if s.name == reader.name and s.scope == reader.scope)

    # -- the query ------------------------------------------------------------------------
    def resolve(self, query: RecallQuery) -> tuple[str, dict[str, Any] | None]:
        """The error text, and the stored occurrence when the query names a job."""
        if query.job_id is None:
            return query.text or "", None
        for reader in self.readers:
            occ = reader.occurrence_for_job(query.job_id, query.cluster)
            if occ is not None:
                query.partition = query.partition or occ.get("partition")
                query.modules = query.modules or list(occ.get("modules") or [])
                query.cluster = query.cluster or occ.get("cluster")
                text = occ.get("log_excerpt") or occ.get("message") or ""
                if query.text:
                    text = f"{query.text}\n{text}"
                return text, occ
        raise NotFound(f"no stored failure for job {query.job_id}",
                       hint="ingest it first (hpcmem ingest sacct / ingest logs), or pass the error text")

    def recall(self, query: RecallQuery) -> dict[str, Any]:
        text, occurrence = self.resolve(query)
        query.cluster = query.cluster or self.config.get("cluster.name")
        text = redact_text(text)
        sig = fingerprint(text)
        candidates = self._exact(sig, query)
        stages = ["exact"]
        if not candidates and text.strip():
            vector = self._vector(sig, query)
            stages.append("vector")
            candidates += vector
            if not vector:
                candidates += self._lexical(sig, query)
                stages.append("lexical")
        kept = []
        for c in candidates:
            c.score = _score(c, query)
            if c.match_kind == "exact" or c.similarity >= self.min_similarity.get(c.match_kind, 1.0):
                kept.append(c)
        kept += self._advice(sig, text, occurrence)
        kept.sort(key=lambda c: (-c.score, c.match_kind != "exact", c.lesson.get("lesson_id") or ""))
        matches = [self._match_json(c) for c in _dedupe(kept)[: query.limit]]
        self._remember(sig, query, matches)
        result = {
            "schema_version": RECALL_SCHEMA_VERSION,
            "query": {"fingerprint": sig.fingerprint, "template": sig.template, "category": sig.category,
                      "job_id": query.job_id, "partition": query.partition, "modules": query.modules,
                      "cluster": query.cluster},
            "matches": matches,
            "abstained": not matches,
            "seen_before": self._seen_before(sig),
            "stages": stages,
            "stores": self.store_status,
            "warnings": list(self.warnings),
        }
        if query.id is not None:
            result["id"] = query.id
        return result

    def _remember(self, sig: Signature, query: RecallQuery, matches: list[dict[str, Any]]) -> None:
        """Note the lesson recall put first, so later history can confirm or contradict it."""
        top = next((m for m in matches if m["lesson_id"]), None)
        if top is None or not self.record_events:
            return
        import getpass

        try:
            self.readers[0].execute(
                "INSERT INTO recall_events (lesson_id, store, fingerprint, user_name, cluster, job_id, recalled_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [top["lesson_id"], top["store"], sig.fingerprint, getpass.getuser(), query.cluster, query.job_id,
                 dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)],
            )
        except Exception as exc:  # noqa: BLE001 - evidence is best effort; recall must answer
            self.warnings.append(f"recall not logged for evidence: {str(exc).splitlines()[0]}")

    # -- stages -----------------------------------------------------------------------------
    def _exact(self, sig: Signature, query: RecallQuery) -> list[Candidate]:
        out = []
        for reader in self.readers:
            for lesson in reader.lessons_for_fingerprint(sig.fingerprint, include_expired=query.include_expired):
                out.append(Candidate(lesson, reader.name, reader.scope, "exact", 1.0, sig.fingerprint))
        return out

    def _query_vector(self, sig: Signature):
        """The query's embedding without the model when the template is already known."""
        from hpcmem.kb import embed

        model_id = self._model_id()
        for reader in self.readers:
            vector = embed.cached_query_vector(self._store_for(reader), sig.template, sig.category, model_id)
            if vector is not None:
                return vector
        if not self.allow_model:
            return None
        vector = self._get_embedder().encode([embed.text_for_embedding(sig.template, sig.category)])[0]
        try:
            embed.cache_query_vector(self.stack.user, sig.template, sig.category, model_id, vector)
        except Exception as exc:  # noqa: BLE001 - the cache is an optimisation, never a failure
            self.warnings.append(f"query vector not cached: {str(exc).splitlines()[0]}")
        return vector

    def _model_id(self) -> str:
        from hpcmem.kb.embed import model_spec

        return model_spec(self.config).model_id

    def _get_embedder(self):
        if self._embedder is None:
            if self._embedder_factory is not None:
                self._embedder = self._embedder_factory()
            else:
                from hpcmem.kb.embed import Embedder, model_spec

                self._embedder = Embedder(model_spec(self.config))
        return self._embedder

    def _index(self, reader: StoreReader):
        if reader.name not in self._indexes:
            from hpcmem.kb.vector_index import SignatureIndex

            store = self._store_for(reader)
            self._indexes[reader.name] = SignatureIndex.load(
                store, self.config.get("index.dir"), self._model_id(), int(self.config.get("index.flat_max", 20_000))
            )
        return self._indexes[reader.name]

    def _vector(self, sig: Signature, query: RecallQuery) -> list[Candidate]:
        try:
            vector = self._query_vector(sig)
        except ImportError as exc:  # the ml extra is not installed: lexical fallback
            self.warnings.append(f"vector search unavailable ({exc.name}); using lexical matching")
            return []
        if vector is None:
            return []
        out = []
        for reader in self.readers:
            self._embed_lesson_signatures(reader)
            index = self._index(reader)
            if not index.count:
                continue
            hits = [(sid, sim) for sid, sim in index.search(vector, NEIGHBOURS)[0] if sid >= 0]
            signatures = reader.signatures_by_ids([sid for sid, _ in hits])
            similarity = {}
            for sid, sim in hits:
                neighbour = signatures.get(sid)
                if neighbour is None or neighbour["fingerprint"] == sig.fingerprint:
                    continue
                if same_fix_class(sig, neighbour["template"], neighbour["category"]):
                    similarity[sid] = sim
            for lesson in reader.lessons_for_signatures(list(similarity), include_expired=query.include_expired):
                sid = lesson["signature_id"]
                out.append(Candidate(lesson, reader.name, reader.scope, "vector", round(float(similarity[sid]), 4),
                                     signatures[sid]["fingerprint"]))
        return out

    def _embed_lesson_signatures(self, reader: StoreReader) -> None:
        """Give new lessons' signatures their vectors (once), so the index can find them."""
        if not self.allow_model or not reader.lesson_signatures_without_vectors(self._model_id()):
            return
        from hpcmem.kb.embed import embed_missing_signatures
        from hpcmem.kb.errors import HpcmemError

        try:
            embed_missing_signatures(self._store_for(reader), self._get_embedder(), only_with_lessons=True)
        except (HpcmemError, OSError) as exc:
            self.warnings.append(f"store '{reader.name}': new lessons not embedded ({exc})")
        except Exception as exc:  # noqa: BLE001 - e.g. a read-only lab store: search what is there
            if "readonly" not in str(exc).lower() and "permission" not in str(exc).lower():
                raise
            self.warnings.append(f"store '{reader.name}' is read-only; its newest lessons are matched exactly only")

    def _lexical(self, sig: Signature, query: RecallQuery) -> list[Candidate]:
        out = []
        for reader in self.readers:
            near = {}
            for candidate in reader.lesson_signatures_in_category(sig.category):
                if candidate["fingerprint"] == sig.fingerprint:
                    continue
                if not same_fix_class(sig, candidate["template"], candidate["category"]):
                    continue
                sim = lexical_similarity(sig.template, candidate["template"])
                if sim >= self.min_similarity["lexical"]:
                    near[candidate["id"]] = (sim, candidate["fingerprint"])
            for lesson in reader.lessons_for_signatures(list(near), include_expired=query.include_expired):
                sim, fp = near[lesson["signature_id"]]
                out.append(Candidate(lesson, reader.name, reader.scope, "lexical", round(sim, 4), fp))
        return out

    def _advice(self, sig: Signature, text: str, occurrence: dict[str, Any] | None) -> list[Candidate]:
        from hpcmem.kb.advice import advice_for

        facts = {**(occurrence or {}), "template": sig.template, "message": text}
        out = []
        for i, item in enumerate(advice_for(sig.category, facts, None)):
            lesson = {
                "id": None, "lesson_id": None, "fingerprint": sig.fingerprint, "cause": item["cause"], "fix": item["fix"],
                "actions": item.get("actions", []), "status": "validated", "status_reason": None,
                "confidence": item.get("confidence", 0.5), "conditions": [], "source": "rule", "author": "hpcmem",
                "created_at": None, "evidence": [], "safety_flags": [],
            }
            c = Candidate(lesson, "builtin", "builtin", "advice", 1.0, sig.fingerprint)
            c.score = round(SCOPE_WEIGHT["builtin"] * (0.5 + 0.5 * lesson["confidence"]) * 0.5 - 0.01 * i, 4)
            out.append(c)
        return out

    def _seen_before(self, sig: Signature) -> dict[str, Any]:
        count, first, last = 0, None, None
        for reader in self.readers:
            found = reader.signature_by_fingerprint(sig.fingerprint)
            if found is None:
                continue
            count += found["count"] or 0
            first = min(filter(None, [first, found["first_seen"]]), default=None)
            last = max(filter(None, [last, found["last_seen"]]), default=None)
        return {"count": count, "first_seen": first.isoformat() if first else None,
                "last_seen": last.isoformat() if last else None}

    @staticmethod
    def _match_json(c: Candidate) -> dict[str, Any]:
        lesson = c.lesson
        stale = [lesson["status_reason"]] if lesson["status"] == "stale" and lesson.get("status_reason") else []
        return {
            "lesson_id": lesson.get("id"),
            "store": c.store,
            "scope": c.scope,
            "match_kind": c.match_kind,
            "matched_fingerprint": c.matched_fingerprint,
            "similarity": round(float(c.similarity), 4),
            "score": c.score,
            "cause": lesson["cause"],
            "fix": lesson["fix"],
            "context": lesson.get("context"),
            "actions": lesson.get("actions") or [],
            "status": lesson["status"],
            "stale_reasons": stale,
            "confidence": round(float(lesson.get("confidence") or 0), 4),
            "conditions": lesson.get("conditions", []),
            "context_matches": c.boosts,
            "safety_flags": lesson.get("safety_flags") or [],
            "trust": lesson["source"],
            "trust_level": trust_level(lesson["source"]),
            "provenance": {
                "source": lesson["source"],
                "author": lesson.get("author"),
                "created_at": lesson["created_at"].isoformat() if lesson.get("created_at") else None,
                "evidence": lesson.get("evidence", []),
            },
        }


def _dedupe(candidates: list[Candidate]) -> list[Candidate]:
    """One entry per lesson (a lesson can be reached by several stages or stores)."""
    seen, out = set(), []
    for c in candidates:
        key = (c.store, c.lesson.get("id")) if c.lesson.get("id") else (c.store, c.lesson["fix"])
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
