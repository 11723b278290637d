"""Signature index: a FAISS cache of the stored vectors, on SQLite and PostgreSQL stores.

Vectors are real all-MiniLM-L6-v2 embeddings of the signatures of the project's sample
job logs (data/samples/logs), so "the right signature" means what recall will mean.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import delete, select

from hpcmem.kb.config import load_config
from hpcmem.kb.recall.embed import (
    Embedder,
    ModelSpec,
    blob_to_vector,
    bump_generation,
    bump_rebuild_generation,
    embed_missing_signatures,
    model_spec,
    read_generations,
    template_hash,
    text_for_embedding,
    vector_to_blob,
)
from hpcmem.kb.errors import InputError
from hpcmem.kb.store.models import Signature, StoreMeta
from hpcmem.kb.signatures.fingerprint import signature_of_block
from hpcmem.kb.recall.vector_index import FLAT, IVF, IVF_NPROBE, SignatureIndex, ivf_lists, store_id

REPO = Path(__file__).resolve().parents[3]
SAMPLE_LOGS = REPO / "data" / "samples" / "logs"


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    home = tmp_path_factory.mktemp("index-home")
    config = load_config(environ={"HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1"})
    return Embedder(model_spec(config))  # the model itself is shared with test_embed's


def sample_signatures() -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for path in sorted(SAMPLE_LOGS.glob("*.out")) + sorted(SAMPLE_LOGS.glob("*.err")):
        sig = signature_of_block(path.read_text(errors="replace"))
        seen.setdefault((sig.category, sig.template))
    return list(seen)


PYTHON_MODULES = ("numpy", "scipy", "pandas", "torch", "torchvision", "mpi4py", "h5py", "netCDF4", "xarray", "dask",
                  "sklearn", "matplotlib", "yaml", "tqdm", "numba", "cupy", "jax", "tensorflow", "transformers",
                  "datasets", "Bio", "pysam", "astropy", "healpy", "petsc4py", "vtk", "pyvista", "ase", "MDAnalysis",
                  "rdkit")
SHARED_LIBS = ("libcudart.so.12", "libcublas.so.11", "libnccl.so.2", "libmpi.so.40", "libhdf5.so.103",
               "libnetcdf.so.19", "libfftw3.so.3", "libopenblas.so.0", "libgfortran.so.5", "libquadmath.so.0",
               "libpmix.so.2", "libucp.so.0", "libcudnn.so.8", "libtorch_cuda.so", "libgomp.so.1")
COMMANDS = ("mpirun", "nvcc", "cmake", "conda", "singularity", "apptainer", "gmx_mpi", "lmp", "orca", "vasp_std")


def variant_messages() -> list[str]:
    """Distinct, realistic failure messages: many modules, libraries and commands."""
    return ([f"ModuleNotFoundError: No module named '{m}'" for m in PYTHON_MODULES]
            + [f"./a.out: error while loading shared libraries: {lib}: cannot open shared object file: "
               "No such file or directory" for lib in SHARED_LIBS]
            + [f"/var/spool/slurmd/job123/slurm_script: line 12: {c}: command not found" for c in COMMANDS])


def variant_signatures(count: int) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for message in variant_messages():
        sig = signature_of_block(message)
        seen.setdefault((sig.category, sig.template))
    assert len(seen) >= count
    return list(seen)[:count]


def add_signatures(store, items: list[tuple[str, str]]) -> list[int]:
    with store.transaction() as session:
        rows = [Signature(fingerprint=template_hash(c + t, "fp")[:16], category=c, template=t) for c, t in items]
        session.add_all(rows)
        session.flush()
        return [r.id for r in rows]


@pytest.fixture
def store(store_factory, embedder: Embedder):
    """A store holding the sample signatures, embedded."""
    store = store_factory().open()
    add_signatures(store, sample_signatures())
    embed_missing_signatures(store, embedder)
    return store


def vectors_of(store) -> dict[int, np.ndarray]:
    with store.session() as session:
        return {sid: blob_to_vector(blob) for sid, blob in session.execute(select(Signature.id, Signature.embedding))}


def id_of(store, category: str) -> int:
    with store.session() as session:
        query = select(Signature.id).where(Signature.category == category).order_by(Signature.id)
        return session.scalars(query).first()


def sidecar(index: SignatureIndex) -> dict:
    return json.loads(index.sidecar_path.read_text())


def load(store, tmp_path: Path, model_id: str, flat_max: int = 50_000) -> SignatureIndex:
    return SignatureIndex.load(store, tmp_path / "index", model_id, flat_max)


# --------------------------------------------------------------------------- search


def test_each_stored_vector_finds_its_own_signature(store, tmp_path: Path, embedder: Embedder):
    index = load(store, tmp_path, embedder.model_id)
    stored = vectors_of(store)
    assert index.kind == FLAT and index.count == len(stored) and index.dim == 384
    ids = list(stored)
    results = index.search(np.stack([stored[i] for i in ids]), k=3)
    assert len(results) == len(ids)
    for sid, hits in zip(ids, results):
        assert hits[0][0] == sid and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        assert len(hits) == 3 and hits[0][1] >= hits[1][1] >= hits[2][1]


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("RuntimeError: CUDA error: out of memory", "cuda_oom"),
        ("OSError: [Errno 122] Disk quota exceeded: '/home/alice/ckpt/step_0400.pt'", "disk_quota"),
        ("ImportError: No module named 'scipy'", "python_import_error"),
        ("srun: error: gpu-n12: task 3: Segmentation fault (core dumped)", "segfault"),
    ],
)
def test_a_new_wording_finds_the_known_failure(store, tmp_path: Path, embedder: Embedder, message, category):
    sig = signature_of_block(message)
    assert sig.category == category
    query = embedder.encode([text_for_embedding(sig.template, sig.category)])[0]
    [hits] = load(store, tmp_path, embedder.model_id).search(query, k=5)
    assert hits[0][0] == id_of(store, category)


def test_search_edge_cases(store_factory, store, tmp_path: Path, embedder: Embedder):
    index = load(store, tmp_path, embedder.model_id)
    query = vectors_of(store)[id_of(store, "cuda_oom")]
    assert len(index.search(query, k=1000)[0]) == index.count
    assert index.search(query, k=0) == [[]]
    with pytest.raises(InputError, match="384"):
        index.search(np.ones(10, dtype=np.float32), k=1)
    empty = SignatureIndex.load(store_factory("empty").open(), tmp_path / "index", embedder.model_id)
    assert empty.count == 0 and empty.search(query, k=5) == [[]]


def test_ivf_above_flat_max(store, tmp_path: Path, embedder: Embedder):
    index = load(store, tmp_path, embedder.model_id, flat_max=5)
    stored = vectors_of(store)
    assert index.kind == IVF and index.count == len(stored) and sidecar(index)["kind"] == IVF
    for sid, vector in stored.items():
        assert index.search(vector, k=1)[0][0][0] == sid
    again = load(store, tmp_path, embedder.model_id, flat_max=5)
    assert again.last_action == "loaded" and again.kind == IVF
    assert again.search(stored[id_of(store, "disk_quota")], k=1)[0][0][0] == id_of(store, "disk_quota")


# --------------------------------------------------------------------------- file and freshness


def test_index_is_saved_with_its_sidecar_and_reused(store, tmp_path: Path, embedder: Embedder):
    first = load(store, tmp_path, embedder.model_id)
    assert first.last_action == "rebuilt" and first.persisted
    assert first.path == tmp_path / "index" / f"{store_id(store)}.faiss"
    with store.session() as session:
        gen, rgen = read_generations(session)
    meta = sidecar(first)
    assert {k: meta[k] for k in ("format", "store_id", "model_id", "kind", "count", "max_signature_id",
                                 "generation", "rebuild_generation")} == {
        "format": 1, "store_id": store_id(store), "model_id": embedder.model_id, "kind": FLAT,
        "count": len(vectors_of(store)), "max_signature_id": max(vectors_of(store)),
        "generation": gen, "rebuild_generation": rgen,
    }
    second = load(store, tmp_path, embedder.model_id)
    assert second.last_action == "loaded" and second.count == first.count
    second.refresh()
    assert second.last_action == "current"  # nothing changed: not even the file is read


def test_store_id_is_a_persistent_uuid(store_factory):
    store = store_factory().open()
    sid = store_id(store)
    assert str(uuid.UUID(sid)) == sid and store_id(store) == sid
    with store.session() as session:
        assert session.scalar(select(StoreMeta.value).where(StoreMeta.key == "store_id")) == sid
    assert store_id(store_factory("other").open()) != sid


def test_new_signatures_are_appended_without_a_rebuild(store, tmp_path: Path, embedder: Embedder):
    first = load(store, tmp_path, embedder.model_id)
    before = sidecar(first)
    [new_id] = add_signatures(store, [("gpu_unavailable", "RuntimeError: No CUDA GPUs are available")])
    assert embed_missing_signatures(store, embedder) == 1
    second = load(store, tmp_path, embedder.model_id)
    assert second.last_action == "extended"
    after = sidecar(second)
    assert after["count"] == before["count"] + 1 and after["max_signature_id"] == new_id
    assert after["generation"] == before["generation"] + 1
    assert after["rebuild_generation"] == before["rebuild_generation"]
    query = embedder.encode([text_for_embedding("torch: No CUDA GPUs are available", "gpu_unavailable")])[0]
    assert second.search(query, k=1)[0][0][0] == new_id
    # The extended file is what the next process reads.
    assert load(store, tmp_path, embedder.model_id).last_action == "loaded"


def test_a_long_lived_index_refreshes_itself(store, tmp_path: Path, embedder: Embedder):
    index = load(store, tmp_path, embedder.model_id)
    [new_id] = add_signatures(store, [("nccl_error", "NCCL error: unhandled system error")])
    embed_missing_signatures(store, embedder)
    index.refresh()
    assert index.last_action == "extended" and index.search(vectors_of(store)[new_id], k=1)[0][0][0] == new_id


def test_growing_past_flat_max_rebuilds_as_ivf(store, tmp_path: Path, embedder: Embedder):
    count = len(vectors_of(store))
    first = load(store, tmp_path, embedder.model_id, flat_max=count)
    assert first.kind == FLAT
    add_signatures(store, [("gpu_unavailable", "No CUDA GPUs are available")])
    embed_missing_signatures(store, embedder)
    second = load(store, tmp_path, embedder.model_id, flat_max=count)
    assert second.last_action == "rebuilt" and second.kind == IVF and second.count == count + 1


def test_deleted_signature_forces_a_rebuild(store, tmp_path: Path, embedder: Embedder):
    load(store, tmp_path, embedder.model_id)
    gone = id_of(store, "disk_quota")
    query = vectors_of(store)[gone]
    with store.transaction() as session:
        session.execute(delete(Signature).where(Signature.id == gone))
        bump_rebuild_generation(session)
    index = load(store, tmp_path, embedder.model_id)
    assert index.last_action == "rebuilt"
    assert gone not in [sid for sid, _ in index.search(query, k=index.count)[0]]


def test_missing_file_or_sidecar_rebuilds(store, tmp_path: Path, embedder: Embedder):
    first = load(store, tmp_path, embedder.model_id)
    first.path.unlink()
    second = load(store, tmp_path, embedder.model_id)
    assert second.last_action == "rebuilt" and second.path.exists() and second.count == first.count
    second.sidecar_path.unlink()
    third = load(store, tmp_path, embedder.model_id)
    assert third.last_action == "rebuilt" and third.sidecar_path.exists()
    assert load(store, tmp_path, embedder.model_id).last_action == "loaded"


def test_truncated_file_rebuilds(store, tmp_path: Path, embedder: Embedder):
    first = load(store, tmp_path, embedder.model_id)
    size = first.path.stat().st_size
    with open(first.path, "r+b") as fh:
        fh.truncate(size // 2)
    second = load(store, tmp_path, embedder.model_id)
    assert second.last_action == "rebuilt" and second.path.stat().st_size == size
    cuda = id_of(store, "cuda_oom")
    assert second.search(vectors_of(store)[cuda], k=1)[0][0][0] == cuda


def test_garbage_file_that_looks_unchanged_rebuilds(store, tmp_path: Path, embedder: Embedder):
    # Same size, inode and mtime as the sidecar records: only parsing can tell.
    first = load(store, tmp_path, embedder.model_id)
    st = first.path.stat()
    with open(first.path, "r+b") as fh:
        fh.write(os.urandom(st.st_size))
    os.utime(first.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = load(store, tmp_path, embedder.model_id)
    assert second.last_action == "rebuilt" and second.count == first.count


def test_valid_index_file_that_the_sidecar_does_not_describe_rebuilds(store, tmp_path: Path,
                                                                      embedder: Embedder):
    # E.g. another process replaced the file between our reading the sidecar and the file.
    import faiss

    first = load(store, tmp_path, embedder.model_id)
    stored = vectors_of(store)
    impostor = faiss.IndexIDMap2(faiss.IndexFlatIP(384))
    ids = np.array(sorted(stored), dtype=np.int64)
    impostor.add_with_ids(np.ascontiguousarray(np.stack([stored[i] for i in ids])[::-1]), ids)  # ids shuffled
    faiss.write_index(impostor, str(first.path))
    second = load(store, tmp_path, embedder.model_id)
    assert second.last_action == "rebuilt"
    for sid in ids:
        assert second.search(stored[sid], k=1)[0][0][0] == sid


def test_index_of_another_model_is_not_used(store, tmp_path: Path, embedder: Embedder):
    load(store, tmp_path, embedder.model_id)
    other = Embedder(ModelSpec(embedder.spec.path, "other-model@00000000", embedder.spec.sha256))
    embed_missing_signatures(store, other)
    index = load(store, tmp_path, other.model_id)
    assert index.last_action == "rebuilt" and index.count == len(vectors_of(store))
    assert sidecar(index)["model_id"] == "other-model@00000000"
    stale = load(store, tmp_path, embedder.model_id)  # no vector of the old model is left
    assert stale.last_action == "rebuilt" and stale.count == 0


def test_unwritable_index_dir_works_in_memory(store, tmp_path: Path, embedder: Embedder):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    index = SignatureIndex.load(store, blocker / "index", embedder.model_id)
    assert index.last_action == "rebuilt" and not index.persisted
    cuda = id_of(store, "cuda_oom")
    assert index.search(vectors_of(store)[cuda], k=1)[0][0][0] == cuda


def test_concurrent_loads_build_the_file_once(store, tmp_path: Path, embedder: Embedder):
    code = f"""
from hpcmem.kb.store.database import Store
from hpcmem.kb.recall.vector_index import SignatureIndex
store = Store({store.url!r}, schema={store.schema!r}).open()
index = SignatureIndex.load(store, {str(tmp_path / "index")!r}, {embedder.model_id!r})
print(index.last_action, index.count, index.persisted)
"""
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    actions = sorted(out.split()[0] for out, _ in outputs)
    assert actions == ["loaded", "loaded", "rebuilt"]
    count = len(vectors_of(store))
    assert {out.split()[1] for out, _ in outputs} == {str(count)}
    assert load(store, tmp_path, embedder.model_id).last_action == "loaded"


# --------------------------------------------------------------------------- IVF at scale
# Thousands of signatures would take minutes to embed, so these store clustered unit
# vectors directly as embeddings: the index only ever sees stored vectors.


def clustered(rng: np.random.Generator, centers: np.ndarray, count: int) -> np.ndarray:
    v = centers[rng.integers(len(centers), size=count)] + 0.04 * rng.standard_normal((count, centers.shape[1]))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def store_vectors(store, vectors: np.ndarray, model_id: str) -> list[int]:
    """Signatures carrying the given vectors as their embeddings, one generation bump."""
    with store.transaction() as session:
        start = session.scalar(select(Signature.id).order_by(Signature.id.desc()).limit(1)) or 0
        rows = [Signature(fingerprint=f"v{start + n:015d}", category="unknown", template=f"synthetic {start + n}",
                          embedding=vector_to_blob(v), embedding_model=model_id, embedding_hash="x" * 64)
                for n, v in enumerate(vectors)]
        session.add_all(rows)
        session.flush()
        bump_generation(session)
        return [r.id for r in rows]


def test_ivf_searches_a_subset_of_lists_and_keeps_recall(store_factory, tmp_path: Path):
    store = store_factory().open()
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((60, 384)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    ids = store_vectors(store, clustered(rng, centers, 2000), "synthetic@1")
    index = SignatureIndex.load(store, tmp_path / "index", "synthetic@1", flat_max=1000)
    exact = SignatureIndex.load(store, tmp_path / "exact", "synthetic@1", flat_max=10**6)
    assert index.kind == IVF and exact.kind == FLAT
    assert index.index.nlist == ivf_lists(2000) == 50 and IVF_NPROBE < 50  # not a disguised full scan
    assert sidecar(index)["trained_count"] == 2000 and sidecar(index)["count"] == 2000

    stored = vectors_of(store)
    for sid in ids[::40]:
        assert index.search(stored[sid], k=1)[0][0][0] == sid
    queries = clustered(rng, centers, 200)
    got, truth = index.search(queries, k=10), exact.search(queries, k=10)
    recall = np.mean([len({i for i, _ in a} & {i for i, _ in b}) / 10 for a, b in zip(got, truth)])
    assert recall >= 0.95

    # Growth up to twice the training set is appended; beyond it the lists are retrained.
    store_vectors(store, clustered(rng, centers, 1000), "synthetic@1")
    grown = SignatureIndex.load(store, tmp_path / "index", "synthetic@1", flat_max=1000)
    assert grown.last_action == "extended" and grown.count == 3000 and sidecar(grown)["trained_count"] == 2000
    store_vectors(store, clustered(rng, centers, 1001), "synthetic@1")
    retrained = SignatureIndex.load(store, tmp_path / "index", "synthetic@1", flat_max=1000)
    assert retrained.last_action == "rebuilt" and sidecar(retrained)["trained_count"] == 4001
    assert retrained.index.nlist == ivf_lists(4001)


def test_changed_flat_max_rebuilds_the_other_kind(store, tmp_path: Path, embedder: Embedder):
    assert load(store, tmp_path, embedder.model_id, flat_max=50_000).kind == FLAT
    index = load(store, tmp_path, embedder.model_id, flat_max=5)
    assert index.last_action == "rebuilt" and index.kind == IVF
    back = load(store, tmp_path, embedder.model_id, flat_max=50_000)
    assert back.last_action == "rebuilt" and back.kind == FLAT
