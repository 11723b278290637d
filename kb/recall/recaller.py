"""Recall: the lessons that apply to a failure, from every store the caller can read.

Candidates are found cheaply, then every candidate is scored (``kb/recall/scoring.py``): the
fingerprint finds candidates, it does not decide.

1. **exact** - lessons on the query's own fingerprint or on one of their aliases (confirmed
   variants), in every store. Plain SQL (``StoreReader``) and the pure-Python lexical model:
   no SQLAlchemy, numpy, FAISS or embedding model. When one of them is in the *match* band,
   recall answers here.
2. **wide** - otherwise: FAISS neighbours of the query's decisive line, plus the lessons whose
   excerpts share the most rare words with the query. All candidates (the exact ones too)
   are scored with the full model, embeddings included; the model is loaded only for text
   whose vector is not cached. Without the model (``--no-model`` or no ``ml`` extra) the
   lexical model scores them.

Each lesson gets a calibrated probability and a band: **match** (apply it) or **related**
(shown with what differs). Below the related band it is dropped. The match band starts at
the fitted threshold, or at a site's ``recall.match_probability``. Lessons that tie the first
exactly but prescribe another fix are all related (``tied_with``): the text cannot choose.
``abstained`` is true when no stored lesson is in the match band. Built-in advice
(``advice``) stands apart from the stored lessons in ``matches``. Expired and rejected lessons are never shown unless asked
for; stale ones are shown with the reasons they went stale.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Callable

from hpcmem.kb.errors import InputError, NotFound
from hpcmem.kb.store.reader import StoreReader
from hpcmem.kb.recall.fixtokens import fix_text
from hpcmem.kb.recall.scoring import (Evidence, Probe, Variant, describe, judge, load_model, with_match_probability,
                                      with_failure_chain, without_rejection_wording)
from hpcmem.kb.signatures.rules_digest import warn_if_stale
from hpcmem.kb.safety.normalise import scrub_value
from hpcmem.kb.signatures.fingerprint import (CONTENTLESS, FailureSignature, fingerprint, has_content, signature_text,
                                               words)
from hpcmem.kb.safety.trust import trust_level

RECALL_SCHEMA_VERSION = "2.2"

SCOPE_ORDER = {"user": 0, "lab": 1, "cluster": 2}
# Order among lessons that apply equally well: own store first, validated and confirmed first.
SCOPE_WEIGHT = {"user": 1.0, "lab": 0.95, "cluster": 0.9}
STATUS_WEIGHT = {"validated": 1.0, "candidate": 0.85, "stale": 0.6, "expired": 0.3}
NEIGHBOURS = 10
LEXICAL_CANDIDATES = 10
LEXICAL_CANDIDATES_WITH_TIES = 4 * LEXICAL_CANDIDATES
LEXICAL_SCAN_LIMIT = 5000


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
    # The job's facts (kb/jobs/context.FIELDS) from --script, --sbatch-args, MCP's context
    # object; completed from the stored job (--job) and a pasted `sbatch` line.
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class Candidate:
    lesson: dict[str, Any]
    store: str
    scope: str
    found_by: str  # exact | alias | vector | lexical
    evidence: Evidence | None = None
    boosts: list[str] = field(default_factory=list)
    rank_score: float = 0.0
    variants: list[Variant] = field(default_factory=list)
    tied_with: list[str] = field(default_factory=list)  # lesson ids: see unresolved_ties
    cause_vector: Any = None

    def __post_init__(self) -> None:
        self.variants = self.variants or variants_of(self.lesson)

    def describe(self, probe: Probe, model, *, with_vectors: bool) -> Evidence:
        self.evidence = describe(probe, self.variants, self.lesson["fix"], self.lesson.get("actions") or [],
                                 model, with_vectors=with_vectors, cause_vector=self.cause_vector)
        began_alike = False
        if probe.context and self.lesson.get("job_context"):
            # both are a job's output, not a pasted excerpt: what each began with is evidence
            self.evidence, began_alike = with_failure_chain(
                self.evidence, probe, fix_text(self.lesson["fix"], self.lesson.get("actions") or []))
        if probe.context:
            from hpcmem.kb.recall.context_match import compare

            category = self.lesson.get("category") or "unknown"
            self.evidence.context = compare(
                probe.context, self.lesson.get("job_context") or {}, actions=self.lesson.get("actions") or [],
                conditions=self.lesson.get("conditions") or [],
                category=category if category != "unknown" else probe.signature.category,
                weights=model.context_weights,
                mentioned=" ".join((probe.signature.template, self.lesson.get("template") or "", self.lesson["fix"])))
            if began_alike:
                from hpcmem.kb.recall.context_match import DEFAULT_WEIGHTS

                self.evidence.context.agree.append("the failure it began with")
                self.evidence.context.shift += {**DEFAULT_WEIGHTS, **(model.context_weights or {})}["agree_fix"]
            if probe.site is not None and _judge_by_site(self.evidence.context, probe.site, self.lesson,
                                                         model.context_weights):
                # Slurm words one broken limit in several messages ("CPU count per node can not
                # be satisfied", "More processors requested than permitted"): with the limit
                # known to be the same, their wording is no longer a difference
                self.evidence = without_rejection_wording(self.evidence)
        return self.evidence


def _judge_by_site(verdict, site, lesson: dict[str, Any], weights: dict[str, float] | None) -> bool:  # noqa: ANN001
    """The limit each job broke, from the site's limits (recall/site_match.py): the same one
    is agreement on what the fix is about; another one makes the lesson inapplicable.
    True when both jobs broke the same limit."""
    from hpcmem.kb.recall.context_match import DEFAULT_WEIGHTS
    from hpcmem.kb.recall.site_match import judge

    found = judge(site, lesson)
    if found is None:
        return False
    w = {**DEFAULT_WEIGHTS, **(weights or {})}
    if found.agrees:
        # The same cause: values differing on what that limit is about (another amount, GPU
        # type or account) and the program the refused job would have run no longer contradict.
        kept = [d for d in verdict.differs if d["field"] not in found.covers]
        for dropped in verdict.differs:
            if dropped["field"] in found.covers:
                strong = dropped["field"] in verdict.contradicting
                verdict.shift += w["differs_fix" if strong else "differs_relevant"]
        verdict.differs = kept
        verdict.contradicting = [f for f in verdict.contradicting if f not in found.covers]
        for d in verdict.differs:
            if d["field"] in found.paired:  # another account/partition pair: another fix
                d["matters"] = True
                if d["field"] not in verdict.contradicting:
                    verdict.contradicting.append(d["field"])
        verdict.contradicts = bool(verdict.contradicting)
        verdict.agree.append(f"broken limit ({found.query})")
        verdict.shift += w["agree_fix"]
        return True
    verdict.inapplicable.append(found.reason)
    verdict.differs.append({"field": "broken limit", "query": found.query, "lesson": found.lesson,
                            "kind": "context", "matters": True})
    verdict.shift -= w["differs_fix"]
    verdict.contradicts = True
    return False


def context_boost(conditions: list[dict[str, Any]], query: RecallQuery) -> tuple[float, list[str]]:
    """Order lessons whose conditions match the caller's context first; conflicts last."""
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


def variants_of(lesson: dict[str, Any]) -> list[Variant]:
    """The forms a stored lesson is known under: its signature and its aliases."""
    own = Variant(lesson["fingerprint"], lesson.get("template") or "", lesson.get("category") or "unknown",
                  lesson.get("excerpt") or lesson.get("template") or "")
    return [own] + [Variant(a["fingerprint"], a["template"], a["category"], a.get("excerpt") or a["template"])
                    for a in lesson.get("aliases", [])]


class Recaller:
    """Holds open stores, the scorer, the index and the model across queries (``--batch``)."""

    def __init__(self, stack, config, *, allow_model: bool = True,
                 embedder_factory: Callable[[], Any] | None = None, record_events: bool = True,
                 model=None) -> None:
        self.stack = stack
        self.record_events = record_events
        self.config = config
        self.allow_model = allow_model
        self.model = with_match_probability(model or load_model(), config.get("recall.match_probability"))
        self._embedder_factory = embedder_factory
        self._embedder = None
        self._model_id_cache: str | None = None
        self._indexes: dict[str, Any] = {}
        self._vector_memo: dict[tuple[str, str], Any] = {}
        self.readers: list[StoreReader] = []
        self.store_status: list[dict[str, Any]] = []
        self.warnings: list[str] = list(getattr(config, "warnings", []))
        self._open_readers()

    # -- stores ---------------------------------------------------------------------
    def _open_readers(self) -> None:
        """The user's store first (it must work), then the shared ones: server stores are
        connected in parallel with a short timeout, so servers that are down cost recall one
        timeout (``recall.connect_timeout_seconds``) in all, with a warning each."""
        from concurrent.futures import ThreadPoolExecutor

        from hpcmem.kb.errors import HpcmemError

        timeout = float(self.config.get("recall.connect_timeout_seconds", 2.0))
        stores = self.stack.all()
        self.readers.append(StoreReader.open(stores[0], timeout))
        self.store_status.append({"name": stores[0].name, "scope": stores[0].scope, "reachable": True})

        def attempt(store):
            try:
                return StoreReader.open(store, timeout)
            except HpcmemError as exc:
                return exc

        remote = [s for s in stores[1:] if s.dialect != "sqlite"]
        opened: dict[int, Any] = {}
        if remote:
            with ThreadPoolExecutor(max_workers=len(remote), thread_name_prefix="hpcmem-connect") as pool:
                opened = {id(s): f for s, f in zip(remote, pool.map(attempt, remote))}
        for store in stores[1:]:
            # SQLite readers are opened here, in the thread that uses them
            got = opened[id(store)] if id(store) in opened else attempt(store)
            if isinstance(got, HpcmemError):
                self.store_status.append({"name": store.name, "scope": store.scope, "reachable": False,
                                          "error": str(got)})
                self.warnings.append(f"store '{store.name}' skipped: {got}")
            else:
                self.readers.append(got)
                self.store_status.append({"name": store.name, "scope": store.scope, "reachable": True})
        warn_if_stale(self.readers)  # stderr only: recall's JSON stays as it is

    def close(self) -> None:
        for reader in self.readers:
            reader.close()
        self.readers = []

    def _store_for(self, reader: StoreReader):
        return next(s for s in self.stack.all() if s.name == reader.name and s.scope == reader.scope)

    # -- the query ------------------------------------------------------------------------
    def resolve(self, query: RecallQuery) -> tuple[str, RecallQuery, dict[str, Any] | None]:
        """The error text, the query completed from the stored job, and that job's occurrence.

        The caller's query is never changed: a completed copy is returned.
        """
        if query.job_id is None:
            return query.text or "", query, None
        from hpcmem.kb.jobs.request import from_occurrence
        from hpcmem.kb.lessons.from_error import stored_job_context

        for reader in self.readers:
            occ = reader.occurrence_for_job(query.job_id, query.cluster)
            if occ is not None:
                completed = dataclasses.replace(
                    query, partition=query.partition or occ.get("partition"),
                    modules=list(query.modules or occ.get("modules") or []),
                    cluster=query.cluster or occ.get("cluster"),
                    # Slurm's record of the job's request beats its script's #SBATCH lines
                    context=stored_job_context(query.context, from_occurrence(occ)),
                )
                text = occ.get("log_excerpt") or occ.get("message") or ""
                if query.text:
                    text = f"{query.text}\n{text}"
                return text, completed, occ
        raise NotFound(f"no stored failure for job {query.job_id}",
                       hint="ingest it first (hpcmem ingest sacct / ingest logs), or pass the error text")

    def recall(self, query: RecallQuery) -> dict[str, Any]:
        text, query, occurrence = self.resolve(query)
        query = dataclasses.replace(query, modules=list(query.modules),
                                    cluster=query.cluster or self.config.get("cluster.name"))
        # Normalised, then redacted, as the lesson was recorded: the same fingerprint for the
        # same failure whatever codes or secrets the query carries, and none in the output.
        text = signature_text(text)
        if not has_content(text):
            raise InputError(CONTENTLESS)
        sig = fingerprint(text)
        probe = Probe.of(text, sig)
        # Scrubbed as a stored job context is (lessons.write.stored_context): a command line
        # or a working directory the caller gave can carry a token.
        probe.context = scrub_value(query_context(query, text))[0]
        # the newest snapshot, read once: the site's limits judge lessons and shape the advice
        env = self._environment(occurrence)
        probe.site = self._site_facts(text, probe.context, occurrence, env)
        candidates, stages = self.candidates(probe, query)
        ranked = unresolved_ties(context_chooses(self._rank(candidates, query)))
        shown = [c for c in ranked if c.evidence.band is not None][: query.limit]
        matches = [self._match_json(c) for c in shown]
        self._remember(sig, query, matches)
        result = {
            "schema_version": RECALL_SCHEMA_VERSION,
            "query": {"fingerprint": sig.fingerprint, "template": sig.template, "category": sig.category,
                      "job_id": query.job_id, "partition": query.partition, "modules": query.modules,
                      "cluster": query.cluster, "context": probe.context},
            "matches": matches,
            "context_decided": context_decided(ranked, shown),
            "advice": _defer_to_matches(self._advice(sig, text, occurrence, probe.context, env), matches),
            "abstained": not any(m["band"] == "match" for m in matches),
            "seen_before": self._seen_before(sig),
            "stages": stages,
            "stores": self.store_status,
            "warnings": list(self.warnings),
        }
        if query.id is not None:
            result["id"] = query.id
        return result

    def candidates(self, probe: Probe, query: RecallQuery, *, exhaustive: bool = False,
                   lexical_only: bool = False, every_lesson: bool = False) -> tuple[list[Candidate], list[str]]:
        """Scored candidates and the stages that ran. ``exhaustive`` always runs the wide
        stage (the calibration script collects every candidate's features that way);
        ``every_lesson`` makes every visible lesson a candidate there (the calibration script
        simulates small stores from them: in a store of a few lessons, every one competes)."""
        found = self._exact(probe.signature, query)
        judge([c.describe(probe, self.model, with_vectors=False) for c in found], self.model, with_vectors=False)
        _never_apply_expired(found)
        stages = ["exact"]
        if not exhaustive and any(c.evidence.band == "match" for c in found):
            return found, stages
        wide = self._wide(probe, query, found, every_lesson=every_lesson)
        stages.append("wide")
        pool = _dedupe(found + wide)
        with_vectors = not lexical_only and self._attach_vectors(probe, pool)
        judge([c.describe(probe, self.model, with_vectors=with_vectors) for c in pool], self.model,
              with_vectors=with_vectors)
        _never_apply_expired(pool)
        if not with_vectors:
            stages.append("lexical-only")
        return pool, stages

    def _rank(self, candidates: list[Candidate], query: RecallQuery) -> list[Candidate]:
        for c in candidates:
            boost, c.boosts = context_boost(c.lesson.get("conditions", []), query)
            confidence = float(c.lesson.get("confidence") or 0.0)
            c.rank_score = round(c.evidence.probability * SCOPE_WEIGHT.get(c.scope, 0.9)
                                 * STATUS_WEIGHT.get(c.lesson["status"], 0.5) * (0.5 + 0.5 * confidence) + boost, 4)
        return sorted(candidates, key=lambda c: (c.evidence.band != "match", *_weighed(c), -_recorded_at(c),
                                                 c.lesson["id"]))

    def _remember(self, sig: FailureSignature, query: RecallQuery, matches: list[dict[str, Any]]) -> None:
        """Note the lesson recall put first, so later history can confirm or contradict it."""
        top = next((m for m in matches if m["band"] == "match"), None)
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
    def _exact(self, sig: FailureSignature, query: RecallQuery) -> list[Candidate]:
        out = []
        for reader in self.readers:
            for lesson in reader.lessons_for_fingerprint(sig.fingerprint, include_expired=query.include_expired):
                if _in_force(lesson, query):
                    out.append(Candidate(lesson, reader.name, reader.scope, "exact"))
            for lesson in reader.lessons_for_alias(sig.fingerprint, include_expired=query.include_expired):
                if _in_force(lesson, query):
                    out.append(Candidate(lesson, reader.name, reader.scope, "alias"))
        return _dedupe(out)

    def _wide(self, probe: Probe, query: RecallQuery, known: list[Candidate], *,
              every_lesson: bool = False) -> list[Candidate]:
        out = []
        for reader in self.readers:
            if every_lesson:
                ids = {row[0] for row in reader.lesson_texts(LEXICAL_SCAN_LIMIT, include_expired=query.include_expired)}
            else:
                ids = self._lexical_ids(reader, probe, query) | self._vector_ids(reader, probe, query)
            ids -= {c.lesson["id"] for c in known if c.store == reader.name}
            for lesson in reader.lessons_by_ids(sorted(ids)):
                if lesson["status"] == "rejected" or not _in_force(lesson, query):
                    continue
                out.append(Candidate(lesson, reader.name, reader.scope, "wide"))
        return out

    def _lexical_ids(self, reader: StoreReader, probe: Probe, query: RecallQuery) -> set[str]:
        """The lessons whose excerpts share the most IDF weight with the query."""
        weight = self.model.weight
        mine = probe.excerpt_words | probe.decisive_words
        scored = []
        for lesson_id, template, _category, excerpt in reader.lesson_texts(LEXICAL_SCAN_LIMIT,
                                                                            include_expired=query.include_expired):
            theirs = frozenset(words(excerpt or template))
            shared = round(sum(weight(w) for w in mine & theirs), 9)  # equal word sets tie exactly
            if shared:
                scored.append((-shared, lesson_id))
        scored.sort()
        if len(scored) <= LEXICAL_CANDIDATES:
            return {lesson_id for _, lesson_id in scored}
        # Lessons tied with the last one taken come too (up to a cap): which of equals made
        # the cut would otherwise depend on their random ids, not on the texts.
        cutoff = scored[LEXICAL_CANDIDATES - 1][0]
        return {lesson_id for key, lesson_id in scored[:LEXICAL_CANDIDATES_WITH_TIES] if key <= cutoff}

    def _vector_ids(self, reader: StoreReader, probe: Probe, query: RecallQuery) -> set[str]:
        vector = self._probe_vectors(probe).get("decisive")
        if vector is None or reader.empty_copy:  # a store not created yet has no vectors to search
            return set()
        self._embed_lesson_signatures(reader)
        index = self._index(reader)
        if not index.count:
            return set()
        sids = [sid for sid, _sim in index.search(vector, NEIGHBOURS)[0] if sid >= 0]
        return {l["id"] for l in reader.lessons_for_signatures(sids, include_expired=query.include_expired)}

    # -- vectors ------------------------------------------------------------------------------
    def _vectors_available(self) -> bool:
        try:
            import numpy  # noqa: F401 - the ml extra is installed
        except ImportError as exc:
            self.warnings.append(f"vector search unavailable ({exc.name}); using lexical matching")
            return False
        return True

    def _vectors(self, items: list[tuple[str, str]]) -> list[Any]:
        """Vectors of (text, category) pairs: this process's memo, then ``embed.vectors_for``
        on the user's own store (cached there; the model only for texts never seen)."""
        from hpcmem.kb.recall.embed import vectors_for

        missing = [it for it in dict.fromkeys(items) if it not in self._vector_memo]
        if missing and self._vectors_available():
            make = self._get_embedder if self.allow_model else None
            found, warning = vectors_for(self.readers[0], missing, self._model_id(), make)
            if warning:
                self.warnings.append(warning)
            for it, vector in zip(missing, found):
                if vector is not None:
                    self._vector_memo[it] = vector
            embedder = self._embedder
            if (getattr(embedder, "encoder", None) == "auto"
                    and getattr(embedder, "loaded_backend", None) == "sentence-transformers"):
                self._warn_once("new errors are encoded with sentence-transformers (torch, about 5 s per process): "
                                "run `hpcmem model export` once to encode them without it")
        return [self._vector_memo.get(it) for it in items]

    def _warn_once(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)

    def _probe_vectors(self, probe: Probe) -> dict[str, Any]:
        if not probe.vectors:
            sig = probe.signature
            decisive, excerpt = self._vectors([(sig.template, sig.category), (probe.excerpt, sig.category)])
            probe.vectors = {"decisive": decisive, "excerpt": excerpt}
        return probe.vectors

    def _attach_vectors(self, probe: Probe, pool: list[Candidate]) -> bool:
        """Give the probe and every candidate variant its vectors; False when any is missing."""
        if not pool:
            return False
        vectors = self._probe_vectors(probe)
        if vectors.get("decisive") is None or vectors.get("excerpt") is None:
            return False
        variants = [v for c in pool for v in c.variants]
        items = [(v.template, v.category) for v in variants] + [(v.excerpt, v.category) for v in variants]
        got = dict(zip(items, self._vectors(items)))
        if any(v is None for v in got.values()):
            return False
        for v in variants:
            v.vectors = {"decisive": got[(v.template, v.category)], "excerpt": got[(v.excerpt, v.category)]}
        # the lessons' causes (the full model's emb_cause): encoded once, cached like a query's vector
        told = [c for c in pool if (c.lesson.get("cause") or "").strip()]
        for c, vector in zip(told, self._vectors([(c.lesson["cause"], "") for c in told])):
            c.cause_vector = vector
        return True

    def _model_id(self) -> str:
        if self._model_id_cache is None:
            from hpcmem.kb.recall.embed import model_spec

            self._model_id_cache = model_spec(self.config).model_id
        return self._model_id_cache

    def _get_embedder(self):
        if self._embedder is None:
            if self._embedder_factory is not None:
                self._embedder = self._embedder_factory()
            else:
                from hpcmem.kb.recall.embed import Embedder, model_spec

                self._embedder = Embedder(model_spec(self.config))
        return self._embedder

    def _index(self, reader: StoreReader):
        if reader.name in self._indexes:
            # A long-lived recaller (--batch, the MCP server) sees lessons recorded since:
            # one generation read when nothing changed.
            self._indexes[reader.name].refresh()
        else:
            from hpcmem.kb.recall.vector_index import SignatureIndex

            store = self._store_for(reader)
            self._indexes[reader.name] = SignatureIndex.load(
                store, self.config.get("index.dir"), self._model_id(), int(self.config.get("index.flat_max", 20_000)),
                reader=reader,
            )
        return self._indexes[reader.name]

    def _embed_lesson_signatures(self, reader: StoreReader) -> None:
        """Give new lessons' signatures their vectors (once), so the index can find them.

        Only in the caller's own store: recall never writes to a shared one (the lesson's
        writer, the curation commands and the spool timer embed there). A shared store's
        lessons without vectors are still found by their words."""
        missing = reader.lesson_signatures_without_vectors(self._model_id())
        if not missing:
            return
        if reader.scope != "user":
            self.warnings.append(f"store '{reader.name}': {missing} lesson(s) without vectors, found by their words "
                                 "only until the store's maintainer runs `hpcmem lessons embed`")
            return
        if not self.allow_model:
            return
        from hpcmem.kb.recall.embed import embed_missing_signatures
        from hpcmem.kb.errors import HpcmemError

        try:
            embed_missing_signatures(self._store_for(reader), self._get_embedder(), only_with_lessons=True)
        except (HpcmemError, OSError) as exc:
            self.warnings.append(f"store '{reader.name}': new lessons not embedded ({exc})")
        except Exception as exc:  # noqa: BLE001 - the database says whether it refused the write
            from hpcmem.kb.store.access import as_permission_denied

            if as_permission_denied(exc) is None:
                raise
            self.warnings.append(f"store '{reader.name}' is read-only; its newest lessons are matched exactly only")

    def _advice(self, sig: FailureSignature, text: str, occurrence: dict[str, Any] | None,
                context: dict[str, Any] | None, env: dict[str, Any] | None) -> list[dict[str, Any]]:
        """Built-in advice for the failure's category: general knowledge, not a stored lesson.
        It starts from the job's own request and usage: the stored job's, or what the caller
        gave (--script, --sbatch-args, MCP's context), which comes first."""
        from hpcmem.kb.recall.advice import advice_for

        given = {column: context[key] for key, column in _ADVICE_FIELDS.items() if key in (context or {})}
        facts = {**(occurrence or {}), **given, "template": sig.template, "message": text}
        facts["history"] = self._job_history(facts)
        items = self._site_advice(sig, text, context or {}, occurrence, env)
        if not any("check" in item for item in items):  # the site's numbers said nothing: general advice
            items += advice_for(sig.category, facts, env)
        return [{"cause": item["cause"], "fix": item["fix"], "actions": item.get("actions", []),
                 "category": sig.category, "source": "rule", "trust_level": trust_level("rule"),
                 **{key: item[key] for key in ("check", "snapshot") if key in item}}
                for item in items]

    def _environment(self, occurrence: dict[str, Any] | None) -> dict[str, Any] | None:
        """The newest environment snapshot of the job's cluster across the stack, or None."""
        from hpcmem.kb.store.reader import newest_environment

        return newest_environment(self.readers, (occurrence or {}).get("cluster") or self.config.get("cluster.name"))

    @staticmethod
    def _user(occurrence: dict[str, Any] | None) -> str:
        """Whose associations judge a refused submission: the stored job's user, else the caller."""
        import getpass

        return (occurrence or {}).get("user_name") or getpass.getuser()

    def _site_facts(self, text: str, context: dict[str, Any], occurrence: dict[str, Any] | None,
                    env: dict[str, Any] | None):
        """The site's limits for judging lessons about a refused submission (None otherwise)."""
        from hpcmem.kb.environment.rejections import kinds_for_message

        if not kinds_for_message(text):  # most queries: decided without importing the checks
            return None
        from hpcmem.kb.recall.site_match import SiteFacts, has_request

        if not has_request(context) or env is None:
            return None
        from hpcmem.kb.environment.site_check import snapshot_from_stored

        return SiteFacts.of(text, context, snapshot_from_stored(env)[0], self._user(occurrence))

    def _site_advice(self, sig: FailureSignature, text: str, context: dict[str, Any],
                     occurrence: dict[str, Any] | None, env: dict[str, Any] | None) -> list[dict[str, Any]]:
        """A refused submission explained from the site's limits (kb/recall/submission_advice.py)."""
        from hpcmem.kb.environment.rejections import kinds_for_message

        if not kinds_for_message(text):
            return []
        from hpcmem.kb.recall.submission_advice import submission_advice

        return submission_advice(text, context, env, self._user(occurrence), sig.category)

    def _job_history(self, facts: dict[str, Any]) -> list[dict[str, Any]]:
        """The same job's earlier runs (name and directory) in the user's store, this one apart."""
        import getpass

        name = facts.get("job_name")
        if not name:
            return []
        try:
            rows = self.readers[0].job_history(user=facts.get("user_name") or getpass.getuser(), job_name=name,
                                               work_dir=facts.get("work_dir"), cluster=facts.get("cluster"))
        except Exception:  # noqa: BLE001 - advice is best effort
            return []
        return [r for r in rows if r["job_id"] != facts.get("job_id")]

    def _seen_before(self, sig: FailureSignature) -> dict[str, Any]:
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
        lesson, ev = c.lesson, c.evidence
        stale = [lesson["status_reason"]] if lesson["status"] == "stale" and lesson.get("status_reason") else []
        return {
            "lesson_id": lesson["id"],
            "store": c.store,
            "scope": c.scope,
            "band": ev.band,
            "probability": round(ev.probability, 4),
            "score": c.rank_score,
            "match_kind": "exact" if ev.features.get("exact") else "similar",
            "found_by": c.found_by,
            "matched_fingerprint": ev.variant.fingerprint,
            "matched_alias": ev.variant.fingerprint != lesson["fingerprint"],
            "differs": [d.as_dict() for d in ev.comparison.differences]
                       + (ev.context.differs if ev.context is not None else []),
            "inapplicable": list(ev.context.inapplicable) if ev.context is not None else [],
            "context_agrees": list(ev.context.agree) if ev.context is not None else [],
            "text_probability": round(ev.text_probability, 4),
            "tied_with": list(c.tied_with),
            "signals": {k: round(v, 4) for k, v in ev.features.items()},
            "cause": lesson["cause"],
            "fix": lesson["fix"],
            "context": lesson.get("context"),
            "job_context": lesson.get("job_context") or {},
            "actions": lesson.get("actions") or [],
            "status": lesson["status"],
            "stale_reasons": stale,
            "confidence": round(float(lesson.get("confidence") or 0), 4),
            "conditions": lesson.get("conditions", []),
            "context_matches": c.boosts,
            "aliases": len(lesson.get("aliases") or []),
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


# The job's context (kb/jobs/context.FIELDS) -> the occurrence columns built-in advice reads.
_ADVICE_FIELDS = {"mem_mb": "req_mem_mb", "cpus": "req_cpus", "time_limit_s": "req_time_s", "max_rss_mb": "max_rss_mb",
                  "elapsed_s": "elapsed_s", "partition": "partition", "nodes": "req_nodes", "qos": "qos",
                  "account": "account", "job_name": "job_name", "workdir": "work_dir", "state": "state"}


def _defer_to_matches(advice: list[dict[str, Any]], matches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Advice that asks another number than a matched lesson says which to follow: the
    lesson, learnt from this failure, over the general rule."""
    lesson = next((m for m in matches if m["band"] == "match"), None)
    if lesson is None:
        return advice
    theirs = {a.get("option"): a.get("to") for a in lesson["actions"] if a.get("type") == "sbatch"}
    for item in advice:
        for action in item["actions"]:
            option = action.get("option")
            if action.get("type") == "sbatch" and option in theirs and theirs[option] != action.get("to"):
                item["note"] = (f"The matched lesson {lesson['lesson_id'][:8]} asks {option}={theirs[option]}: follow "
                                f"it. This general advice would ask {option}={action.get('to')}.")
    return advice


def query_context(query: RecallQuery, text: str) -> dict[str, Any]:
    """The query job's facts: what the caller gave, then --partition/--module, then a
    ``sbatch`` command line pasted with the error."""
    from hpcmem.kb.jobs.context import merge_contexts
    from hpcmem.kb.jobs.request import from_pasted_text

    flags = {"partition": query.partition, "modules": list(query.modules) or None}
    pasted = from_pasted_text(text) if "sbatch" in text else {}
    return {k: v for k, v in merge_contexts(query.context, flags, pasted).items() if v is not None}


def context_decided(ranked: list[Candidate], shown: list[Candidate]) -> bool:
    """Whether the job's context changed the answer: another lesson (or none) applied than
    the text alone would apply, or a shown lesson in another band."""
    if not any(c.evidence.context is not None and c.evidence.context.decided for c in ranked):
        return False
    answer = next((c for c in shown if c.evidence.band == "match"), None)
    return answer is not _text_answer(ranked) or any(c.evidence.band != c.evidence.text_band for c in shown
                                                     if not c.tied_with)


def _text_answer(ranked: list[Candidate]) -> Candidate | None:
    """The lesson the text alone would apply: the most probable of the text's match band,
    none when the first two tie but prescribe different fixes (as ``unresolved_ties``)."""
    matching = sorted((c for c in ranked if c.evidence.text_band == "match"),
                      key=lambda c: -c.evidence.text_probability)
    if not matching:
        return None
    if (len(matching) > 1 and matching[1].evidence.text_probability == matching[0].evidence.text_probability
            and " ".join(matching[0].lesson["fix"].split()) != " ".join(matching[1].lesson["fix"].split())):
        return None
    return matching[0]


def _in_force(lesson: dict[str, Any], query: RecallQuery) -> bool:
    """Whether recall may show ``lesson``. One whose valid_until has passed is expired, as
    revalidate marks it (kb/environment/revalidate.py), whether or not revalidate ran since."""
    until = lesson.get("valid_until")
    passed = until is not None and until <= dt.datetime.now(dt.timezone.utc)
    if passed and lesson["status"] not in ("rejected", "expired"):
        lesson["status"], lesson["status_reason"] = "expired", f"valid until {until:%Y-%m-%d}, which has passed"
    return query.include_expired or lesson["status"] != "expired"


def _never_apply_expired(candidates: list[Candidate]) -> None:
    """An expired lesson is shown with --include-expired, never answered as a match."""
    for c in candidates:
        if c.lesson["status"] == "expired" and c.evidence.band == "match":
            c.evidence.band = "related"


def _recorded_at(c: Candidate) -> float:
    """When the lesson was recorded (seconds): among lessons that weigh the same, the newest
    comes first - it was written against the cluster as it is now - and the order does not
    depend on random lesson ids."""
    created = c.lesson.get("created_at")
    return created.timestamp() if isinstance(created, dt.datetime) else 0.0


def _weighed(c: Candidate) -> tuple:
    """The evidence and preferences recall orders lessons by, best first (not recency, not the
    id): lessons equal here tie."""
    return (-c.rank_score, SCOPE_ORDER.get(c.scope, 9), -float(c.lesson.get("confidence") or 0))


def context_chooses(ranked: list[Candidate]) -> list[Candidate]:
    """When the job's facts agree with the first match-band lesson and differ from another
    one's, the other is related: the text could not tell them apart, the context can."""
    matching = [c for c in ranked if c.evidence.band == "match"]
    if len(matching) < 2:
        return ranked
    def facts_that_differ(c: Candidate) -> list[dict[str, Any]]:
        # the program alone (another script with the same failure) does not choose
        ctx = c.evidence.context
        return [d for d in ctx.differs if d["field"] not in ("program", "job_name")] if ctx is not None else []

    first = matching[0].evidence.context
    if first is None or facts_that_differ(matching[0]) or not [f for f in first.agree if f not in ("script", "command")]:
        return ranked
    for c in matching[1:]:
        if facts_that_differ(c):
            c.evidence.band = "related"
    return sorted(ranked, key=lambda c: c.evidence.band != "match")  # stable


def unresolved_ties(ranked: list[Candidate]) -> list[Candidate]:
    """Match-band lessons that the first ties on everything recall weighs, but whose fix is
    another, are all moved to the related band (each names the others in ``tied_with``).

    Two lessons recorded from the same wording for different root causes score exactly
    alike; applying one of them would rest on their ids alone. Ranked order is kept, so the
    related lessons still show, first."""
    matching = [c for c in ranked if c.evidence.band == "match"]
    if len(matching) < 2:
        return ranked
    first = matching[0]
    tied = [c for c in matching if _weighed(c) == _weighed(first)]
    if len({" ".join(c.lesson["fix"].split()) for c in tied}) < 2:
        return ranked
    for c in tied:
        c.evidence.band = "related"
        c.tied_with = [o.lesson["id"] for o in tied if o is not c]
    return sorted(ranked, key=lambda c: c.evidence.band != "match")  # stable: ties keep their order


def _dedupe(candidates: list[Candidate]) -> list[Candidate]:
    """One entry per lesson (a lesson can be reached by several stages)."""
    seen, out = set(), []
    for c in candidates:
        key = (c.store, c.lesson["id"])
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
