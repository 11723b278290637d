"""The torch-free query encoder: the ONNX export agrees with sentence-transformers on real
templates, is refused when tampered with, and keeps torch out of the query path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcmem.kb.config import load_config
from hpcmem.kb.recall.embed import Embedder, model_spec, text_for_embedding
from hpcmem.kb.errors import ConfigError
from hpcmem.kb.recall.onnx_encoder import export_onnx, export_path, ready_export
from hpcmem.kb.signatures.fingerprint import excerpt_template, fingerprint

CORPUS = Path(__file__).resolve().parents[3] / "data" / "corpus" / "raw"
PARITY_SAMPLE = 600


def config_for(home: Path, **env: str):
    return load_config(environ={"HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", **env})


@pytest.fixture(scope="session")
def spec(tmp_path_factory):
    """The bundled model with its export in the installation's default place (made by
    `make setup`; made here if missing, so the tests never depend on a manual step)."""
    spec = model_spec(config_for(tmp_path_factory.mktemp("onnx-home")))
    export_onnx(spec, spec.onnx_dir)
    return spec


def real_templates() -> list[str]:
    """The first PARITY_SAMPLE distinct texts recall embeds for the real corpus: every
    decisive-line template, then masked excerpts (both are query-side vectors)."""
    decisive: dict[str, None] = {}
    excerpts: dict[str, None] = {}
    for path in sorted(CORPUS.glob("*.instances.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            text = json.loads(line)["text"]
            sig = fingerprint(text)
            decisive.setdefault(text_for_embedding(sig.template, sig.category), None)
            excerpts.setdefault(text_for_embedding(excerpt_template(text), sig.category), None)
    texts = list(dict.fromkeys([*decisive, *excerpts]))
    assert len(texts) >= PARITY_SAMPLE
    return texts[:PARITY_SAMPLE]


def test_onnx_vectors_agree_with_sentence_transformers_on_500_real_templates(spec):
    texts = real_templates()
    reference = Embedder(spec, encoder="sentence-transformers").encode(texts)
    onnx = Embedder(spec, encoder="onnx")
    assert onnx.backend == "onnx"
    ours = onnx.encode(texts)
    cosines = (reference * ours).sum(axis=1)
    assert ours.shape == reference.shape == (PARITY_SAMPLE, 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert cosines.min() >= 0.999, texts[int(cosines.argmin())]
    # one at a time (the query path) gives the same vectors as a padded batch
    single = np.vstack([onnx.encode([t]) for t in texts[:20]])
    assert (single * ours[:20]).sum(axis=1).min() >= 0.99999


def test_auto_uses_the_export_and_the_query_path_never_imports_torch(spec, tmp_path):
    code = (
        "import sys, json\n"
        "from hpcmem.kb.config import load_config\n"
        "from hpcmem.kb.recall.embed import Embedder, model_spec\n"
        f"config = load_config(environ={{'HPCMEM_HOME': {str(tmp_path)!r}, 'HPCMEM_DISABLE_LOCAL_CONFIG': '1'}})\n"
        "e = Embedder(model_spec(config))\n"
        "v = e.encode(['oom: slurmstepd: error: Detected 1 oom_kill event'])\n"
        "print(json.dumps({'backend': e.backend, 'dim': int(v.shape[1]),"
        " 'torch': 'torch' in sys.modules, 'st': 'sentence_transformers' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"backend": "onnx", "dim": 384, "torch": False, "st": False}


def test_a_tampered_export_is_refused_and_another_models_export_is_ignored(spec, tmp_path):
    mine = tmp_path / "models"
    mine.mkdir()
    original = export_path(spec, spec.onnx_dir)
    copy = export_path(spec, mine)
    shutil.copy(original, copy)
    shutil.copy(original.with_name(original.name + ".json"), copy.with_name(copy.name + ".json"))
    assert ready_export(spec, mine) is not None

    with open(copy, "r+b") as fh:  # one byte changed in the middle of the weights
        fh.seek(copy.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ConfigError, match="SHA-256"):
        ready_export(spec, mine)

    record_file = copy.with_name(copy.name + ".json")
    record = json.loads(record_file.read_text())
    record["source_sha256"] = "0" * 64  # an export of other weights
    record_file.write_text(json.dumps(record))
    assert ready_export(spec, mine) is None


def test_onnx_required_without_an_export_is_a_clear_error(tmp_path):
    spec = model_spec(config_for(tmp_path, HPCMEM_ONNX_DIR=str(tmp_path / "empty"), HPCMEM_ENCODER="onnx"))
    with pytest.raises(ConfigError, match="no export") as err:
        Embedder(spec).encode(["x"])
    assert "hpcmem model export" in err.value.hint


def test_unknown_encoder_setting_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="model.encoder"):
        model_spec(config_for(tmp_path, HPCMEM_ENCODER="gpu"))


def test_model_export_command_writes_a_verified_export_with_its_record(spec, tmp_path):
    """The setup step, as `make setup` runs it, into an empty directory."""
    hpcmem = str(Path(sys.executable).with_name("hpcmem"))
    env = {"HPCMEM_HOME": str(tmp_path / "home"), "HPCMEM_DISABLE_LOCAL_CONFIG": "1",
           "HPCMEM_ONNX_DIR": str(tmp_path / "models"), "PATH": "/usr/bin:/bin"}
    made = subprocess.run([hpcmem, "model", "export", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert info["made"] is True and info["source_sha256"] == spec.sha256 and info["checked"]["min_cosine"] >= 0.9999
    assert Path(info["path"]).stat().st_mode & 0o777 == 0o644  # readable by every user of the installation
    again = subprocess.run([hpcmem, "model", "export", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert json.loads(again.stdout)["made"] is False
    status = subprocess.run([hpcmem, "model", "status", "--json"], capture_output=True, text=True, env=env)
    assert json.loads(status.stdout)["encoder"] == "onnx"


def test_without_an_export_recall_still_answers_and_says_how_to_speed_it_up(spec, tmp_path):
    """No export (a fresh site that skipped `hpcmem model export`): sentence-transformers
    encodes, and the recall's warnings name the one command that avoids it."""
    hpcmem = str(Path(sys.executable).with_name("hpcmem"))
    env = {**os.environ, "HPCMEM_HOME": str(tmp_path / "home"), "HPCMEM_DISABLE_LOCAL_CONFIG": "1",
           "HPCMEM_ONNX_DIR": str(tmp_path / "no-export")}
    assert subprocess.run([hpcmem, "record", "--error", "RuntimeError: the frobnicator overheated",
                           "--cause", "c", "--fix", "f"], env=env, capture_output=True).returncode == 0
    done = subprocess.run([hpcmem, "recall", "--json", "ValueError: the quux spline diverged at step 7"], env=env,
                          capture_output=True, text=True, timeout=300)
    doc = json.loads(done.stdout)
    assert any("hpcmem model export" in w for w in doc["warnings"]), doc["warnings"]
