"""`pip install .` (non-editable) puts everything under the `hpcmem` namespace.

The suite itself runs against the editable install that `make test` creates, so both
install modes are exercised on every run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_regular_install_has_one_namespace_and_the_data_files(tmp_path: Path):
    target = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--target", str(target), str(REPO)],
        check=True, capture_output=True, text=True,
    )
    # setuptools warns when a folder of data sits in no declared package (it would stop
    # installing it one day); the build must be clean.
    output = done.stdout + done.stderr
    assert "Warning" not in output and "absent from the `packages` configuration" not in output, output
    top_level = {p.name for p in target.iterdir()}
    assert "hpcmem" in top_level
    assert not top_level & {"kb", "cli", "ingest", "schemas", "tests", "bench"}
    assert (target / "bin" / "hpcmem").exists()
    pkg = target / "hpcmem"
    assert (pkg / "kb" / "store" / "migrations" / "env.py").exists()
    assert (pkg / "kb" / "store" / "migrations" / "script.py.mako").exists()
    assert sorted(p.name for p in (pkg / "kb" / "store" / "migrations" / "versions").glob("0*.py"))
    # the built-in failure rules and the recall scorer's fit
    assert (pkg / "kb" / "signatures" / "categories.toml").exists()
    assert (pkg / "kb" / "recall" / "recall_model.json").exists()
    # the web console's templates and stylesheet (package-data of hpcmem.cli.web)
    assert (pkg / "cli" / "web" / "templates" / "trends.html").exists()
    assert (pkg / "cli" / "web" / "static" / "console.css").exists()
    # -S: no site-packages, so the editable install cannot answer for the regular one.
    code = "import hpcmem, hpcmem.kb, hpcmem.ingest, hpcmem.cli; print(hpcmem.__file__)"
    out = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(target)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(pkg / "__init__.py")


def test_editable_install_serves_this_checkout():
    import hpcmem.kb

    assert Path(hpcmem.kb.__file__).resolve() == REPO / "kb" / "__init__.py"
