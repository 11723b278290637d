"""Context decides (issue 26): recall weighs the job's facts against the context each lesson was
born with, through the real CLI and the MCP server, on real stores.

The learned lessons come from `data/samples/sacct/resubmissions/oom-ladder.psv`: one script
out of memory at 8G (fixed with 32G) and, a day later, at 32G (fixed with 64G). Both failures
share one fingerprint; the text cannot tell the lessons apart, the job's request can."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import run_hpcmem
from tests.cli.test_mcp import call, server_params
from tests.conftest import SAMPLES

LADDER = SAMPLES / "sacct" / "resubmissions" / "oom-ladder.psv"
JOBS = SAMPLES / "jobs"
OOM = "slurmstepd: error: Detected 1 oom_kill event in StepId=61234.batch. Some of the step tasks have been OOM Killed."
NODE_CONFIG = "sbatch: error: Batch job submission failed: Requested node configuration is not available"


def recall_json(*args: str) -> tuple[int, dict]:
    done = run_hpcmem("recall", "--json", "--no-model", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def to_mem(match: dict) -> str:
    return next(a["to"] for a in match["actions"] if a.get("option") == "--mem")


@pytest.fixture
def ladder(hpcmem_home):
    done = run_hpcmem("ingest", "sacct", str(LADDER), "--tz", "UTC")
    assert done.returncode == 0, done.stderr
    assert "2 new lesson(s)" in done.stdout
    return hpcmem_home


def test_learned_lessons_are_born_with_the_failed_jobs_request(ladder):
    listed = json.loads(run_hpcmem("lessons", "list", "--json").stdout)
    born = {to_mem(l): l for l in listed}
    assert set(born) == {"32G", "64G"}
    shown = run_hpcmem("lessons", "show", born["64G"]["lesson_id"][:8])
    assert shown.returncode == 0, shown.stderr
    assert "job:     partition cpu, mem 32G, cpus 8, time 06:00:00" in shown.stdout


def test_an_oom_at_32g_gets_the_32g_to_64g_lesson_and_never_the_8g_one(ladder):
    for args in (["--sbatch-args", "--mem=32G -c 8 assemble.sh", OOM], ["--job", "54003"]):
        code, doc = recall_json(*args)
        assert code == 0
        first = doc["matches"][0]
        assert first["band"] == "match" and to_mem(first) == "64G"
        eight = next(m for m in doc["matches"] if to_mem(m) == "32G")
        assert eight["band"] == "related"
        assert eight["inapplicable"] == ["the job already asked --mem=32G; the fix asks 32G"]
        assert {"field": "mem", "query": "32G", "lesson": "8G", "kind": "context", "matters": True} in eight["differs"]
        assert doc["context_decided"] is True


def test_an_oom_at_8g_gets_the_8g_to_32g_lesson_first(ladder):
    code, doc = recall_json("--sbatch-args", "--mem=8G", OOM)
    assert code == 0
    assert doc["matches"][0]["band"] == "match" and to_mem(doc["matches"][0]) == "32G"
    assert "mem" in doc["matches"][0]["context_agrees"]
    assert doc["query"]["context"]["mem_mb"] == 8192


def test_without_context_the_text_cannot_choose(ladder):
    code, doc = recall_json(OOM)
    assert code == 1 and doc["abstained"]  # two lessons, one wording, other fixes: none applied
    assert all(m["band"] == "related" and m["tied_with"] for m in doc["matches"])
    assert doc["context_decided"] is False and doc["query"]["context"] == {}


def test_a_pasted_sbatch_line_is_the_jobs_request(ladder):
    code, doc = recall_json(f"$ sbatch --mem=32G assemble.sh\n{OOM}")
    assert code == 0 and to_mem(doc["matches"][0]) == "64G"


def test_a_job_that_asked_more_than_every_fix_gets_no_match(ladder):
    code, doc = recall_json("--sbatch-args", "--mem=128G", OOM)
    assert code == 1 and doc["abstained"]
    assert all(m["inapplicable"] for m in doc["matches"])


def test_the_human_view_says_what_differs_and_why_a_lesson_is_not_for_this_job(ladder):
    done = run_hpcmem("recall", "--no-model", "--sbatch-args", "--mem=32G", OOM)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "Your job's context decided between the lessons below." in text
    assert "Not for this job: the job already asked --mem=32G; the fix asks 32G" in text
    assert "Differs: your job's mem 32G, the lesson's 8G" in text


def test_the_script_gives_the_request(ladder, tmp_path):
    script = tmp_path / "assemble.sh"
    script.write_text("#!/bin/bash\n#SBATCH --mem=32G\n#SBATCH -c 8\nmodule load spades/3.15.5\nspades.py -o out\n")
    code, doc = recall_json("--script", str(script), OOM)
    assert code == 0 and to_mem(doc["matches"][0]) == "64G"
    assert doc["query"]["context"]["modules"] == ["spades/3.15.5"]


@pytest.mark.parametrize("args, message", [
    (["--sbatch-args", "--mem=lots", OOM], "cannot read --mem=lots"),
    (["--script", "/nonexistent/job.sh", OOM], "cannot read --script"),
])
def test_bad_context_input_is_one_line_exit_2(hpcmem_home, args, message):
    done = run_hpcmem("recall", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # the error and, at most, its hint


def test_a_binary_script_is_refused(hpcmem_home, tmp_path):
    script = tmp_path / "job.sh"
    script.write_bytes(b"#!/bin/bash\n\xff\xfe\x00")
    done = run_hpcmem("recall", "--script", str(script), OOM)
    assert done.returncode == 2 and "not a text file" in done.stderr


def _record(*args: str) -> str:
    done = run_hpcmem("record", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["lesson_id"]


def test_node_configuration_failures_are_told_apart_by_what_the_job_asked(hpcmem_home):
    # One message, three causes (data/corpus's confusable family): the request decides.
    gpu = _record("--error", NODE_CONFIG, "--sbatch-args", "-p cpu --gres=gpu:1", "--cause", "GPUs asked on a CPU partition",
                  "--fix", "submit to the gpu partition", "--action", "-p gpu")
    cpus = _record("--error", NODE_CONFIG, "--sbatch-args", "-p cpu -c 256", "--cause", "more CPUs than a node has",
                   "--fix", "ask at most 64 CPUs per task", "--action", "--cpus-per-task=64")
    mem = _record("--error", NODE_CONFIG, "--sbatch-args", "-p cpu --mem=900G", "--cause", "more memory than a node has",
                  "--fix", "use the bigmem partition", "--action", "-p bigmem")
    for args, wanted in ((["-p cpu --gres=gpu:1"], gpu), (["-p cpu -c 128"], cpus), (["-p cpu --mem=700G"], mem)):
        code, doc = recall_json("--sbatch-args", args[0], NODE_CONFIG)
        assert code == 0 and doc["matches"][0]["lesson_id"] == wanted, (args, doc["matches"][0]["fix"])
        assert doc["context_decided"] is True


def test_a_module_the_job_already_loads_is_no_fix_for_it(hpcmem_home):
    error = "Lmod has detected the following error: The following module(s) are unknown: \"fftw/3.3.99\""
    _record("--error", error, "--cause", "the default gcc does not provide fftw", "--fix", "load gcc first",
            "--action", "module load gcc/13.1.0")
    code, doc = recall_json("--module", "gcc/13.1.0", error)
    assert code == 1 and doc["matches"][0]["band"] == "related"
    assert doc["matches"][0]["inapplicable"] == ["module gcc/13.1.0 is already loaded"]


def test_a_lesson_from_another_gpu_type_is_at_most_related(hpcmem_home):
    error = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    _record("--error", error, "--sbatch-args", "-p gpu --gres=gpu:a100:1", "--cause", "built for sm_80 only",
            "--fix", "rebuild with TORCH_CUDA_ARCH_LIST=7.0", "--action", "export TORCH_CUDA_ARCH_LIST=7.0")
    code, doc = recall_json("--sbatch-args", "-p gpu --gres=gpu:v100:1", error)
    assert code == 1
    assert doc["matches"][0]["inapplicable"][0].startswith("the lesson's cause is on GPU type a100")
    code, doc = recall_json("--sbatch-args", "-p gpu --gres=gpu:a100:1", error)
    assert code == 0 and doc["matches"][0]["band"] == "match"


def test_record_keeps_the_scripts_context_and_redacts_secrets_in_it(hpcmem_home):
    lesson_id = _record("--error", OOM, "--cause", "too little memory", "--fix", "ask for more",
                        "--script", str(JOBS / "train-gpu.sh"), "--action", "--mem=128G")
    shown = json.loads(run_hpcmem("lessons", "show", lesson_id, "--json").stdout)
    ctx = shown["job_context"]
    assert (ctx["partition"], ctx["gres"], ctx["modules"]) == ("gpu", ["gpu:a100:2"], ["gcc/12.2.0", "cuda/12.4"])
    token = "hf_" + "Zq8" * 12
    leaky = _record("--error", OOM, "--cause", "c", "--fix", "f",
                    "--sbatch-args", f"--mem=8G --chdir=/scratch/u/HF_TOKEN={token}")
    assert token not in run_hpcmem("lessons", "show", leaky, "--json").stdout


def test_mcp_recall_and_record_take_the_jobs_context(ladder):
    async def body(s):
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert "context" in tools["recall"].input_schema["properties"]
        found = await s.call_tool("recall", {"error": OOM, "context": {"sbatch_args": "--mem=32G"}})
        assert not found.is_error, found.content
        doc = found.structured_content
        assert doc["context_decided"] and to_mem(doc["matches"][0]) == "64G"
        by_job = await s.call_tool("recall", {"context": {"job_id": "54003"}})
        assert not by_job.is_error and to_mem(by_job.structured_content["matches"][0]) == "64G"
        bad = await s.call_tool("recall", {"error": OOM, "context": {"mem_mb": "lots"}})
        assert bad.is_error and "context.mem_mb must be a non-negative number" in bad.content[0].text
        unknown = await s.call_tool("recall", {"error": OOM, "context": {"colour": "blue"}})
        assert unknown.is_error and "unknown field(s) in 'context': colour" in unknown.content[0].text
        recorded = await s.call_tool("record", {"error": NODE_CONFIG, "cause": "GPU on a CPU partition",
                                                "fix": "use gpu", "actions": ["-p gpu"],
                                                "context": {"script": "#!/bin/bash\n#SBATCH -p cpu --gres=gpu:1\n"}})
        assert not recorded.is_error, recorded.content
        assert recorded.structured_content["job_context"]["partition"] == "cpu"
        prose = await s.call_tool("record", {"error": OOM, "cause": "c", "fix": "f", "context": "nightly run"})
        assert not prose.is_error and prose.structured_content["context"] == "nightly run"

    call(server_params(ladder), body)


def test_built_in_advice_starts_from_the_request_the_caller_gave(hpcmem_home):
    code, doc = recall_json("--sbatch-args", "--mem=8G", OOM)
    assert code == 1  # no stored lesson; the advice stands apart
    assert doc["advice"][0]["actions"] == [{"type": "sbatch", "option": "--mem", "to": "16G", "from": "8G"}]
    code, doc = recall_json(OOM)
    assert not any(a.get("from") for item in doc["advice"] for a in item["actions"])  # nothing to start from


def test_batch_lines_carry_their_own_context(ladder, tmp_path):
    batch = tmp_path / "q.jsonl"
    batch.write_text("\n".join(json.dumps(line) for line in (
        {"id": "a", "error": OOM, "context": {"sbatch_args": "--mem=32G"}},
        {"id": "b", "error": OOM, "context": {"mem_mb": 8192}},
        {"id": "c", "error": OOM, "context": {"mem_mb": "8G"}},
    )) + "\n")
    done = run_hpcmem("recall", "--json", "--no-model", "--batch", str(batch))
    assert done.returncode == 0, done.stderr
    answers = {d["id"]: d for d in map(json.loads, done.stdout.splitlines())}
    assert to_mem(answers["a"]["matches"][0]) == "64G" and to_mem(answers["b"]["matches"][0]) == "32G"
    assert "context.mem_mb must be a non-negative number" in answers["c"]["error"]


def test_a_lesson_for_another_script_never_offers_less_than_just_failed(hpcmem_home, tmp_path):
    # issue 34: --mem=600M was recorded for prep.sh; train.sh asked 700M and ran out of memory
    prep, train = tmp_path / "prep.sh", tmp_path / "train.sh"
    prep.write_text("#!/bin/bash\n#SBATCH --mem=500M\npython3 prep.py\n")
    train.write_text("#!/bin/bash\n#SBATCH --mem=700M\npython3 train.py\n")
    _record("--error", OOM, "--script", str(prep), "--cause", "prep needs ~550M", "--fix", "ask 600M",
            "--action", "--mem=600M")
    code, doc = recall_json("--script", str(train), OOM)
    assert code == 1 and doc["matches"][0]["band"] == "related"
    assert doc["matches"][0]["inapplicable"] == ["the job already asked --mem=700M; the fix asks 600M"]
    other = tmp_path / "other.sh"  # another script, nothing known of its request: not applied either
    other.write_text("#!/bin/bash\npython3 other.py\n")
    code, doc = recall_json("--script", str(other), OOM)
    assert code == 1 and {"field": "program", "query": "other.py", "lesson": "prep.py", "kind": "context",
                          "matters": False} in doc["matches"][0]["differs"]
    code, doc = recall_json("--script", str(prep), OOM)  # the same script: the lesson applies
    assert code == 0 and doc["matches"][0]["band"] == "match"


def test_advice_under_a_matched_lesson_says_which_number_to_follow(ladder):
    code, doc = recall_json("--sbatch-args", "--mem=8G", OOM)
    assert code == 0 and to_mem(doc["matches"][0]) == "32G"
    advice = doc["advice"][0]
    assert advice["actions"][0]["to"] == "16G"  # the general rule: 2 x 8G
    assert advice["note"].startswith(f"The matched lesson {doc['matches'][0]['lesson_id'][:8]} asks --mem=32G: follow it.")
    human = run_hpcmem("recall", "--no-model", "--sbatch-args", "--mem=8G", OOM)
    assert "asks --mem=32G: follow it" in " ".join(human.stdout.split())


def test_recall_advice_reads_the_same_jobs_earlier_runs(hpcmem_home):
    # lab-followups: 53012 out of memory at 8G, 53013 at 16G, 53014 completed with 32G
    done = run_hpcmem("ingest", "sacct", str(SAMPLES / "sacct" / "resubmissions" / "lab-followups.psv"), "--tz", "UTC",
                      "--no-learn")
    assert done.returncode == 0, done.stderr
    for job, before in (("53013", "8G"), ("53012", "16G")):
        _, doc = recall_json("--job", job)
        [advice] = [a for a in doc["advice"] if a["actions"] and a["actions"][0].get("option") == "--mem"]
        assert advice["actions"][0]["to"] == "32G"
        assert f"The same job also ran out of memory at {before}." in advice["cause"]


def test_a_secret_in_a_long_script_value_or_an_echoed_error_is_not_printed(hpcmem_home, tmp_path):
    token = "hf_" + "Qx7" * 12
    script = tmp_path / "job.sh"
    # a value longer than a context field keeps: scrubbed before it is cut, never half a token
    script.write_text(f"#!/bin/bash\n#SBATCH --mem=1G\nexport X={'a' * 500}\npython3 run.py --hf-token {token}\n")
    lesson_id = _record("--error", OOM, "--cause", "c", "--fix", "f", "--script", str(script))
    assert token[:12] not in run_hpcmem("lessons", "show", lesson_id, "--json").stdout
    # the error echoes the action it cannot read; the token in it does not reach stderr
    bad = run_hpcmem("record", "--error", OOM, "--cause", "c", "--fix", "f", "--action",
                     f"module load 'HF_TOKEN={token}")
    assert bad.returncode == 2 and "cannot read --action" in bad.stderr
    assert token not in bad.stderr and "[REDACTED" in bad.stderr
