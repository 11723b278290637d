"""`hpcmem record` then `hpcmem recall`, as an agent runs them (real processes, real stores)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.cli.helpers import run_hpcmem
from tests.conftest import REPO, SAMPLES

SCHEMA = json.loads((REPO / "schemas" / "recall.schema.json").read_text())

OOM_A = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have been killed by the cgroup out-of-memory handler."
OOM_B = "slurmstepd-cn207: error: Detected 3 oom-kill event(s) in StepId=99172.0. Some of your processes may have been killed by the cgroup out-of-memory handler."
LIB_A = "python3: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory"
LIB_B = "/home/bob/bin/solver: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory"


def record(*args: str) -> dict:
    result = run_hpcmem("record", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def recall_json(*args: str, input: str | None = None) -> tuple[int, dict]:
    result = run_hpcmem("recall", *args, "--json", input=input)
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return result.returncode, data


def test_record_prints_lesson_id_and_fingerprint():
    lesson = record("--error", LIB_A, "--cause", "the CUDA 11 runtime is not loaded",
                    "--fix", "load the cuda/11.8 module in the job script", "--action", "module load cuda/11.8",
                    "--module", "cuda/11.8", "--partition", "gpu")
    assert len(lesson["lesson_id"]) == 36 and len(lesson["fingerprint"]) == 16
    assert lesson["status"] == "candidate" and lesson["provenance"]["source"] == "agent"  # no TTY: an agent
    assert lesson["actions"] == [{"type": "module", "op": "load", "name": "cuda/11.8"}]
    kinds = {(c["kind"], c["name"]) for c in lesson["conditions"]}
    assert ("partition", "gpu") in kinds and ("module", "cuda/11.8") in kinds


def test_exact_hit_and_new_instance_of_the_same_failure():
    lesson = record("--error", LIB_A, "--cause", "CUDA 11 runtime missing", "--fix", "module load cuda/11.8")
    for text in (LIB_A, LIB_B):
        code, data = recall_json(text)
        assert code == 0
        top = data["matches"][0]
        assert top["lesson_id"] == lesson["lesson_id"] and top["match_kind"] == "exact"
        assert top["trust"] == "agent" and top["trust_level"] == "low"
        assert data["query"]["fingerprint"] == lesson["fingerprint"]


def test_nothing_known_exits_1():
    code, data = recall_json("frobnicator: the flux capacitor is misaligned by 3 degrees", "--no-model")
    assert code == 1 and data["matches"] == [] and data["abstained"] is True


def test_human_output_and_exit_codes():
    record("--error", OOM_A, "--cause", "8G was too little", "--fix", "ask for 32G", "--action", "--mem 8G->32G")
    result = run_hpcmem("recall", OOM_B)
    assert result.returncode == 0
    assert "Cause: 8G was too little" in result.stdout and "sbatch --mem=32G  (was 8G)" in result.stdout
    assert run_hpcmem("recall").returncode == 2  # no input: usage error
    assert run_hpcmem("recall", "x", "--batch", "f.jsonl").returncode == 2


def test_lessons_tied_with_other_fixes_are_shown_and_none_applied():
    """One Slurm wording, two root causes recorded as two lessons: recall cannot choose, says so,
    and exits 1 (the agent must not apply either blindly)."""
    text = "sbatch: error: Batch job submission failed: Requested node configuration is not available"
    cpus = record("--error", text, "--cause", "more CPUs than a node has", "--fix", "ask for at most 64 CPUs per node")
    mem = record("--error", text, "--cause", "more memory than a node has", "--fix", "ask for at most 250G per node")
    code, data = recall_json(text, "--no-model")
    assert code == 1 and data["abstained"] is True
    assert {m["lesson_id"]: m["tied_with"] for m in data["matches"]} == {
        cpus["lesson_id"]: [mem["lesson_id"]], mem["lesson_id"]: [cpus["lesson_id"]]}
    human = run_hpcmem("recall", text, "--no-model")
    assert human.returncode == 1
    assert "No stored lesson matches this failure" in human.stdout and "the text cannot choose" in human.stdout


def test_stdin_and_log_file_inputs():
    record("--error-file", str(SAMPLES / "logs" / "fail-3.err"), "--cause", "a missing key in the batch dict",
           "--fix", "check the data loader's keys")
    code, data = recall_json("-", input=(SAMPLES / "logs" / "fail-3.err").read_text())
    assert code == 0 and data["matches"][0]["match_kind"] == "exact"
    code, data = recall_json("--log", str(SAMPLES / "logs" / "fail-3.err"))
    assert code == 0 and data["query"]["category"] == "python_exception"


def test_recall_by_job_uses_the_stored_failure_and_its_context():
    assert run_hpcmem("ingest", "sacct", str(SAMPLES / "sacct" / "real-22.05-parsable2.psv")).returncode == 0
    assert run_hpcmem("ingest", "logs", str(SAMPLES / "logs" / "fail-3.err")).returncode == 0
    lesson = record("--job", "3", "--cause", "KeyError in load_batch", "--fix", "fix the key names")
    assert {"kind": "occurrence", "job_id": "3"}.items() <= lesson["provenance"]["evidence"][0].items()
    code, data = recall_json("--job", "3")
    assert code == 0 and data["matches"][0]["lesson_id"] == lesson["lesson_id"]
    assert data["query"]["partition"] == "main" and data["seen_before"]["count"] == 1


def test_batch_answers_in_input_order(tmp_path: Path):
    record("--error", LIB_A, "--cause", "c", "--fix", "module load cuda/11.8")
    batch = tmp_path / "q.jsonl"
    batch.write_text("\n".join([
        json.dumps({"id": "a", "error": LIB_B}),
        "not json",
        json.dumps({"id": 7, "error": "totally novel gibberish qwertyuiop"}),
        json.dumps({"id": "c"}),
        json.dumps({"id": "d", "error": LIB_A, "partition": "gpu"}),
    ]) + "\n")
    result = run_hpcmem("recall", "--batch", str(batch), "--no-model")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line.get("id") for line in lines] == ["a", None, 7, "c", "d"]
    assert lines[0]["matches"] and not lines[2]["matches"]
    assert "invalid JSON" in lines[1]["error"] and "needs 'error'" in lines[3]["error"]
    for line in (lines[0], lines[2], lines[4]):
        jsonschema.validate(line, SCHEMA)
    assert lines[4]["query"]["partition"] == "gpu"


def test_bad_inputs_are_one_line_errors(tmp_path: Path):
    for args, message in [
        (["record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f", "--action", "--memory=1G"], "unknown sbatch option"),
        (["record", "--cause", "c", "--fix", "f"], "give the error"),
        (["record", "--job", "424242", "--cause", "c", "--fix", "f"], "no stored failure for job 424242"),
        (["record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f", "--module", "cuda"], "NAME/VERSION"),
        (["record", "--error", "Segmentation fault", "--cause", "c", "--fix", "f", "--valid-until", "soon"], "YYYY-MM-DD"),
        (["recall", "--job", "424242"], "no stored failure for job 424242"),
        (["recall", "--log", str(tmp_path / "none.out")], "job log not found"),
    ]:
        result = run_hpcmem(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr


def test_secrets_in_a_lesson_are_never_stored_or_printed():
    token = "ghp_" + "FAKE0recallT3st0000xYz9Q8w7E6r5T4y3U2"
    lesson = record("--error", LIB_A, "--cause", "c", "--fix", f"git clone https://bob:{token}@github.com/x/y")
    assert token not in json.dumps(lesson)
    result = run_hpcmem("recall", LIB_A, "--json")
    assert token not in result.stdout and "[REDACTED:" in result.stdout


def test_vector_stage_with_a_current_index_imports_no_orm_and_no_torch(hpcmem_home):
    """A variant asked before (its vector cached, the index saved): the wide stage reads the
    index's state and the cache through plain SQL. No SQLAlchemy ORM, no torch."""
    import subprocess
    import sys

    from tests.cli.helpers import run_hpcmem

    lesson = ("RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: [Rank 3] "
              "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE) ran for "
              "1800091 milliseconds before timing out.")
    variant = lesson.replace("RuntimeError", "torch.distributed.DistBackendError").replace("rank 3", "rank 12")
    assert run_hpcmem("record", "--error", lesson, "--cause", "a rank stalled", "--fix", "raise the timeout").returncode == 0
    first = run_hpcmem("recall", "--json", variant)  # embeds, builds and saves the index, caches the vector
    assert "wide" in json.loads(first.stdout)["stages"], first.stderr
    code = ("import sys\nsys.argv = ['hpcmem', 'recall', '--json', sys.argv[1]]\n"
            "from hpcmem.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('MODULES', sorted(m for m in ('sqlalchemy.orm', 'alembic', 'torch', 'sentence_transformers') "
            "if m in sys.modules))\n")
    again = subprocess.run([sys.executable, "-c", code, variant], capture_output=True, text=True, timeout=120)
    assert again.stdout.strip().splitlines()[-1] == "MODULES []", again.stdout[-500:] + again.stderr[-500:]
    doc = json.loads(again.stdout.strip().splitlines()[0])
    assert "wide" in doc["stages"] and doc["matches"]


def test_recall_never_writes_to_a_shared_store(hpcmem_home, tmp_path):
    """Lessons written to a lab store are embedded by their writer; another user's recall
    only reads it (the file's bytes do not change), and a lesson that reached the store
    without a vector is reported, not embedded by the reader."""
    import hashlib

    from hpcmem.kb.config import load_config
    from hpcmem.kb.lessons.from_error import record
    from hpcmem.kb.store.stack import StoreStack
    from tests.cli.helpers import run_hpcmem

    lab = tmp_path / "lab.db"
    env = {"HPCMEM_LAB_STORES": f"vision={lab}"}
    nccl = ("RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: [Rank 3] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE) ran for "
            "1800091 milliseconds before timing out.")
    assert run_hpcmem("db", "upgrade", "--scope", "lab:vision", env=env).returncode == 0  # the lead creates it
    made = run_hpcmem("record", "--scope", "lab:vision", "--error", nccl, "--cause", "a rank stalled",
                      "--fix", "raise the NCCL timeout", "--json", env=env)
    assert made.returncode == 0, made.stderr

    def digest() -> str:
        return hashlib.sha256(lab.read_bytes()).hexdigest()

    before = digest()
    variant = nccl.replace("RuntimeError", "torch.distributed.DistBackendError").replace("rank 3", "rank 12")
    found = run_hpcmem("recall", "--json", variant, env=env)
    doc = json.loads(found.stdout)
    assert doc["matches"] and doc["matches"][0]["store"] == "vision" and "wide" in doc["stages"]
    assert not any("without vectors" in w for w in doc["warnings"])  # its writer embedded it
    assert digest() == before

    # a lesson that reached the store some other way, without a vector
    config = load_config(environ={"HPCMEM_HOME": str(hpcmem_home), "HPCMEM_DISABLE_LOCAL_CONFIG": "1", **env})
    stack = StoreStack.from_config(config)
    record(stack, cause="the GPU fell off the bus", fix="drain the node and resubmit", author="lead",
           error_text="NVRM: Xid 79, GPU has fallen off the bus.", scope="lab:vision")
    stack.dispose()
    before = digest()
    again = json.loads(run_hpcmem("recall", "--json", "Xid 79: GPU has fallen off the bus", env=env).stdout)
    assert any("1 lesson(s) without vectors" in w for w in again["warnings"]), again["warnings"]
    assert digest() == before
    embedded = run_hpcmem("lessons", "embed", "--scope", "lab:vision", "--json", env=env)
    assert json.loads(embedded.stdout) == {"scope": "lab:vision", "embedded": 1}, embedded.stderr
    after = json.loads(run_hpcmem("recall", "--json", "Xid 79: GPU has fallen off the bus", env=env).stdout)
    assert not any("without vectors" in w for w in after["warnings"])


def test_lab_servers_that_do_not_answer_cost_one_timeout_in_all(hpcmem_home, tmp_path):
    """Two lab stores on "servers" that accept the TCP connection and never answer (a hung
    PostgreSQL): recall still answers from the user's store, warns about each, and waits
    for them in parallel, so about one connect timeout rather than two. The timeout is long
    enough that a loaded machine's start-up cannot pass for the difference."""
    import socket
    import time

    from tests.cli.helpers import run_hpcmem

    timeout = 4.0
    config = tmp_path / "timeout.toml"
    config.write_text(f"[recall]\nconnect_timeout_seconds = {timeout}\n")

    silent = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)  # never accepted: the kernel completes the handshake, nobody speaks
        silent.append(sock)
    try:
        labs = ",".join(f"lab{i}=postgresql://nobody@127.0.0.1:{s.getsockname()[1]}/x" for i, s in enumerate(silent))
        started = time.monotonic()
        result = run_hpcmem("recall", "--json", "--no-model", "RuntimeError: the widget froze",
                            env={"HPCMEM_LAB_STORES": labs, "HPCMEM_CONFIG": str(config)})
        elapsed = time.monotonic() - started
    finally:
        for sock in silent:
            sock.close()
    assert result.returncode in (0, 1), result.stderr
    doc = json.loads(result.stdout)
    assert sorted(s["name"] for s in doc["stores"] if not s["reachable"]) == ["lab0", "lab1"]
    assert sum("skipped" in w for w in doc["warnings"]) == 2
    assert elapsed >= timeout - 0.5, f"{elapsed:.1f} s: the servers were not waited for"
    assert elapsed < 2 * timeout - 0.5, f"{elapsed:.1f} s: the two timeouts were waited for one after the other"
