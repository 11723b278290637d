"""A job's context read from scripts, sbatch arguments, submit lines, stored jobs and job
environments (kb/jobs/request.py), on the project's sample scripts and real Slurm outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcmem.kb.errors import InputError
from hpcmem.kb.jobs.context import clean_context, merge_contexts
from hpcmem.kb.jobs.request import (from_environment, from_occurrence, from_pasted_text, from_sbatch_args,
                                    from_script, from_submit_line)

SAMPLES = Path(__file__).resolve().parents[3] / "data" / "samples"
JOBS = SAMPLES / "jobs"


def script(name: str) -> dict:
    return from_script((JOBS / name).read_text())


def test_a_gpu_training_script_gives_its_request_stack_and_program():
    ctx = script("train-gpu.sh")
    assert ctx["partition"] == "gpu" and ctx["account"] == "research"
    assert ctx["mem_mb"] == 64 * 1024 and ctx["cpus"] == 16 and ctx["time_limit_s"] == 12 * 3600
    assert ctx["gres"] == ["gpu:a100:2"] and ctx["gpus"] == 2
    assert ctx["modules"] == ["gcc/12.2.0", "cuda/12.4"]  # after `module purge`
    assert ctx["venv"] == "$HOME/venvs/torch"
    assert ctx["launcher"] == "srun torchrun" and ctx["command"] == "train.py"
    assert len(ctx["script_sha256"]) == 64


def test_short_options_space_forms_and_trailing_comments_are_read_as_sbatch_reads_them():
    mpi = script("mpi-cpu.sh")
    assert (mpi["partition"], mpi["nodes"], mpi["cpus"], mpi["account"]) == ("cpu", 2, 64, "physics")
    assert mpi["mem_per_cpu_mb"] == 2000 and "mem_mb" not in mpi
    assert mpi["time_limit_s"] == 86400  # "1-00:00:00      # one day"
    assert mpi["modules"] == ["gcc/12.2.0", "openmpi/4.1.5", "lammps/2023.08"]  # `ml` loads too
    assert mpi["launcher"] == "mpirun" and mpi["command"] == "lmp"
    conda = script("conda-analysis.sh")
    assert (conda["partition"], conda["cpus"], conda["mem_mb"], conda["time_limit_s"]) == ("cpu", 4, 16384, 9000)
    assert conda["conda_env"] == "genomics-2024"
    assert conda["command"] == "count_kmers.py"  # the script python runs, across a `\` continuation


def test_a_module_swap_replaces_the_loaded_version():
    assert script("cuda-swap.sh")["modules"] == ["cuda/11.8"]


def test_a_multi_line_quoted_program_is_one_command():
    text = "#!/bin/bash\n#SBATCH --mem=50M\npython3 -c '\nimport time\nprint(1)\n'\n"
    assert from_script(text)["command"] == "python -c"


def test_sbatch_stops_reading_directives_at_the_first_command():
    text = "#!/bin/bash\n#SBATCH --mem=4G\necho start\n#SBATCH --mem=64G\n"
    assert from_script(text)["mem_mb"] == 4096


def test_every_sample_script_parses_with_a_request():
    for path in sorted(JOBS.glob("*.sh")):
        ctx = from_script(path.read_text())
        assert ctx.get("time_limit_s") and (ctx.get("mem_mb") or ctx.get("mem_per_cpu_mb")), path.name


def test_sbatch_args_and_submit_lines():
    assert from_sbatch_args("--mem=32G -p gpu --gres=gpu:v100:1 -c4 -t 2:00:00 run.sh") == {
        "mem_mb": 32768.0, "partition": "gpu", "gres": ["gpu:v100:1"], "gpus": 1, "cpus": 4, "cpus_per_task": 4,
        "time_limit_s": 7200, "command": "run.sh"}
    assert from_sbatch_args("--gpus=a100:4")["gres"] == ["gpu:a100:4"]
    assert from_sbatch_args("--mem 8000") == {"mem_mb": 8000.0}  # bare numbers are MB, as sbatch reads them
    assert from_submit_line("sbatch --mem=8G --partition=cpu job.sh")["partition"] == "cpu"
    assert from_submit_line("/usr/bin/sbatch -A physics job.sh")["account"] == "physics"
    pasted = "$ sbatch --mem=512G run.sh\nsbatch: error: Memory specification can not be satisfied"
    assert from_pasted_text(pasted)["mem_mb"] == 512 * 1024
    assert from_pasted_text("no command here") == {}


def test_how_cpus_are_split_is_kept_for_the_submission_checks():
    # 8 tasks of 2 CPUs may spread over nodes; 16 CPUs for one task must fit on one node
    assert from_sbatch_args("-n 8 -c 2") == {"cpus": 16, "cpus_per_task": 2, "ntasks": 8}
    assert from_sbatch_args("-c 16") == {"cpus": 16, "cpus_per_task": 16}
    # sbatch: --ntasks-per-node without -n gives nodes x that many tasks
    assert from_sbatch_args("-N 2 --ntasks-per-node=4") == {"nodes": 2, "cpus": 8, "ntasks": 8, "ntasks_per_node": 4}


@pytest.mark.parametrize("args, message", [
    ("--mem=lots", "cannot read --mem=lots"),
    ("--time=forever", "cannot read --time=forever"),
    ("-c many", "cannot read --cpus-per-task=many"),
    ("--mem", "--mem has no value"),
    ("--gpus=a100:x", "not a GPU count"),
    ("--job-name 'unclosed", "cannot read --sbatch-args"),
])
def test_bad_sbatch_args_are_refused_with_the_option_named(args, message):
    with pytest.raises(InputError, match=message):
        from_sbatch_args(args)


def test_a_script_that_is_not_text_is_refused():
    with pytest.raises(InputError, match="not text"):
        from_script("#!/bin/bash\n\x00\x01")


def test_a_stored_job_gives_its_columns_and_its_submit_line():
    occ = {"partition": "cpu", "req_mem_mb": 8192.0, "req_cpus": 4, "req_time_s": 3600, "max_rss_mb": 8100.5,
           "state": "OUT_OF_MEMORY", "exit_code": 0, "exit_signal": 9, "req_gres": "gpu=1,gpu:a100=1",
           "modules": ["cuda/12.4"], "submit_line": "sbatch --qos=long --mem=8G train.sh", "job_context": None}
    ctx = from_occurrence(occ)
    assert ctx["mem_mb"] == 8192 and ctx["cpus"] == 4 and ctx["max_rss_mb"] == 8100.5 and ctx["signal"] == 9
    assert ctx["gres"] == ["gpu:a100:1"] and ctx["gpus"] == 1  # the typed entry says more
    assert ctx["qos"] == "long" and ctx["command"] == "train.sh"  # from the submit line
    assert ctx["modules"] == ["cuda/12.4"]


def test_a_real_epilog_environment_gives_the_jobs_facts():
    # data/samples/epilog: the environment slurmd gave the real harness's Epilog
    env = {}
    for line in (SAMPLES / "epilog" / "1.epilog.env").read_text().splitlines():
        key, _, value = line.partition("=")
        env[key] = value
    ctx = from_environment(env)
    assert (ctx["partition"], ctx["account"], ctx["cpus"]) == ("debug", "research", 1)


def test_loaded_modules_come_from_the_environment():
    ctx = from_environment({"LOADEDMODULES": "gcc/13.1.0:cuda/12.4", "SLURM_MEM_PER_NODE": "4096",
                            "SLURM_JOB_CPUS_PER_NODE": "8(x2)", "CONDA_DEFAULT_ENV": "torch"})
    assert ctx == {"conda_env": "torch", "mem_mb": 4096.0, "cpus": 8, "modules": ["gcc/13.1.0", "cuda/12.4"]}


@pytest.mark.parametrize("raw, message", [
    ("mem", "must be an object"),
    ({"mem_mb": "8G"}, "mem_mb must be a non-negative number"),
    ({"mem_mb": -1}, "mem_mb must be a non-negative number"),
    ({"mem_mb": float("nan")}, "mem_mb must be a non-negative number"),
    ({"cpus": True}, "cpus must be a non-negative number"),
    ({"modules": "cuda/12.4"}, "modules must be a list"),
    ({"partition": 3}, "partition must be text"),
    ({"packages": {"torch": 2}}, "packages must map"),
])
def test_a_context_object_with_wrong_types_is_refused(raw, message):
    with pytest.raises(InputError, match=message):
        clean_context(raw)


def test_unknown_keys_and_empty_values_are_dropped_and_the_first_source_wins():
    assert clean_context({"mem_mb": 8192, "colour": "blue", "partition": "", "gres": []}) == {"mem_mb": 8192.0}
    # an empty module list is a fact: no module loaded (a library's module missing is a cause)
    assert clean_context({"modules": []}) == {"modules": []}
    assert merge_contexts({"modules": []}, {"modules": ["gcc/13.1.0"]}) == {"modules": []}
    assert merge_contexts({"mem_mb": 1.0}, {"mem_mb": 2.0, "cpus": 4}, None) == {"mem_mb": 1.0, "cpus": 4}
