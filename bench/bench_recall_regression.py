"""Known-template recall, this tree against an earlier commit, in one run.

    .venv/bin/python bench/bench_recall_regression.py --baseline 152bdae [--runs 25] [--write docs/benchmarks.md]

Absolute start-up times drift with the machine and the installed libraries (a newer typer
costs more to import), so a regression is measured as a ratio: the same venv runs both
trees, alternating, each against a store of its own schema holding one lesson, and each
process recalls the text that lesson was recorded from (an exact known failure: no model,
no index). The baseline tree is checked out with `git worktree` into a temporary directory
and put first on PYTHONPATH, so `hpcmem` imports it instead of this tree. Each tree runs
through its own console-script target (its pyproject's ``[project.scripts] hpcmem``, as
``python -c``), because the installed ``hpcmem`` script names this tree's entry point,
which an older tree may not have.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Known-template recall against an earlier commit"
OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")


def entry_command(tree: Path) -> list[str]:
    """``python -c`` running the tree's ``hpcmem`` console-script target, as the script would."""
    with open(tree / "pyproject.toml", "rb") as fh:
        target = tomllib.load(fh)["project"]["scripts"]["hpcmem"]
    module, function = target.split(":")
    return [sys.executable, "-c", f"import sys; sys.argv[0] = 'hpcmem'; from {module} import {function}; sys.exit({function}())"]


def prepared_env(home: Path, pythonpath: str | None, hpcmem: list[str]) -> dict[str, str]:
    env = {**os.environ, "HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1"}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run([*hpcmem, "record", "--error", OOM, "--cause", "the step ran out of memory",
                    "--fix", "request more memory"], env=env, check=True, capture_output=True)
    for _ in range(2):  # warm: bytecode, page cache
        subprocess.run([*hpcmem, "recall", "--json", OOM], env=env, capture_output=True)
    return env


def timed(env: dict[str, str], hpcmem: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([*hpcmem, "recall", "--json", OOM], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"recall failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    revision = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.baseline],
                              check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="hpcmem-regression-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), revision], check=True)
        try:
            (work / "pkg").mkdir()
            (work / "pkg" / "hpcmem").symlink_to(tree)  # the repository root is the hpcmem package
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True, capture_output=True)
            commands = {f"baseline {revision}": entry_command(tree), "this tree": entry_command(REPO)}
            envs = {f"baseline {revision}": prepared_env(work / "home-baseline", str(work / "pkg"),
                                                         commands[f"baseline {revision}"]),
                    "this tree": prepared_env(work / "home-this", None, commands["this tree"])}
            times = {name: [] for name in envs}
            for _ in range(args.runs):
                for name, env in envs.items():
                    times[name].append(timed(env, commands[name]))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)
    base, this = (statistics.median(v) for v in times.values())
    lines = [SECTION, "",
             f"`.venv/bin/python bench/bench_recall_regression.py --baseline {revision} --runs {args.runs}`: the same",
             "venv runs both trees, alternating, each through its own console-script target (`python -c`); each",
             "process recalls the text its one lesson was recorded from.", "",
             "| tree | p50 | p90 |", "|---|---:|---:|"]
    for name, values in times.items():
        ordered = sorted(values)
        lines.append(f"| {name} | {statistics.median(values) * 1000:.0f} ms | {ordered[int(0.9 * len(ordered))] * 1000:.0f} ms |")
    lines += ["", f"This tree / baseline (medians): **{this / base:.3f}** (target <= 1.10).", ""]
    section = "\n".join(lines)
    print(section)
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from markdown_section import write_section

        write_section(args.write, SECTION, section)


if __name__ == "__main__":
    main()
