"""The package layering.

Between packages: ``ingest`` reads the outside world and uses ``kb``; ``kb`` never imports
``ingest`` or ``cli``, so the knowledge base can be used (and tested) alone.

Inside ``kb``: one sub-package per pipeline stage, each importing only the stages below it
(``kb/__init__.py`` draws the order). Imports written inside functions to keep start-up
cheap count like any other: a lazy import that runs back up is still a cycle in the design.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The cross-cutting modules that sit flat in kb/ and import no stage.
KB_TOP = {"errors", "config", "slurm_units", "text"}
# stage -> the stages it may import (besides KB_TOP)
KB_ALLOWED = {
    "safety": set(),
    "signatures": {"safety"},
    "store": {"signatures", "safety"},
    "jobs": {"store", "signatures", "safety"},
    "environment": {"jobs", "store", "signatures", "safety"},
    "lessons": {"jobs", "store", "signatures", "safety"},
    "recall": {"lessons", "jobs", "environment", "store", "signatures", "safety"},
}


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in the file names, at any depth (lazy imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def kb_stages_named(module: str, imported: list[str]) -> set[str]:
    """The kb stages one import statement reaches: ``from hpcmem.kb.store import reader`` and
    ``from hpcmem.kb import store`` both reach ``store``."""
    parts = module.split(".")
    if parts[:2] != ["hpcmem", "kb"]:
        return set()
    if len(parts) > 2:
        return {parts[2]}
    return set(imported)


def kb_back_edges(kb: Path) -> list[str]:
    """Imports inside ``kb`` that break the stage order, as 'file: module' lines."""
    known = KB_ALLOWED.keys() | KB_TOP
    offenders = []
    for path in sorted(kb.rglob("*.py")):
        rel = path.relative_to(kb)
        here = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        allowed = KB_TOP if here in KB_TOP or here == "__init__" else KB_TOP | {here} | KB_ALLOWED[here]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                statements = [(alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                statements = [(node.module, [alias.name for alias in node.names])]
            else:
                continue
            for module, names in statements:
                for stage in sorted(kb_stages_named(module, names)):
                    if stage not in known:
                        offenders.append(f"kb/{rel}: {module} (no such stage: {stage})")
                    elif stage not in allowed:
                        offenders.append(f"kb/{rel}: {module}")
    return offenders


@pytest.mark.parametrize("package, forbidden", [("kb", ("hpcmem.ingest", "hpcmem.cli")),
                                                ("ingest", ("hpcmem.cli",))])
def test_lower_layers_do_not_import_higher_ones(package, forbidden):
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / package).rglob("*.py")
        for name in imported_modules(path)
        if name.startswith(forbidden)
    }
    assert not offenders, sorted(offenders)


def test_kb_stages_import_only_the_stages_below_them():
    assert kb_back_edges(ROOT / "kb") == []


def test_nothing_but_the_cross_cutting_modules_sits_flat_in_kb():
    flat = {p.stem for p in (ROOT / "kb").glob("*.py")} - {"__init__"}
    assert flat == KB_TOP
    stages = {p.name for p in (ROOT / "kb").iterdir() if (p / "__init__.py").exists()}
    assert stages == set(KB_ALLOWED)


def test_the_scan_sees_lazy_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from hpcmem.ingest.lmod import live_modules\n")
    assert "hpcmem.ingest.lmod" in imported_modules(source)


@pytest.mark.parametrize("planted", [
    "def f():\n    from hpcmem.kb.recall.scoring import load_model\n",  # lazy, and two stages up
    "from hpcmem.kb.lessons import write\n",                             # package-form import
    "import hpcmem.kb.jobs.write\n",
])
def test_a_planted_back_edge_fails_the_check(tmp_path, planted):
    kb = tmp_path / "kb"
    shutil.copytree(ROOT / "kb", kb, ignore=shutil.ignore_patterns("__pycache__"))
    assert kb_back_edges(kb) == []
    reader = kb / "store" / "reader.py"
    reader.write_text(reader.read_text(encoding="utf-8") + "\n\n" + planted, encoding="utf-8")
    assert [line.split(": ")[0] for line in kb_back_edges(kb)] == ["kb/store/reader.py"]


def test_a_top_level_module_may_not_import_a_stage(tmp_path):
    kb = tmp_path / "kb"
    shutil.copytree(ROOT / "kb", kb, ignore=shutil.ignore_patterns("__pycache__"))
    config = kb / "config.py"
    config.write_text(config.read_text(encoding="utf-8") + "\nfrom hpcmem.kb.safety.redact import redact_text\n")
    assert kb_back_edges(kb) == ["kb/config.py: hpcmem.kb.safety.redact"]
