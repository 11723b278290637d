"""One FAISS index of signature embeddings per store: a cache, rebuilt whenever in doubt.

The vectors of record live in the store (``signatures.embedding``); the index only makes
nearest-neighbour search fast. It is kept at ``<index.dir>/<store_id>.faiss`` with a JSON
sidecar (``<store_id>.json``) saying what it holds::

    {format, store_id, model_id, kind, count, max_signature_id, generation,
     rebuild_generation, trained_count, file_size, file_mtime_ns, file_inode}

``SignatureIndex.load`` compares the sidecar with the store's counters (StoreMeta
``index_generation`` and ``index_rebuild_generation``, bumped by ``kb.recall.embed``):

- same generation                    -> use the file as it is
- only ``index_generation`` advanced -> add the signatures above ``max_signature_id``
- anything else (rebuild generation, model id, missing/corrupt/truncated file or sidecar,
  a file that is not the one the sidecar describes, an index of the wrong kind for its
  size, an IVF index grown to twice what it was trained on) -> rebuild from the store

Up to ``flat_max`` vectors the index is exact (``IndexFlatIP`` in ``IndexIDMap2``: inner
product of normalised vectors is cosine similarity, FAISS ids are signature ids). Above
it, ``IndexIVFFlat`` (inner product): k-means lists trained on a sample of the stored
vectors, searched ``IVF_NPROBE`` lists at a time. bench/bench_index.py chose it over HNSW:
it kept recall@10 >= 0.99 where HNSW fell to 0.93 and built about twice as fast, which
matters because a rebuild runs inside a recall. The same bench chose ``flat_max``
(docs/benchmarks.md).

Writes go to a temporary file that is fsynced and renamed over the old one, under a
file lock, so concurrent recalls never see half a file and do not rebuild twice. When
the index directory cannot be written (a read-only lab cache) the index lives in memory.

Only the standard library is imported at module level; numpy, faiss and SQLAlchemy are
imported by the functions that use them (this module is only imported by recall).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from hpcmem.kb.recall.embed import read_generations
from hpcmem.kb.errors import InputError, StoreError

if TYPE_CHECKING:
    import numpy as np

    from hpcmem.kb.store.database import Store

__all__ = ["SignatureIndex", "IndexMeta", "store_id", "DEFAULT_FLAT_MAX", "FLAT", "IVF"]

FORMAT = 1
FLAT = "flat"
IVF = "ivf"
# Exact search of this many vectors stays under 2 ms per query (p95, one core): bench_index.py.
DEFAULT_FLAT_MAX = 20_000
# IVF: about 4 * sqrt(N) lists, each trained on >= IVF_TRAIN_PER_LIST sample points (faiss
# wants 39+); IVF_NPROBE lists searched per query kept recall@10 >= 0.99 in the bench.
IVF_LISTS_PER_SQRT_N = 4
IVF_TRAIN_PER_LIST = 40
IVF_NPROBE = 16
# New vectors join the nearest existing list; once the index has doubled since it was
# trained, the lists no longer fit the data as well and the next load retrains.
IVF_RETRAIN_GROWTH = 2
TRAIN_SEED = 0  # the same vectors always give the same lists
FEW_QUERIES = 8  # below this many queries per call, search on one thread
STORE_ID_KEY = "store_id"
FETCH_ROWS = 10_000  # vectors read from the store per query while building (bounds memory)
ID_CHUNK = 900  # ids per IN (...) list; under SQLite's variable limit
LOCK_TIMEOUT_S = 120.0


def store_id(store: "Store") -> str:
    """The store's UUID (StoreMeta ``store_id``), created on first use.

    A store that cannot be written and has no id yet (a read-only lab store) gets a
    UUID derived from its URL instead, stable for every reader of that URL.
    """
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from hpcmem.kb.recall.embed import dialect_insert
    from hpcmem.kb.store.models import StoreMeta

    query = select(StoreMeta.value).where(StoreMeta.key == STORE_ID_KEY)
    with store.session() as session:
        value = session.scalar(query)
    if value:
        return value
    try:
        with store.transaction() as session:
            insert = dialect_insert(session)
            session.execute(insert(StoreMeta).values(key=STORE_ID_KEY, value=str(uuid.uuid4()))
                            .on_conflict_do_nothing(index_elements=[StoreMeta.key]))
            value = session.scalar(query)  # another process may have won the insert
    except SQLAlchemyError:
        value = None
    return value or url_store_id(store)


def url_store_id(store: "Store") -> str:
    """The id of a store that has none recorded, derived from its URL: stable for every
    reader of that URL, and computed without writing to the store."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, store.display_url))


@dataclass
class IndexMeta:
    """The sidecar: what the index file holds and which store state it reflects."""

    format: int
    store_id: str
    model_id: str
    kind: str
    count: int
    max_signature_id: int
    generation: int
    rebuild_generation: int
    trained_count: int = 0  # IVF: how many vectors the lists were trained on
    # The file this sidecar describes: a file replaced since (or half-written) is not it.
    file_size: int = 0
    file_mtime_ns: int = 0
    file_inode: int = 0

    @classmethod
    def from_json(cls, text: str) -> "IndexMeta":
        data = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class SignatureIndex:
    """Nearest signatures of a store by cosine similarity. Build one with ``load``."""

    def __init__(self, store: "Store", index_dir: Path | str, model_id: str, flat_max: int, sid: str,
                 reader: Any = None) -> None:
        self.store = store
        # A plain DB-API reader (kb.store.reader.StoreReader) answers the read-only checks, so
        # an index that is current costs no SQLAlchemy import; building still uses the ORM.
        self.reader = reader
        self.index_dir = Path(index_dir).expanduser()
        self.model_id = model_id
        self.flat_max = int(flat_max)
        self.store_id = sid
        self.path = self.index_dir / f"{sid}.faiss"
        self.sidecar_path = self.index_dir / f"{sid}.json"
        self.lock_path = self.index_dir / f"{sid}.lock"
        self.index: Any = None  # faiss index, None while the store has no vectors
        self.meta: IndexMeta | None = None
        self.last_action: str | None = None  # "current" | "loaded" | "extended" | "rebuilt"
        self.persisted = False  # whether the file on disk matches what is in memory

    # -- public ---------------------------------------------------------------------
    @classmethod
    def load(cls, store: "Store", index_dir: Path | str, model_id: str,
             flat_max: int = DEFAULT_FLAT_MAX, reader: Any = None) -> "SignatureIndex":
        """The store's index, read from its file, extended or rebuilt as needed.

        ``reader``: the store's plain reader, for the checks a current index needs.
        """
        known = reader.meta(STORE_ID_KEY) if reader is not None else None
        if known is None and reader is not None and reader.scope != "user":
            known = url_store_id(store)  # a reader of a shared store never writes to it
        index = cls(store, index_dir, model_id, flat_max, known or store_id(store), reader)
        index.refresh()
        return index

    @property
    def count(self) -> int:
        return 0 if self.index is None else int(self.index.ntotal)

    @property
    def kind(self) -> str:
        return self.meta.kind if self.meta else FLAT

    @property
    def dim(self) -> int | None:
        return None if self.index is None else int(self.index.d)

    def refresh(self) -> None:
        """Bring the index up to the store's current generation."""
        gen, rgen = self._generations()
        if self._current(gen, rgen):
            self.last_action = "current"
            return
        if self._read_file(gen, rgen):
            self.last_action = "loaded"
            return
        with self._file_lock() as writable:
            gen, rgen = self._generations()
            # Another process may have brought the file up to date while we waited.
            if writable and self._read_file(gen, rgen):
                self.last_action = "loaded"
                return
            if self._extendable(gen, rgen) and self._extend(gen):
                self.last_action = "extended"
            else:
                self._rebuild(gen, rgen)
                self.last_action = "rebuilt"
            self.persisted = writable and self._save()

    def rebuild(self) -> None:
        """Rebuild from the stored vectors, whatever the file says."""
        with self._file_lock() as writable:
            self._rebuild(*self._generations())
            self.last_action = "rebuilt"
            self.persisted = writable and self._save()

    def search(self, query: "np.ndarray", k: int = 10) -> list[list[tuple[int, float]]]:
        """For each query vector, up to k (signature id, cosine similarity), best first."""
        import numpy as np

        queries = np.asarray(query, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2:
            raise InputError(f"query must be a vector or a matrix of vectors, got shape {queries.shape}")
        if self.index is None or k <= 0:
            return [[] for _ in range(len(queries))]
        if queries.shape[1] != self.index.d:
            raise InputError(f"query vectors have {queries.shape[1]} dimensions, the index {self.index.d}")
        k = min(k, self.count)
        if self.kind == IVF:
            self.index.nprobe = min(IVF_NPROBE, self.index.nlist)
        scores, ids = _search(self.index, np.ascontiguousarray(queries), k)
        return [[(int(i), float(s)) for i, s in zip(row_ids, row_scores) if i >= 0]
                for row_ids, row_scores in zip(ids, scores)]

    # -- state checks ---------------------------------------------------------------
    def _generations(self) -> tuple[int, int]:
        if self.reader is not None:
            from hpcmem.kb.store.index_keys import GENERATION_KEY, REBUILD_GENERATION_KEY

            return int(self.reader.meta(GENERATION_KEY) or 0), int(self.reader.meta(REBUILD_GENERATION_KEY) or 0)
        with self.store.session() as session:
            return read_generations(session)

    def _current(self, gen: int, rgen: int) -> bool:
        return (self.meta is not None and self.meta.generation == gen and self.meta.rebuild_generation == rgen)

    def _kind_for(self, count: int) -> str:
        # A file of the other kind (flat_max changed since it was built) is rebuilt once.
        return FLAT if count <= self.flat_max else IVF

    def _extendable(self, gen: int, rgen: int) -> bool:
        return (self.meta is not None and self.meta.rebuild_generation == rgen and self.meta.generation <= gen
                and self.meta.model_id == self.model_id)

    def _read_file(self, gen: int, rgen: int) -> bool:
        """Adopt the file if it is valid for this store and model; True if it is current.

        A valid file of an older generation is adopted too (to be extended); anything
        doubtful leaves the in-memory index as it was.
        """
        import faiss

        try:
            meta = IndexMeta.from_json(self.sidecar_path.read_text())
            before = os.stat(self.path)
        except (OSError, ValueError, TypeError):
            return False
        if not (meta.format == FORMAT and meta.store_id == self.store_id and meta.model_id == self.model_id
                and meta.rebuild_generation == rgen and meta.generation <= gen
                and meta.kind == self._kind_for(meta.count) and _same_file(before, meta)):
            return False
        if self.meta is not None and meta.generation <= self.meta.generation and self._extendable(gen, rgen):
            return self._current(gen, rgen)  # what we hold is at least as new as the file
        try:
            index = faiss.read_index(str(self.path))
            after = os.stat(self.path)
        except (RuntimeError, OSError):
            return False
        if not _same_file(after, meta) or index.ntotal != meta.count:
            return False
        self.index, self.meta = index, meta
        self.persisted = True
        return meta.generation == gen

    # -- building ---------------------------------------------------------------------
    def _rebuild(self, gen: int, rgen: int) -> None:
        all_ids = self._stored_ids()
        kind = self._kind_for(len(all_ids))
        index, max_id = None, 0
        if kind == IVF:
            index = _trained_ivf(self._vectors_by_id(_training_sample(all_ids)), len(all_ids))
        for ids, vectors in self._stored_vectors(after_id=0):
            if index is None:
                index = _new_flat(vectors.shape[1])
            index.add_with_ids(vectors, ids)
            max_id = int(ids[-1])
        self.index = index
        self.meta = IndexMeta(FORMAT, self.store_id, self.model_id, kind, self.count, max_id, gen, rgen,
                              trained_count=len(all_ids) if kind == IVF else 0)

    def _extend(self, gen: int) -> bool:
        """Add the vectors above max_signature_id; False if the index must be rebuilt instead."""
        assert self.meta is not None
        for ids, vectors in self._stored_vectors(after_id=self.meta.max_signature_id):
            grown = self.count + len(ids)
            if self.meta.kind == FLAT and grown > self.flat_max:
                return False  # crossing flat_max: rebuild as IVF
            if self.meta.kind == IVF and grown > IVF_RETRAIN_GROWTH * self.meta.trained_count:
                return False
            if self.index is None:
                self.index = _new_flat(vectors.shape[1])
            self.index.add_with_ids(vectors, ids)
            self.meta.max_signature_id = int(ids[-1])
        self.meta.count = self.count
        self.meta.generation = gen
        return True

    def _stored(self) -> tuple:
        from hpcmem.kb.store.models import Signature

        return (Signature.embedding_model == self.model_id, Signature.embedding.is_not(None))

    def _stored_ids(self) -> list[int]:
        from sqlalchemy import select

        from hpcmem.kb.store.models import Signature

        with self.store.session() as session:
            return list(session.scalars(select(Signature.id).where(*self._stored()).order_by(Signature.id)))

    def _stored_vectors(self, after_id: int) -> Iterator[tuple["np.ndarray", "np.ndarray"]]:
        """(ids int64, vectors float32 (n, dim)) in id order, FETCH_ROWS at a time."""
        from sqlalchemy import select

        from hpcmem.kb.store.models import Signature

        while True:
            with self.store.session() as session:
                rows = session.execute(
                    select(Signature.id, Signature.embedding).where(*self._stored(), Signature.id > after_id)
                    .order_by(Signature.id).limit(FETCH_ROWS)
                ).all()
            if not rows:
                return
            ids, vectors = self._as_arrays(rows)
            yield ids, vectors
            after_id = int(ids[-1])

    def _vectors_by_id(self, wanted: list[int]) -> "np.ndarray":
        import numpy as np
        from sqlalchemy import select

        from hpcmem.kb.store.models import Signature

        rows = []
        with self.store.session() as session:
            for start in range(0, len(wanted), ID_CHUNK):
                chunk = wanted[start:start + ID_CHUNK]
                rows += session.execute(
                    select(Signature.id, Signature.embedding).where(*self._stored(), Signature.id.in_(chunk))
                ).all()
        return self._as_arrays(rows)[1] if rows else np.zeros((0, 0), dtype=np.float32)

    def _as_arrays(self, rows: list) -> tuple["np.ndarray", "np.ndarray"]:
        import numpy as np

        dim = self.dim or len(rows[0][1]) // 4
        for sid, blob in rows:
            if len(blob) != 4 * dim:
                raise StoreError(
                    f"signature {sid} has a {len(blob) // 4}-dimensional vector, expected {dim}",
                    hint="clear its embedding (embedding = NULL) and run the embedding step again",
                )
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), dim)
        return ids, np.ascontiguousarray(vectors, dtype=np.float32)

    # -- files --------------------------------------------------------------------------
    @contextmanager
    def _file_lock(self) -> Iterator[bool]:
        """Hold the index's file lock; yields False when the directory cannot be written."""
        from filelock import FileLock, Timeout

        lock: FileLock | None = FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S)
        try:
            self.index_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            lock.acquire()
        except (OSError, Timeout):
            lock = None
        try:
            yield lock is not None
        finally:
            if lock is not None:
                lock.release()

    def _save(self) -> bool:
        """Write index and sidecar atomically; False (index kept in memory) if it cannot."""
        import faiss

        if self.index is None or self.meta is None:
            return False
        mode = 0o660 if self.index_dir.stat().st_mode & stat.S_IWGRP else 0o600
        try:
            _atomic_write(self.path, mode, lambda tmp: faiss.write_index(self.index, tmp))
            st = os.stat(self.path)
            self.meta.file_size, self.meta.file_mtime_ns, self.meta.file_inode = st.st_size, st.st_mtime_ns, st.st_ino
            sidecar = json.dumps(asdict(self.meta), indent=1, sort_keys=True)
            _atomic_write(self.sidecar_path, mode, lambda tmp: Path(tmp).write_text(sidecar))
        except (OSError, RuntimeError):  # faiss reports a full disk as RuntimeError
            return False
        return True


def _new_flat(dim: int) -> Any:
    import faiss

    return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))


def ivf_lists(count: int) -> int:
    """Number of IVF lists for ``count`` vectors: ~4 sqrt(N), with enough points per list."""
    return max(1, min(int(IVF_LISTS_PER_SQRT_N * count ** 0.5), count // IVF_TRAIN_PER_LIST))


def _training_sample(ids: list[int]) -> list[int]:
    import random

    size = min(len(ids), IVF_TRAIN_PER_LIST * ivf_lists(len(ids)))
    return sorted(random.Random(TRAIN_SEED).sample(ids, size))


def _trained_ivf(sample: "np.ndarray", count: int) -> Any:
    """An empty IndexIVFFlat (inner product) whose lists were trained on ``sample``."""
    import faiss

    dim = sample.shape[1]
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, ivf_lists(count), faiss.METRIC_INNER_PRODUCT)
    index.cp.min_points_per_centroid = 1  # small samples are expected; faiss would warn on stderr
    index.cp.seed = TRAIN_SEED
    index.train(sample)
    index.nprobe = min(IVF_NPROBE, index.nlist)
    return index


def _search(index: Any, queries: "np.ndarray", k: int) -> tuple["np.ndarray", "np.ndarray"]:
    """A few queries run on one OpenMP thread: waking a second one costs more than it
    saves for a single query (bench/bench_index.py, columns 1t vs 2t)."""
    import faiss

    if len(queries) >= FEW_QUERIES:
        return index.search(queries, k)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(queries, k)
    finally:
        faiss.omp_set_num_threads(threads)


def _same_file(st: os.stat_result, meta: IndexMeta) -> bool:
    return (st.st_size, st.st_mtime_ns, st.st_ino) == (meta.file_size, meta.file_mtime_ns, meta.file_inode)


def _atomic_write(path: Path, mode: int, write: Any) -> None:
    """write(tmp_name) into a temporary file beside ``path``, fsync it, rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
