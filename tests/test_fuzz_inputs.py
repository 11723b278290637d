"""Hostile input, generated: every CLI text input and the MCP tools, driven by hypothesis with
arbitrary Unicode (lone surrogates included), bytes and JSON values.

Properties, for every example:
- the exit code is 0, 1 or 2 (3 would be an internal error: a bug this test exists to find);
- stderr carries no traceback;
- stdout under ``--json`` is one JSON document (``--batch``: one per line);
- the store's row counts never drop.

The commands run in this process through the console script's own ``main`` (the same code
as ``hpcmem ...``, minus a fresh interpreter per example, which would cost about 0.2 s each),
against one store seeded with lessons, jobs and failures. CI runs a fixed seed and a bounded
number of examples (profile ``ci``); ``HYPOTHESIS_PROFILE=long`` runs many more, for benches.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES

settings.register_profile(
    "ci", max_examples=100, derandomize=True, deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile(
    "long", max_examples=1000, deadline=None, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
# Rows that can only grow: lessons, evidence and observations are never deleted by these commands.
TABLES = ("lessons", "signatures", "occurrences", "job_records", "audit_log", "lesson_evidence")

# ----------------------------------------------------------------------------- strategies

# Any code point, surrogates included (what JSON's \ud800 or surrogateescape gives Python).
any_char = st.characters(codec=None, categories=None)
any_text = st.text(any_char, max_size=300)
# argv cannot carry NUL; its undecodable bytes arrive as surrogateescape'd text.
REAL_ERRORS = [
    OOM,
    "python: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file",
    "Lmod has detected the following error: The following module(s) are unknown: \"cuda/13.0\"",
    "sbatch: error: Batch job submission failed: Requested node configuration is not available",
    "ModuleNotFoundError: No module named 'torch'",
]


def salted(texts: list[str], salt):
    """Real text with arbitrary characters spliced in at an arbitrary place."""
    return st.tuples(st.sampled_from(texts), salt, st.integers(0, 400)).map(
        lambda t: t[0][: t[2] % (len(t[0]) + 1)] + t[1] + t[0][t[2] % (len(t[0]) + 1):])


no_nul_text = st.text(st.characters(codec=None, categories=None, exclude_characters="\x00"), max_size=300)
argv_text = st.one_of(
    salted(REAL_ERRORS, no_nul_text),
    no_nul_text,
    st.binary(max_size=200).map(lambda b: os.fsdecode(b.replace(b"\x00", b""))),
    st.sampled_from([OOM, "-", "--", "--json", "x", " ", "\x1b[31m\x1b[0m", "%", "_" * 8, "ü" * 50]),
)
raw_bytes = st.one_of(st.binary(max_size=3000), any_text.map(lambda s: s.encode("utf-8", "surrogatepass")))


def mutated(sample: Path):
    """A real output cut at an arbitrary point, with arbitrary bytes spliced in."""
    lines = sample.read_bytes()
    return st.tuples(st.integers(0, len(lines)), st.binary(max_size=200), st.integers(0, len(lines))).map(
        lambda t: lines[: t[0]] + t[1] + lines[t[0]: max(t[0], t[2])])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=8,
)


def lesson_like(keys: list[str]):
    """JSON objects with the right keys and arbitrary values: what a hostile file would hold."""
    return st.dictionaries(st.sampled_from(keys), json_values, max_size=len(keys))


# ----------------------------------------------------------------------------- running

def invoke(argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """``hpcmem ARGV`` in this process: exit code, stdout, stderr (tests/cli/inprocess.py)."""
    from tests.cli.inprocess import invoke as run_in_process

    ran = run_in_process(*argv, input=stdin)
    return ran.returncode, ran.stdout, ran.stderr


def row_counts(home: Path) -> dict[str, int]:
    with sqlite3.connect(home / "data" / "user.db") as db:
        return {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}


class Store:
    """The seeded store, and the properties every command must keep on it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.counts = row_counts(home)

    def run(self, argv: list[str], stdin: bytes = b"", *, json_out: bool = True,
            json_lines: bool = False) -> tuple[int, str, str]:
        code, out, err = invoke(argv, stdin)
        assert code in (0, 1, 2), f"exit {code} for {argv!r}:\n{err[-2000:]}"
        assert "Traceback" not in err, err[-2000:]
        if json_out and code in (0, 1):
            if json_lines:
                for line in out.splitlines():
                    json.loads(line)
            else:
                json.loads(out)  # exactly one document: json.loads refuses trailing data
        now = row_counts(self.home)
        dropped = {t: (self.counts[t], now[t]) for t in TABLES if now[t] < self.counts[t]}
        assert not dropped, f"rows lost by {argv!r}: {dropped}"
        self.counts = now
        return code, out, err


@pytest.fixture(scope="module")
def seeded_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("fuzz-home")
    env = {"HPCMEM_HOME": str(home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", "HPCMEM_ENCODER": "onnx"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for error, fix in ((OOM, "request --mem=32G"),
                           ("Lmod has detected the following error: The following module(s) are unknown: "
                            "\"cuda/13.0\"", "module load cuda/12.4"),
                           ("python: error while loading shared libraries: libcudart.so.11.0: cannot open "
                            "shared object file: No such file or directory", "module load cuda/11.8")):
            code, _, err = invoke(["record", "--error", error, "--cause", "seeded", "--fix", fix])
            assert code == 0, err
        code, _, err = invoke(["ingest", "sacct", str(SAMPLES / "sacct" / "real-22.05-parsable2.psv")])
        assert code == 0, err
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return home


@pytest.fixture
def store(seeded_home, monkeypatch) -> Store:
    monkeypatch.setenv("HPCMEM_HOME", str(seeded_home))
    monkeypatch.setenv("HPCMEM_ENCODER", "onnx")
    return Store(seeded_home)


def lesson_ids(home: Path) -> list[str]:
    with sqlite3.connect(home / "data" / "user.db") as db:
        return [row[0] for row in db.execute("SELECT id FROM lessons ORDER BY created_at")]


# ----------------------------------------------------------------------------- commands

@given(error=argv_text, cause=argv_text, fix=argv_text, action=st.none() | argv_text, json_=st.booleans())
def test_record(store, error, cause, fix, action, json_):
    argv = ["record", "--error", error, "--cause", cause, "--fix", fix] + (["--action", action] if action else [])
    store.run(argv + (["--json"] if json_ else []), json_out=json_)


@given(text=argv_text, partition=st.none() | argv_text, module=st.none() | argv_text)
def test_recall_arguments(store, text, partition, module):
    argv = ["recall", "--no-model", "--json", "--", text]
    argv[3:3] = (["--partition", partition] if partition else []) + (["--module", module] if module else [])
    store.run(argv)


@given(data=raw_bytes)
def test_recall_stdin(store, data):
    store.run(["recall", "--no-model", "--json", "-"], stdin=data)


@given(lines=st.lists(st.one_of(
    lesson_like(["id", "error", "job_id", "partition", "modules", "cluster", "limit"]).map(json.dumps),
    json_values.map(json.dumps), raw_bytes.map(lambda b: b.decode("utf-8", "replace").replace("\n", " ")),
    st.just('{"id": "s", "error": "\\ud800 libcudart.so.11.0: cannot open"}'),
), max_size=6))
def test_recall_batch(store, tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("batch") / "queries.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    store.run(["recall", "--no-model", "--json", "--batch", str(path)], json_lines=True)


@given(prefix=argv_text, verdict=st.sampled_from(["--worked", "--failed"]), error=st.none() | argv_text,
       pick=st.booleans())
def test_feedback(store, prefix, verdict, error, pick):
    if pick:  # a real id, whole or as a prefix of 8 or more characters
        prefix = lesson_ids(store.home)[0][: 8 + len(prefix) % 29]
    store.run(["feedback", prefix, verdict, "--json"] + (["--error", error] if error else []))


LESSON_KEYS = ["id", "signature", "fingerprint", "template", "category", "context", "cause", "fix", "actions",
               "conditions", "status", "source", "author", "confidence", "confirmations", "created_at",
               "updated_at", "valid_until", "scope", "evidence", "excerpt", "aliases", "format"]


@given(lines=st.lists(st.one_of(lesson_like(LESSON_KEYS).map(json.dumps), json_values.map(json.dumps),
                                raw_bytes.map(lambda b: b.decode("utf-8", "replace").replace("\n", " "))),
                      max_size=4))
def test_lessons_import(store, tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("import") / "lessons.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    store.run(["lessons", "import", str(path), "--scope", "user", "--json"])


@given(prefix=argv_text, cause=argv_text, pick=st.booleans())
def test_lessons_edit_and_show(store, prefix, cause, pick):
    if pick:
        prefix = lesson_ids(store.home)[-1][: 8 + len(prefix) % 29]
    store.run(["lessons", "show", prefix, "--json"])
    store.run(["lessons", "edit", prefix, "--cause", cause, "--json"])


@given(content=st.one_of(raw_bytes, mutated(SAMPLES / "logs" / "oom-4.out"), mutated(SAMPLES / "logs" / "fail-3.err")),
       name=st.sampled_from(["slurm-4410.out", "job.err", "x"]))
def test_ingest_logs(store, tmp_path_factory, content, name):
    path = tmp_path_factory.mktemp("logs") / name
    path.write_bytes(content)
    store.run(["ingest", "logs", str(path), "--json"])


SACCT_HEADER = (SAMPLES / "sacct" / "real-22.05-parsable2.psv").read_bytes().splitlines()[0]


@given(body=st.one_of(raw_bytes, mutated(SAMPLES / "sacct" / "real-22.05-parsable2.psv")), header=st.booleans())
def test_ingest_sacct(store, tmp_path_factory, body, header):
    path = tmp_path_factory.mktemp("sacct") / "dump.psv"
    path.write_bytes((SACCT_HEADER + b"\n" if header and not body.startswith(SACCT_HEADER) else b"") + body)
    store.run(["ingest", "sacct", str(path), "--no-learn", "--json"])


ENV = SAMPLES / "env" / "cluster-2026-11"


@given(partitions=st.one_of(raw_bytes, mutated(ENV / "scontrol-show-partition-oneliner.txt")),
       modules=st.one_of(raw_bytes, mutated(ENV / "module-t-avail.txt")))
def test_revalidate(store, tmp_path_factory, partitions, modules):
    folder = tmp_path_factory.mktemp("env")
    (folder / "partitions.txt").write_bytes(partitions)
    (folder / "modules.txt").write_bytes(modules)
    store.run(["revalidate", "--partitions", str(folder / "partitions.txt"),
               "--modules", str(folder / "modules.txt"), "--json"])


@given(content=raw_bytes)
def test_config(store, tmp_path_factory, monkeypatch, content):
    path = tmp_path_factory.mktemp("config") / "config.toml"
    path.write_bytes(content)
    monkeypatch.setenv("HPCMEM_CONFIG", str(path))
    try:
        store.run(["config", "show"], json_out=False)
        store.run(["recall", "--no-model", "--json", OOM])
    finally:
        monkeypatch.delenv("HPCMEM_CONFIG")


# ----------------------------------------------------------------------------- MCP tools

RECALL_ARGS = ["error", "job_id", "partition", "modules", "cluster", "limit", "include_expired"]
RECORD_ARGS = ["cause", "fix", "error", "job_id", "actions", "scope", "partition", "modules", "cluster", "context"]


@pytest.fixture
def mcp_server(store):
    from tests.cli.test_mcp_hostile import RawServer

    server = RawServer(store.home)
    yield server
    server.close()


@given(tool=st.sampled_from(["recall", "record"]), data=st.data())
def test_mcp_tools(store, mcp_server, tool, data):
    """Every tools/call gets its own answer (a result or a JSON-RPC error), the server keeps
    serving, and nothing stored is lost. json.dumps escapes lone surrogates as \\udXXX."""
    args = data.draw(lesson_like(RECALL_ARGS if tool == "recall" else RECORD_ARGS), label="arguments")
    for key in ("error", "cause", "fix"):  # real text in some, so calls also reach the library
        if key in args and data.draw(st.booleans(), label=f"real {key}"):
            args[key] = data.draw(argv_text, label=key)
    qid = data.draw(st.integers(1, 2**31), label="id")
    line = json.dumps({"jsonrpc": "2.0", "id": qid, "method": "tools/call",
                       "params": {"name": tool, "arguments": args}})
    mcp_server.send(line.encode("utf-8", "surrogatepass"))
    [reply] = mcp_server.replies(1)
    assert reply["id"] == qid and ("result" in reply or "error" in reply), reply
    assert mcp_server.proc.poll() is None, "the server died"
    now = row_counts(store.home)
    assert all(now[t] >= store.counts[t] for t in TABLES), (store.counts, now)
    store.counts = now
