"""Known-template recall, this tree against an earlier commit, in one run; start-up and
``record`` beside it.

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


# What each process runs: the headline case, then start-up alone and a write.
CASES = {
    "recall --json, known template": lambda run: ["recall", "--json", OOM],
    "--version (start-up only)": lambda run: ["--version"],
    "record --json, new error": lambda run: [
        "record", "--json", "--error", f"ModuleNotFoundError: No module named 'pkg{run}'",
        "--cause", "the venv was not active", "--fix", "source .venv/bin/activate first"],
}
HEADLINE = next(iter(CASES))


def timed(env: dict[str, str], hpcmem: list[str], args: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([*hpcmem, *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
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
            # Both trees run from bytecode, as an installed hpcmem does (with PYTHONDONTWRITEBYTECODE
            # set, a tree never compiled would parse its sources on every run).
            for root in (tree, REPO):
                subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"[/\\]\.venv[/\\]", str(root)],
                               check=True, capture_output=True)
            commands = {f"baseline {revision}": entry_command(tree), "this tree": entry_command(REPO)}
            envs = {f"baseline {revision}": prepared_env(work / "home-baseline", str(work / "pkg"),
                                                         commands[f"baseline {revision}"]),
                    "this tree": prepared_env(work / "home-this", None, commands["this tree"])}
            times = {(case, name): [] for case in CASES for name in envs}
            for run in range(args.runs):
                for case, argv in CASES.items():
                    for name, env in envs.items():
                        times[case, name].append(timed(env, commands[name], argv(run)))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)
    lines = [SECTION, "",
             f"`.venv/bin/python bench/bench_recall_regression.py --baseline {revision} --runs {args.runs}`: the same",
             "venv runs both trees, alternating, each through its own console-script target (`python -c`); the",
             "recall process recalls the text its one lesson was recorded from, the record process writes a new lesson.",
             "", "| case | tree | p50 | p90 | this tree / baseline (medians) |", "|---|---|---:|---:|---:|"]
    ratios = {}
    for case in CASES:
        base, this = (statistics.median(times[case, name]) for name in envs)
        ratios[case] = this / base
        for name in envs:
            ordered = sorted(times[case, name])
            ratio = f"**{this / base:.3f}**" if name == "this tree" else ""
            lines.append(f"| {case} | {name} | {statistics.median(ordered) * 1000:.0f} ms | "
                         f"{ordered[int(0.9 * len(ordered))] * 1000:.0f} ms | {ratio} |")
    lines += ["", f"Known-template recall, this tree / baseline (medians): **{ratios[HEADLINE]:.3f}** (target <= 1.10).", ""]
    section = "\n".join(lines)
    print(section)
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from markdown_section import write_section

        write_section(args.write, SECTION, section)


if __name__ == "__main__":
    main()
