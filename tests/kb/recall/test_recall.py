"""Recall across a user / lab / cluster stack, with the real model and real FAISS."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy import select, update

from hpcmem.kb.config import load_config
from hpcmem.kb.recall.embed import Embedder, model_spec
from hpcmem.kb.store.models import Lesson
from hpcmem.kb.recall.recaller import Recaller, RecallQuery
from hpcmem.kb.lessons.from_error import record
from hpcmem.kb.store.stack import StoreStack
from tests.conftest import SAMPLES

NCCL_A = ("RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: "
          "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE) ran "
          "for 1800091 milliseconds before timing out.")
NCCL_B = ("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 12. Original reason for failure "
          "was: [Rank 12] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=911, OpType=BROADCAST) ran "
          "for 600034 milliseconds before timing out.")
OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
LIB = "python3: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory"


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    home = tmp_path_factory.mktemp("recall-model")
    emb = Embedder(model_spec(load_config(environ={"HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1"})))
    emb.encode(["warm up"])
    return emb


@pytest.fixture
def stack(tmp_path: Path, monkeypatch) -> tuple[StoreStack, object]:
    lab_dir = tmp_path / "labs"
    monkeypatch.setenv("HPCMEM_LAB_STORES", f"vision=sqlite:///{lab_dir / 'vision.db'}")
    monkeypatch.setenv("HPCMEM_CLUSTER_STORE", f"sqlite:///{tmp_path / 'cluster' / 'cluster.db'}")
    config = load_config()
    stack = StoreStack.from_config(config)
    for store in stack.all():
        store.open()
    yield stack, config
    stack.dispose()


def recaller(stack, config, embedder, **kw) -> Recaller:
    return Recaller(stack, config, embedder_factory=lambda: embedder, **kw)


def lesson(stack, error: str, fix: str, scope: str = "user", **kw) -> dict:
    return record(stack, cause=kw.pop("cause", "c"), fix=fix, author="alice", source=kw.pop("source", "human"),
                  error_text=error, scope=scope, **kw)


def ids(result: dict) -> list:
    """The lessons recall says apply (the match band), best first."""
    return [m["lesson_id"] for m in result["matches"] if m["band"] == "match"]


def test_near_variant_is_found_through_the_vector_index(stack, embedder):
    stack_, config = stack
    nccl = lesson(stack_, NCCL_A, "raise the NCCL timeout and check the IB fabric")
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(text=NCCL_B))
    finally:
        r.close()
    assert result["query"]["fingerprint"] != nccl["fingerprint"]  # not an exact hit
    top = result["matches"][0]
    assert top["lesson_id"] == nccl["lesson_id"] and top["match_kind"] == "similar" and top["band"] == "match"
    assert top["signals"]["emb_decisive"] > 0.75 and 0 < top["probability"] <= 1
    assert result["stages"] == ["exact", "wide"] and not result["abstained"]


def test_abstains_on_a_different_fix_even_when_similar(stack, embedder):
    stack_, config = stack
    lesson(stack_, LIB, "module load cuda/11.8")
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(text=LIB.replace("libcudart.so.11.0", "libcudnn.so.9")))
        version = r.recall(RecallQuery(text=LIB.replace("libcudart.so.11.0", "libcudart.so.12")))
    finally:
        r.close()
    assert ids(result) == [] and result["abstained"]
    # The same library at another major version: shown as related, the difference spelled out,
    # never applied (its fix loads CUDA 11).
    assert ids(version) == [] and version["abstained"]
    related = version["matches"][0]
    assert related["band"] == "related"
    assert {"query": "libcudart.so.12", "lesson": "libcudart.so.11.0", "kind": "version",
            "matters": True} in related["differs"]


def test_scope_precedence_user_over_lab_over_cluster(stack, embedder):
    stack_, config = stack
    cluster = lesson(stack_, OOM, "cluster-wide: request memory per node", scope="cluster")
    lab = lesson(stack_, OOM, "lab: our aligner needs 32G", scope="lab:vision")
    user = lesson(stack_, OOM, "mine: --mem=48G for the big genome", scope="user")
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(text=OOM))
    finally:
        r.close()
    assert ids(result) == [user["lesson_id"], lab["lesson_id"], cluster["lesson_id"]]
    assert [m["scope"] for m in result["matches"][:3]] == ["user", "lab", "cluster"]
    assert len(result["matches"]) == 3 and result["advice"]  # built-in advice stands apart
    assert all(a["source"] == "rule" for a in result["advice"])
    assert {s["name"] for s in result["stores"]} == {"user", "vision", "cluster"}


def test_confidence_and_status_can_outweigh_scope(stack, embedder):
    stack_, config = stack
    user = lesson(stack_, OOM, "guess: more memory", source="agent")
    lab = lesson(stack_, OOM, "curated: 32G", scope="lab:vision")
    with stack_.labs[0].transaction() as s:
        s.execute(update(Lesson).where(Lesson.id == lab["lesson_id"]).values(status="validated", confidence=0.95))
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(text=OOM))
    finally:
        r.close()
    assert ids(result)[:2] == [lab["lesson_id"], user["lesson_id"]]


def test_stale_shown_with_reason_expired_hidden_unless_asked(stack, embedder):
    stack_, config = stack
    stale = lesson(stack_, LIB, "module load cuda/11.8")
    gone = lesson(stack_, LIB, "module load cuda/11.0")
    with stack_.user.transaction() as s:
        s.execute(update(Lesson).where(Lesson.id == stale["lesson_id"]).values(
            status="stale", status_reason="module cuda: default changed 11.8 -> 12.4"))
        s.execute(update(Lesson).where(Lesson.id == gone["lesson_id"]).values(
            status="expired", status_reason="module cuda/11.0 is no longer installed"))
    r = recaller(stack_, config, embedder)
    try:
        shown = r.recall(RecallQuery(text=LIB))
        everything = r.recall(RecallQuery(text=LIB, include_expired=True))
    finally:
        r.close()
    assert ids(shown) == [stale["lesson_id"]]
    assert shown["matches"][0]["stale_reasons"] == ["module cuda: default changed 11.8 -> 12.4"]
    # an expired lesson is listed when asked for, never answered as a match
    assert {m["lesson_id"]: m["band"] for m in everything["matches"]} == {stale["lesson_id"]: "match",
                                                                         gone["lesson_id"]: "related"}


def test_context_boost_prefers_the_lesson_for_my_partition_and_modules(stack, embedder):
    stack_, config = stack
    gpu = lesson(stack_, OOM, "gpu partition: 64G", partition="gpu", modules=["cuda/12.4"])
    cpu = lesson(stack_, OOM, "cpu partition: 16G", partition="cpu")
    r = recaller(stack_, config, embedder)
    try:
        on_cpu = r.recall(RecallQuery(text=OOM, partition="cpu"))
        on_gpu = r.recall(RecallQuery(text=OOM, partition="gpu", modules=["cuda/12.4"]))
    finally:
        r.close()
    assert ids(on_cpu)[0] == cpu["lesson_id"]
    assert ids(on_gpu)[0] == gpu["lesson_id"]
    assert "partition gpu matches" in on_gpu["matches"][0]["context_matches"]


def test_learned_fix_from_a_real_format_pair_is_recalled_by_job(stack, embedder):
    from hpcmem.ingest.sacct_ingest import ingest_sacct
    from hpcmem.kb.lessons.learn import learn_from_history

    stack_, config = stack
    path = SAMPLES / "sacct" / "resubmissions" / "real-22.05-oom-timeout-resubmitted.psv"
    with open(path, encoding="utf-8") as fh:
        ingest_sacct(stack_.user, fh, cluster="lab", tz=dt.timezone.utc)
    assert learn_from_history(stack_.user).lessons_created >= 1
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(job_id="4"))
    finally:
        r.close()
    top = result["matches"][0]
    assert top["match_kind"] == "exact" and top["trust"] == "inferred"
    assert {"type": "sbatch", "option": "--mem", "from": "50M", "to": "400M"}.items() <= top["actions"][0].items()
    assert any(e["kind"] == "fixed_by" for e in top["provenance"]["evidence"])


@pytest.mark.parametrize("damage", ["delete", "corrupt", "truncate"])
def test_index_is_rebuilt_when_its_file_is_lost_or_damaged(stack, embedder, damage: str):
    stack_, config = stack
    nccl = lesson(stack_, NCCL_A, "raise the NCCL timeout")
    r = recaller(stack_, config, embedder)
    try:
        assert ids(r.recall(RecallQuery(text=NCCL_B))) == [nccl["lesson_id"]]
    finally:
        r.close()
    files = list(Path(config.get("index.dir")).glob("*.faiss"))
    assert files, "the first vector recall saves the index"
    for f in files:
        if damage == "delete":
            f.unlink()
        elif damage == "corrupt":
            f.write_bytes(b"\x00garbage" * 100)
        else:
            f.write_bytes(f.read_bytes()[:50])
    r = recaller(stack_, config, embedder)
    try:
        assert ids(r.recall(RecallQuery(text=NCCL_B))) == [nccl["lesson_id"]]
    finally:
        r.close()


def test_known_template_needs_no_model(stack, embedder):
    stack_, config = stack
    nccl = lesson(stack_, NCCL_A, "raise the NCCL timeout")
    first = recaller(stack_, config, embedder)
    try:
        first.recall(RecallQuery(text=NCCL_B))  # computes and caches the query vector
    finally:
        first.close()

    def no_model():
        raise AssertionError("the model must not be loaded for a known template")

    again = Recaller(stack_, config, embedder_factory=no_model)
    try:
        result = again.recall(RecallQuery(text=NCCL_B.replace("rank 12", "rank 7")))
    finally:
        again.close()
    assert ids(result) == [nccl["lesson_id"]]


def test_unreachable_shared_store_is_a_warning_not_a_failure(tmp_path: Path, monkeypatch, embedder):
    monkeypatch.setenv("HPCMEM_LAB_STORES", "ghost=postgresql://nobody@127.0.0.1:1/x")
    config = load_config()
    stack_ = StoreStack.from_config(config)
    lesson(stack_, OOM, "more memory")
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(text=OOM))
    finally:
        r.close()
    assert result["matches"] and any("ghost" in w for w in result["warnings"])
    assert [s["reachable"] for s in result["stores"]] == [True, False]


def test_lessons_tied_on_shared_words_all_become_candidates(stack, embedder):
    """Which of equally good lexical candidates make the cut must not depend on their random
    ids: lessons tied with the tenth come too (up to a cap)."""
    from hpcmem.kb.recall.recaller import LEXICAL_CANDIDATES
    from hpcmem.kb.recall.scoring import Probe
    from hpcmem.kb.signatures.fingerprint import fingerprint

    stack_, config = stack
    # one decisive line, recorded 14 times with other fixes: the same words, the same weight
    tied = {lesson(stack_, LIB, f"module load cuda/11.{minor}")["lesson_id"] for minor in range(14)}
    lesson(stack_, OOM, "request more memory")  # shares no rare word with the query
    r = recaller(stack_, config, embedder)
    try:
        query = RecallQuery(text=LIB.replace("python3", "python"))
        probe = Probe.of(query.text, fingerprint(query.text))
        found = set()
        for reader in r.readers:
            found |= r._lexical_ids(reader, probe, query)
    finally:
        r.close()
    assert len(tied) > LEXICAL_CANDIDATES
    assert found == tied


LAUNCH = ("Job 41 failed to launch (JobLaunchFailure): output directory /scratch/alice/no-such-dir does not exist")


@pytest.mark.parametrize("allow_model", [False, True])
def test_one_lesson_store_answers_its_own_recurrence_and_nothing_else(stack, embedder, allow_model):
    """A new user's store holds one lesson: the same failure again is a match (exact, no
    model needed), a failure of another kind is not (a lone candidate is not 'far ahead')."""
    stack_, config = stack
    oom = lesson(stack_, OOM, "resubmit with --mem=400M",
                 cause="The resubmission with --mem=400M (was 50M) completed (job 7 in 00:00:10)")
    r = recaller(stack_, config, embedder, allow_model=allow_model)
    try:
        again = r.recall(RecallQuery(text=OOM.replace("52004", "52017")))
        other = r.recall(RecallQuery(text=LAUNCH))
    finally:
        r.close()
    assert ids(again) == [oom["lesson_id"]] and not again["abstained"]
    assert ids(other) == [] and other["abstained"]


def test_every_lesson_makes_each_visible_lesson_a_candidate_for_the_calibration_script(stack, embedder):
    """The fit simulates small stores from every lesson's features; the normal wide stage
    takes only lessons that share words with the query or are its vector neighbours."""
    from hpcmem.kb.recall.scoring import Probe
    from hpcmem.kb.signatures.fingerprint import fingerprint

    stack_, config = stack
    nccl = lesson(stack_, NCCL_A, "export NCCL_TIMEOUT=3600")
    oom = lesson(stack_, OOM, "ask for more memory: --mem=64G")
    gone = lesson(stack_, LIB, "module load cuda/11.0")
    with stack_.user.session() as s:
        s.execute(update(Lesson).where(Lesson.id == gone["lesson_id"]).values(status="rejected"))
        s.commit()
    r = recaller(stack_, config, embedder, allow_model=False, record_events=False)
    probe, query = Probe.of(NCCL_B, fingerprint(NCCL_B)), RecallQuery(text=NCCL_B)
    usual, _ = r.candidates(probe, query, exhaustive=True, lexical_only=True)
    every, _ = r.candidates(probe, query, exhaustive=True, lexical_only=True, every_lesson=True)
    assert {c.lesson["id"] for c in usual} == {nccl["lesson_id"]}
    assert {c.lesson["id"] for c in every} == {nccl["lesson_id"], oom["lesson_id"]}  # never the rejected one
    leader = next(c for c in every if c.lesson["id"] == nccl["lesson_id"])
    assert leader.evidence.features["margin"] > 0  # ahead of the unrelated lesson it now competes with


NODE_CONFIG = "sbatch: error: Batch job submission failed: Requested node configuration is not available"


@pytest.mark.parametrize("allow_model", [False, True])
def test_lessons_that_tie_exactly_with_other_fixes_are_not_applied(stack, embedder, allow_model):
    """Slurm words a request for too many CPUs, too much memory or an absent GPU type alike.
    Two lessons recorded from that one wording score exactly alike; applying the first would
    rest on random lesson ids, so both are related, each naming the other."""
    stack_, config = stack
    cpus = lesson(stack_, NODE_CONFIG, "ask for at most 64 CPUs per node (--cpus-per-task)")["lesson_id"]
    mem = lesson(stack_, NODE_CONFIG, "ask for at most 250G per node (--mem)")["lesson_id"]
    r = recaller(stack_, config, embedder, allow_model=allow_model)
    try:
        result = r.recall(RecallQuery(text=NODE_CONFIG))
    finally:
        r.close()
    shown = {m["lesson_id"]: m for m in result["matches"]}
    assert set(shown) == {cpus, mem} and result["abstained"] is True
    assert all(m["band"] == "related" for m in shown.values())
    assert shown[cpus]["tied_with"] == [mem] and shown[mem]["tied_with"] == [cpus]
    assert shown[cpus]["probability"] == shown[mem]["probability"]
    assert [m["lesson_id"] for m in result["matches"]] == [mem, cpus]  # the newest first, not by random id


def test_a_tie_between_lessons_with_one_fix_is_still_a_match(stack, embedder):
    """Recorded twice with the same fix (spacing aside): nothing to choose between."""
    stack_, config = stack
    first = lesson(stack_, NODE_CONFIG, "ask for at most 64 CPUs per node")["lesson_id"]
    second = lesson(stack_, NODE_CONFIG, "ask for  at most 64 CPUs\nper node")["lesson_id"]
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(text=NODE_CONFIG))
    finally:
        r.close()
    assert ids(result) == [second, first] and result["abstained"] is False  # the newest is applied
    assert all(m["tied_with"] == [] for m in result["matches"])


def test_scope_breaks_a_tie_before_it_is_ambiguous(stack, embedder):
    """The user's own lesson outranks the lab's on the same evidence: that is an order recall
    chose, not a tie, so the user's lesson is applied."""
    stack_, config = stack
    mine = lesson(stack_, NODE_CONFIG, "ask for at most 64 CPUs per node")["lesson_id"]
    lesson(stack_, NODE_CONFIG, "ask for at most 250G per node", scope="lab")
    r = recaller(stack_, config, embedder)
    try:
        result = r.recall(RecallQuery(text=NODE_CONFIG))
    finally:
        r.close()
    assert ids(result)[0] == mine and result["abstained"] is False
    assert all(m["tied_with"] == [] for m in result["matches"])


def test_a_sites_match_probability_moves_the_match_band(stack, embedder, tmp_path):
    """recall.match_probability replaces the fitted threshold: a lesson just below the site's
    threshold is related (recall abstains), the same lesson at or above it is applied."""
    from hpcmem.kb.config import load_config

    stack_, config = stack
    nccl = lesson(stack_, NCCL_A, "raise the NCCL timeout and check the IB fabric")["lesson_id"]

    def recall_with(threshold: float | None) -> dict:
        cfg = config
        if threshold is not None:
            path = tmp_path / f"site-{threshold}.toml"
            path.write_text(f"[recall]\nmatch_probability = {threshold}\n")
            cfg = load_config(config_file=str(path))
        r = recaller(stack_, cfg, embedder)
        try:
            return r.recall(RecallQuery(text=NCCL_B))
        finally:
            r.close()

    fitted = recall_with(None)
    p = fitted["matches"][0]["probability"]
    assert ids(fitted) == [nccl] and p < 0.99
    stricter = recall_with(round(p + (1 - p) / 2, 4))
    assert stricter["abstained"] and stricter["matches"][0]["lesson_id"] == nccl
    assert stricter["matches"][0]["band"] == "related"
    assert ids(recall_with(round(p - 0.01, 4))) == [nccl]
