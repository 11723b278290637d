"""The package layering: ``ingest`` reads the outside world and uses ``kb``; ``kb`` never
imports ``ingest`` or ``cli``, so the knowledge base can be used (and tested) alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in the file names, at any depth (lazy imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


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


def test_the_scan_sees_lazy_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from hpcmem.ingest.lmod import live_modules\n")
    assert "hpcmem.ingest.lmod" in imported_modules(source)
