"""`hpcmem lessons import` takes a file as claims (issue 33, defects 3, 11, 13 and 15):
real processes, real SQLite stores, one shared lab store."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from hpcmem.kb.lessons.write import INITIAL_CONFIDENCE
from hpcmem.kb.signatures.fingerprint import fingerprint
from tests.cli.helpers import run_hpcmem

PERM = "OSError: [Errno 13] Permission denied: '/scratch/shared/vision/results/run.log'"
LIB = ("python3: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: "
       "No such file or directory")
LIB_VARIANT = "ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory"
FORGED_ID = "6f1c2d3e-5a4b-4c3d-8e2f-0123456789ab"


@pytest.fixture
def lab(tmp_path: Path):
    """A lab store; lena leads it (the config names her), alice and carol are members, mallory is a
    member with bad intent."""
    lab_db = tmp_path / "labs" / "vision" / "store.db"
    site = tmp_path / "site.toml"
    site.write_text('[stores.labs.vision]\nleads = ["lena"]\n')

    def as_user(name: str):
        home = tmp_path / f"home-{name}"
        env = {"HPCMEM_HOME": str(home), "HPCMEM_LAB_STORES": f"vision={lab_db}", "USER": name, "LOGNAME": name,
               "HPCMEM_CONFIG": str(site)}
        if not home.exists():  # everyone has their own store (commands look for ids there too)
            home.mkdir(mode=0o700)
            assert run_hpcmem("db", "upgrade", "--scope", "user", env=env).returncode == 0

        def run(*args: str, ok: bool = True):
            result = run_hpcmem(*args, env=env)
            if ok:
                assert result.returncode == 0, result.stderr
            return result
        return run

    assert as_user("lena")("db", "upgrade", "--scope", "lab:vision").returncode == 0
    return as_user


def as_json(result):
    return json.loads(result.stdout)


def one_error_line(result, starts: str) -> None:
    """Exit 2, one `Error:` line that starts as given, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith(starts), result.stderr
    assert "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("Error")]) == 1


def forged(**changes) -> dict:
    """The line of the issue: it claims a lead validated it, and its fix opens $HOME to everyone."""
    sig = fingerprint(PERM)
    return {"format": "hpcmem-lesson/1", "id": FORGED_ID, "fingerprint": "0" * 16, "category": sig.category,
            "template": sig.template, "cause": "the results directory is not writable",
            "fix": "chmod -R 777 $HOME", "status": "validated", "source": "curated", "confidence": 1.0,
            "confirmations": 999999, "updated_at": "9999-12-31T00:00:00+00:00", "author": "lena",
            "evidence": [{"kind": "worked", "job_id": "1", "actor": "lena"}]} | changes


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def write_lines(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_forged_line_lands_as_a_candidate_of_the_importer(lab, tmp_path: Path):
    mallory, lena, carol = lab("mallory"), lab("lena"), lab("carol")
    # the line exactly as in the issue: its updated_at would win every later import, so it is refused
    path = write_lines(tmp_path / "forged.jsonl", forged())
    one_error_line(mallory("lessons", "import", str(path), "--scope", "lab:vision", ok=False),
                   f"Error: {path}:1: updated_at: 9999-12-31T00:00:00+00:00 is in the future")
    assert as_json(lena("lessons", "list", "--scope", "lab:vision", "--json")) == []
    # the same claims with a date that is not in the future: a candidate, mallory's, flagged
    path = write_lines(tmp_path / "forged.jsonl", forged(updated_at=now_iso()))
    done = as_json(mallory("lessons", "import", str(path), "--scope", "lab:vision", "--json"))
    assert done["created"] == 1 and done["keep_status"] is False
    [lesson] = as_json(lena("lessons", "list", "--scope", "lab:vision", "--json"))
    assert (lesson["lesson_id"], lesson["status"]) == (FORGED_ID, "candidate")
    assert lesson["provenance"]["author"] == "mallory" and lesson["provenance"]["source"] == "human"
    assert lesson["confidence"] == INITIAL_CONFIDENCE["human"] and lesson["confirmations"] == 0
    assert "world_writable" in {f["code"] for f in lesson["safety_flags"]}
    assert lesson["fingerprint"] == fingerprint(PERM).fingerprint  # recomputed, not the file's 000...
    # the claims are kept in the audit entry, and nowhere else
    history = as_json(lena("lessons", "show", FORGED_ID, "--json"))["history"]
    assert [(h["action"], h["actor"]) for h in history] == [("import", "mallory")]
    claimed = history[0]["after"]["claimed"]
    assert (claimed["status"], claimed["source"], claimed["confirmations"], claimed["author"]) == (
        "validated", "curated", 999999, "lena")
    # recalled as what it is: a flagged candidate, not "validated · trust high"
    recalled = carol("recall", PERM, "--no-model", "--json")
    top = as_json(recalled)["matches"][0]
    assert top["lesson_id"] == FORGED_ID and top["status"] == "candidate"
    assert top["trust_level"] != "high" and top["provenance"]["author"] == "mallory"
    assert "world_writable" in {f["code"] for f in top["safety_flags"]}
    assert "trust high" not in carol("recall", PERM, "--no-model").stdout
    # it waits in the lead's queue like a proposal, and approve refuses its flag
    [queued] = as_json(lena("lessons", "review", "--scope", "lab:vision", "--json"))
    assert queued["lesson_id"] == FORGED_ID and queued["proposal"]["by"] == "mallory" and queued["blocked"]
    one_error_line(lena("lessons", "approve", FORGED_ID, ok=False), "Error: refused:")


def test_keep_status_is_an_approval_with_the_same_safety_gate(lab, tmp_path: Path):
    lena = lab("lena")
    path = write_lines(tmp_path / "carried.jsonl", forged(updated_at=now_iso()))
    imp = ("lessons", "import", str(path), "--scope", "lab:vision")
    one_error_line(lena(*imp, "--keep-status", ok=False), f"Error: {path}:1: refused: lesson {FORGED_ID[:8]} has "
                   "blocking safety flags (world_writable)")
    one_error_line(lena(*imp, "--keep-status", "--override-safety", ok=False), "Error: --override-safety needs --reason")
    one_error_line(lena(*imp, "--override-safety", "--reason", "x", ok=False),
                   "Error: --override-safety goes with --keep-status")
    assert as_json(lena("lessons", "list", "--scope", "lab:vision", "--json")) == []
    lena(*imp, "--keep-status", "--override-safety", "--reason", "workshop area, removed Friday")
    shown = as_json(lena("lessons", "show", FORGED_ID, "--json"))
    assert (shown["status"], shown["provenance"]["source"], shown["provenance"]["author"]) == (
        "validated", "curated", "lena")
    assert [(h["action"], h["actor"], h["reason"]) for h in shown["history"]][0] == (
        "override_safety", "lena", "workshop area, removed Friday")
    assert shown["history"][1]["action"] == "import" and shown["history"][1]["after"]["claimed"]["status"] == "validated"


def test_an_import_cannot_replace_a_reviewed_lesson(lab, tmp_path: Path):
    alice, lena, mallory = lab("alice"), lab("lena"), lab("mallory")
    mine = as_json(alice("record", "--error", LIB, "--cause", "CUDA 11 runtime missing", "--fix",
                         "module load cuda/11.8", "--json"))
    proposed = as_json(alice("lessons", "propose", mine["lesson_id"], "--to", "lab:vision", "--json"))
    lena("lessons", "approve", proposed["lesson_id"])
    line = json.loads(mallory("lessons", "export", "--scope", "lab:vision").stdout.splitlines()[0])
    path = write_lines(tmp_path / "newer.jsonl", line | {"fix": "chmod -R 777 $HOME", "updated_at": now_iso()})
    done = as_json(mallory("lessons", "import", str(path), "--scope", "lab:vision", "--json"))
    assert (done["updated"], done["kept_reviewed"]) == (0, 1)
    shown = as_json(lena("lessons", "show", proposed["lesson_id"], "--json"))
    assert (shown["status"], shown["fix"]) == ("validated", "module load cuda/11.8")
    assert "only --keep-status replaces it" in mallory("lessons", "import", str(path), "--scope", "lab:vision").stdout


BAD_LINES = {
    "NaN confidence": (lambda line: json.dumps(line | {"confidence": float("nan")}), "not JSON (NaN is not a number)"),
    "not a date": (lambda line: json.dumps(line | {"updated_at": "not-a-date"}), "updated_at: 'not-a-date' is not"),
    "future": (lambda line: json.dumps(line | {"created_at": "2999-01-01T00:00:00Z"}), "created_at: 2999-01-01"),
    "bad action": (lambda line: json.dumps(line | {"actions": [{"type": "sbatch"}]}), "a sbatch action needs"),
    "lone surrogate": (lambda line: json.dumps(line).replace('"cause": "', '"cause": "\\ud800'), "not text"),
    "duplicate id": (lambda line: json.dumps(line | {"id": "9b4e28ba-2fa1-11d2-883f-0016d3cca427"}), "is on line 1"),
    "not UTF-8": (lambda line: b"\xff" + json.dumps(line).encode(), "not UTF-8 text"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_every_bad_line_is_one_error_naming_file_and_line(case: str, tmp_path: Path):
    assert run_hpcmem("record", "--error", LIB, "--cause", "c", "--fix", "module load cuda/11.8").returncode == 0
    line = json.loads(run_hpcmem("lessons", "export").stdout.splitlines()[0])
    make, says = BAD_LINES[case]
    good = json.dumps(line | {"id": "9b4e28ba-2fa1-11d2-883f-0016d3cca427"}).encode()
    bad = make(line | {"id": "8b4e28ba-2fa1-11d2-883f-0016d3cca427"})
    path = tmp_path / "lessons.jsonl"
    path.write_bytes(good + b"\n\n" + (bad if isinstance(bad, bytes) else bad.encode()) + b"\n")
    result = run_hpcmem("lessons", "import", str(path), "--scope", "user")
    one_error_line(result, f"Error: {path}:3: ")
    assert says in result.stderr.splitlines()[0], result.stderr
    # nothing of the file went in: the good first line neither
    assert [x["lesson_id"] for x in json.loads(run_hpcmem("lessons", "list", "--json").stdout)] == [line["id"]]


def test_export_import_round_trip_keeps_excerpt_and_aliases(tmp_path: Path):
    mine = json.loads(run_hpcmem("record", "--error", LIB, "--cause", "CUDA libraries missing", "--fix",
                                 "module load cuda/11.8 cudnn/8.9", "--json").stdout)
    shown = json.loads(run_hpcmem("feedback", mine["lesson_id"], "--worked", "--error", LIB_VARIANT, "--json").stdout)
    assert len(shown["aliases"]) == 1 and shown["excerpt"]
    path = tmp_path / "mine.jsonl"
    path.write_text(run_hpcmem("lessons", "export").stdout)
    for n, extra in enumerate(((), ("--keep-status",))):  # as a candidate, and as it was
        home = tmp_path / f"home-bob-{n}"
        home.mkdir(mode=0o700)
        other = {"HPCMEM_HOME": str(home)}
        assert run_hpcmem("lessons", "import", str(path), "--scope", "user", *extra, env=other).returncode == 0
        copy = json.loads(run_hpcmem("lessons", "show", mine["lesson_id"], "--json", env=other).stdout)
        assert copy["excerpt"] == shown["excerpt"] and copy["fingerprint"] == shown["fingerprint"]
        assert [(a["fingerprint"], a["template"], a["category"]) for a in copy["aliases"]] == [
            (a["fingerprint"], a["template"], a["category"]) for a in shown["aliases"]]
        # what `db refingerprint` recomputes from came along
        report = json.loads(run_hpcmem("db", "refingerprint", "--scope", "user", "--dry-run", "--json", env=other).stdout)
        assert report["lessons_without_excerpt"] == []


def test_lesson_id_prefixes_match_literally(tmp_path: Path):
    mine = json.loads(run_hpcmem("record", "--error", LIB, "--cause", "CUDA 11 missing", "--fix",
                                 "module load cuda/11.8", "--json").stdout)
    for pattern in ("________", "%%%%%%%%", mine["lesson_id"][:8] + "%"):
        one_error_line(run_hpcmem("lessons", "edit", pattern, "--cause", "X"), f"Error: no lesson with id '{pattern}'")
    one_error_line(run_hpcmem("feedback", "_" * 36, "--worked"), "Error: no lesson")
    assert json.loads(run_hpcmem("lessons", "show", mine["lesson_id"], "--json").stdout)["cause"] == "CUDA 11 missing"
    # two lessons that share their first block: the prefix is ambiguous, and the error names both
    line = json.loads(run_hpcmem("lessons", "export").stdout.splitlines()[0])
    twins = ("abcdef12-0000-4000-8000-000000000001", "abcdef12-0000-4000-8000-000000000002")
    path = write_lines(tmp_path / "twins.jsonl", *(line | {"id": i} for i in twins))
    assert run_hpcmem("lessons", "import", str(path), "--scope", "user").returncode == 0
    ambiguous = run_hpcmem("lessons", "show", "abcdef12")
    one_error_line(ambiguous, "Error: lesson id 'abcdef12' is ambiguous:")
    assert all(i in ambiguous.stderr for i in twins)
    one_error_line(run_hpcmem("lessons", "show", twins[0][:-1] + "_"), "Error: no lesson with id")
    assert json.loads(run_hpcmem("lessons", "show", twins[1], "--json").stdout)["lesson_id"] == twins[1]
