"""The embedding model without torch: its ONNX export, run by onnxruntime.

    export_onnx(spec)          -> write the export and its record (needs torch; once, at setup)
    ready_export(spec)         -> the verified export for this model, or None
    OnnxEncoder(spec, export)  -> .encode(texts): the vectors sentence-transformers gives

Why: importing torch and sentence-transformers costs about 5 s and 550 MiB, and an agent
pays it for every error it has not met before. onnxruntime and tokenizers load in about
0.2 s (docs/benchmarks.md, "Query encoder").

sentence-transformers stays the reference. The export is made from the verified
``model.safetensors`` with ``torch.onnx.export`` and checked against sentence-transformers on
sample texts before it is kept. Its SHA-256 and the weights' hash it came from are kept in a
JSON record beside it, and ``ready_export`` checks both before onnxruntime reads the file.
Vectors from either encoder carry the same model id: they agree to cosine >= 0.999
(tests/kb/recall/test_onnx_encoder.py, 500 real templates), so stored vectors and indexes stay valid.

Only pipelines this module reproduces exactly are exported: a BERT-like transformer,
mean pooling over the attention mask, optional normalisation (vectors are always
normalised here, as ``Embedder.encode`` does). Anything else keeps sentence-transformers.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcmem.kb.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from hpcmem.kb.recall.embed import ModelSpec

__all__ = ["OnnxExport", "default_onnx_dir", "export_path", "ready_export", "export_onnx", "OnnxEncoder",
           "supported_pipeline"]

RECORD_FORMAT = 1
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MAX_BATCH = 8
# An export is kept only when it reproduces sentence-transformers this closely on the check texts.
MIN_EXPORT_COSINE = 0.9999
CHECK_TEXTS = (
    "python_exception: ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
    "oom: slurmstepd: error: Detected <NUM> oom_kill event in StepId=<JOBID>. Some of the step tasks have been OOM Killed.",
    "module_not_found: Lmod has detected the following error: The following module(s) are unknown: cuda/<NUM>",
    "mpi: MPI_ABORT was invoked on rank <NUM> in communicator MPI_COMM_WORLD with errorcode <NUM>.",
    "x",
    "time_limit " * 400,  # longer than max_seq_length: truncation must agree too
)


@dataclass(frozen=True)
class OnnxExport:
    """A verified export: the file and what its record says."""

    path: Path
    record: dict[str, Any]

    @property
    def max_seq_length(self) -> int:
        return int(self.record["max_seq_length"])


def default_onnx_dir() -> Path:
    """Beside the installation (``<prefix>/share/hpcmem/models``): made once by whoever
    installed hpcmem, shared by every user of that installation."""
    return Path(sys.prefix) / "share" / "hpcmem" / "models"


def export_path(spec: "ModelSpec", onnx_dir: Path) -> Path:
    return onnx_dir / (spec.model_id.replace("@", "-").replace("/", "_") + ".onnx")


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def supported_pipeline(model_dir: Path) -> tuple[bool, str, int]:
    """(supported, why not, max_seq_length) for a sentence-transformers directory."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
        st_config = json.loads((model_dir / "sentence_bert_config.json").read_text())
    except (OSError, ValueError) as exc:
        return False, f"cannot read its pipeline ({exc})", 0
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return False, f"pipeline {kinds} is not transformer + pooling (+ normalize)", 0
    try:
        pooling = json.loads((model_dir / modules[1]["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError) as exc:
        return False, f"cannot read its pooling config ({exc})", 0
    modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v is True)
    if modes != ["pooling_mode_mean_tokens"]:
        return False, f"pooling {modes} is not mean pooling", 0
    return True, "", int(st_config.get("max_seq_length") or 512)


def ready_export(spec: "ModelSpec", onnx_dir: Path) -> OnnxExport | None:
    """The export made from exactly these weights, checked; None when there is none.

    A file whose hash is not the one recorded is damaged or replaced: that is an error,
    not a reason to fall back silently.
    """
    from hpcmem.kb.recall.embed import file_sha256

    path = export_path(spec, onnx_dir)
    try:
        record = json.loads(_record_path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or not path.is_file():
        return None
    if record.get("model_id") != spec.model_id or (spec.sha256 and record.get("source_sha256") != spec.sha256):
        return None  # an export of other weights (a site changed its model): not ours
    actual = file_sha256(path, spec.verified_cache)
    if actual != record.get("onnx_sha256"):
        raise ConfigError(
            f"{path} has SHA-256 {actual}, its record says {record.get('onnx_sha256')}",
            hint="the ONNX export is damaged or was replaced; run: hpcmem model export --force",
        )
    return OnnxExport(path, record)


def export_onnx(spec: "ModelSpec", onnx_dir: Path, *, force: bool = False) -> tuple[OnnxExport, bool]:
    """Export the model to ONNX (torch + transformers), check it, keep it with its record.

    Returns (export, made): made is False when a verified export was already there.
    """
    from hpcmem.kb.recall.embed import Embedder, file_sha256, verify_model

    if not force:
        existing = ready_export(spec, onnx_dir)
        if existing is not None:
            return existing, False
    verify_model(spec)
    supported, why, max_len = supported_pipeline(spec.path)
    if not supported:
        raise ConfigError(f"{spec.path}: {why}; it is encoded with sentence-transformers only")
    path = export_path(spec, onnx_dir)
    try:
        onnx_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {onnx_dir}: {exc.strerror}",
                          hint="set model.onnx_dir (HPCMEM_ONNX_DIR) to a writable directory") from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            versions = _torch_export(spec.path, tmp)
        except (ImportError, RuntimeError, ValueError) as exc:  # torch's exporter: a missing package, an op
            raise ConfigError(f"ONNX export of {spec.path} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                              hint="the export needs torch, transformers and onnx (pip install 'hpcmem[ml]')") from None
        candidate = OnnxExport(tmp, {"max_seq_length": max_len})
        reference = Embedder(spec, encoder="sentence-transformers").encode(list(CHECK_TEXTS))
        ours = OnnxEncoder(spec, candidate).encode(list(CHECK_TEXTS))
        cosine = float((reference * ours).sum(axis=1).min())
        if cosine < MIN_EXPORT_COSINE:
            raise ConfigError(f"the ONNX export of {spec.path} differs from sentence-transformers "
                              f"(min cosine {cosine:.6f} < {MIN_EXPORT_COSINE}); not kept")
        record = {
            "format": RECORD_FORMAT, "model_id": spec.model_id, "source_sha256": spec.sha256,
            "onnx_sha256": file_sha256(tmp, None), "opset": OPSET, "inputs": list(INPUTS),
            "max_seq_length": max_len, "pooling": "mean", "normalize": True,
            "checked": {"texts": len(CHECK_TEXTS), "min_cosine": round(cosine, 7)},
            "exported_with": versions, "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        record_tmp = _record_path(tmp)
        record_tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.chmod(record_tmp, 0o644)
        os.replace(record_tmp, _record_path(path))
    except OSError as exc:
        raise ConfigError(f"cannot write the ONNX export to {onnx_dir}: {exc.strerror}") from None
    finally:
        for leftover in (tmp, _record_path(tmp)):
            leftover.unlink(missing_ok=True)
    return OnnxExport(path, record), True


def _torch_export(model_dir: Path, dest: Path) -> dict[str, str]:
    """Trace the transformer (not pooling) to ONNX with dynamic batch and sequence axes."""
    import warnings

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    bert = transformers.AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()

    class LastHiddenState(torch.nn.Module):
        # Keyword arguments: transformers 5 changed the positional order of forward().
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    sample = tuple(torch.ones(1, 8, dtype=torch.long) if name != "token_type_ids" else torch.zeros(1, 8, dtype=torch.long)
                   for name in INPUTS)
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUTS, "last_hidden_state")}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        # dynamo=False: the TorchScript exporter needs neither onnxscript nor a network.
        torch.onnx.export(LastHiddenState(bert), sample, str(dest), input_names=list(INPUTS),
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)
    return {"torch": torch.__version__, "transformers": transformers.__version__}


class OnnxEncoder:
    """Tokenize with the model's own tokenizer.json, run the export, mean-pool, normalise."""

    def __init__(self, spec: "ModelSpec", export: OnnxExport) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import onnxruntime
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(spec.path / "tokenizer.json"))
        except Exception as exc:  # noqa: BLE001 - the Rust side raises its own exception type
            raise ConfigError(f"cannot read {spec.path / 'tokenizer.json'}: {exc}") from None
        self.tokenizer.enable_truncation(export.max_seq_length)
        self.tokenizer.enable_padding(pad_id=self._pad_id(), pad_token="[PAD]")
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # warnings about unused initialisers are not the user's concern
        # Basic graph optimisations: as fast as the extended ones for one query here, and
        # without their pre-packed copies of the weights (peak RSS, docs/benchmarks.md).
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        try:
            self.session = onnxruntime.InferenceSession(str(export.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"cannot load the ONNX export {export.path}: {exc}",
                              hint="run: hpcmem model export --force") from None
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self._lock = threading.Lock()

    def _pad_id(self) -> int:
        pad = self.tokenizer.token_to_id("[PAD]")
        return 0 if pad is None else int(pad)

    def encode(self, texts: list[str], batch_size: int = 64) -> "np.ndarray":
        import numpy as np

        # Small batches: throughput is the same on a CPU, and activation memory (batch x
        # sequence x 1536 per layer) stays small enough for the 350 MiB query budget.
        batch_size = min(batch_size, MAX_BATCH)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sorting by length keeps padding (wasted work) small within a batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            with self._lock:  # the tokenizer's padding/truncation state is shared
                encodings = self.tokenizer.encode_batch([texts[i] for i in chunk])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            types = np.array([e.type_ids for e in encodings], dtype=np.int64)
            hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[chunk] = pooled / np.clip(norms, 1e-12, None)
        return out
