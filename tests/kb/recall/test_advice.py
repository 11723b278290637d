"""Built-in advice: numbers computed from the failed job, environment read from real samples."""

from __future__ import annotations

import json

import pytest

from hpcmem.kb.environment.snapshot import EnvSnapshot
from hpcmem.ingest.lmod import read_modules
from hpcmem.ingest.partitions import read_partitions
from hpcmem.kb.lessons.actions import validate_action
from hpcmem.kb.recall.advice import advice_for, advised_categories, round_up_memory, round_up_time
from tests.conftest import SAMPLES

ENV = SAMPLES / "env"
GIB = 1024


def env_from(partitions: str, modules: str | None = None) -> dict:
    """An environment in the form the store keeps (EnvSnapshot JSON), from sample files."""
    parts = read_partitions((ENV / partitions).read_text(encoding="utf-8"))
    mods = read_modules((ENV / modules).read_text(encoding="utf-8")) if modules else {}
    return json.loads(EnvSnapshot(mods, parts).to_json())


@pytest.fixture(scope="module")
def cluster_env() -> dict:
    # cpu (default, 2 days), gpu (v100, 2 days), gpu_test (v100, 4 h), a100 (1 day), debug (30 min);
    # modules cuda 12.1/12.4, gcc 11.4.0/12.2.0/13.2.0, python 3.10.13/3.11.7 ...
    return env_from("cluster-2026-11/scontrol-show-partition-oneliner.txt", "cluster-2026-11/module-t-avail.txt")


def sbatch(option, before, after):
    action = {"type": "sbatch", "option": option, "to": after}
    if before is not None:
        action["from"] = before
    return action


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize(
    "mb, expected",
    [(75, 128), (129, 256), (1000, 1024), (1025, 2 * GIB), (9.875 * GIB, 10 * GIB), (16 * GIB, 16 * GIB),
     (16.1 * GIB, 20 * GIB), (49 * GIB, 52 * GIB), (65 * GIB, 80 * GIB), (150 * GIB, 160 * GIB)],
)
def test_round_up_memory(mb, expected):
    assert round_up_memory(mb) == expected


@pytest.mark.parametrize(
    "req, rss, expected",
    [
        (8 * GIB, 7.9 * GIB, "16G"),  # MaxRSS at the limit is a lower bound: 2 x 8G
        (32 * GIB, 32407.6, "64G"),  # lab-week 52008: 2 x 32G
        (64 * GIB, 20000, "96G"),  # MaxRSS far below the limit (a sampled peak): max(1.25 x, 1.5 x 64G)
        (4 * GIB, 4049.4, "8G"),  # lab-week 52067_7
        (50, 43.03, "128M"),  # real job 4: 75M rounds up to a 128M step
        (8 * GIB, None, "16G"),  # MaxRSS unknown: double the request
        (None, 3000, "5G"),  # request unknown: 1.5 x MaxRSS = 4.4G
    ],
)
def test_host_oom_suggests_memory_from_maxrss(req, rss, expected):
    [item] = advice_for("host_oom", {"req_mem_mb": req, "max_rss_mb": rss})
    action = item["actions"][0]
    assert (action["option"], action["to"]) == ("--mem", expected)
    assert action.get("from") == (None if req is None else (f"{req // GIB}G" if req >= GIB else f"{req}M"))
    assert f"--mem={expected}" in item["fix"] and "sacct -j" in item["fix"] and "sstat" in item["fix"]
    assert item["source"] == "rule" and item["category"] == "host_oom" and item["confidence"] == 0.5


def test_host_oom_per_cpu_request_gets_per_cpu_advice():
    occ = {"req_mem_mb": 16 * GIB, "max_rss_mb": 16260, "req_cpus": 8,
           "submit_line": "sbatch --time=08:00:00 --mem-per-cpu=2G -c 8 phonons.sh"}
    [item] = advice_for("host_oom", occ)
    assert item["actions"] == [sbatch("--mem-per-cpu", "2G", "4G")]  # 2 x 16G = 32G over 8 CPUs
    assert "per CPU" in item["fix"]


def test_host_oom_notes_sampling_when_maxrss_is_far_below_the_limit():
    [item] = advice_for("host_oom", {"req_mem_mb": 16 * GIB, "max_rss_mb": 6 * GIB})
    assert "sampled" in item["cause"]
    [plain] = advice_for("host_oom", {"req_mem_mb": 8 * GIB, "max_rss_mb": 7.9 * GIB})
    assert "sampled" not in plain["cause"] and "MaxRSS 7.9G" in plain["cause"]


def test_host_oom_advice_starts_from_the_jobs_earlier_failed_requests():
    # issue 34: 100M -> 256M -> 384M all ran out of memory when each step was 1.5 x; ~410M was needed
    history = [{"job_id": "11", "state": "OUT_OF_MEMORY", "req_mem_mb": 100.0},
               {"job_id": "12", "state": "OUT_OF_MEMORY", "req_mem_mb": 256.0}]
    [item] = advice_for("host_oom", {"req_mem_mb": 256.0, "max_rss_mb": 255.0, "history": history})
    assert item["actions"][0]["to"] == "512M"
    assert "also ran out of memory at 100M" in item["cause"] and "lower bound" in item["cause"]
    # without this run's request (a pasted error), the earlier failures still set the floor
    [floor] = advice_for("host_oom", {"max_rss_mb": 250.0, "history": history})
    assert floor["actions"][0]["to"] == "512M"


def test_host_oom_advice_takes_the_request_the_same_job_completed_with():
    history = [{"job_id": "13", "state": "COMPLETED", "req_mem_mb": 640.0},
               {"job_id": "11", "state": "OUT_OF_MEMORY", "req_mem_mb": 100.0}]
    [item] = advice_for("host_oom", {"req_mem_mb": 256.0, "max_rss_mb": 255.0, "history": history})
    assert item["actions"][0]["to"] == "640M" and "completed with, 640M" in item["fix"]


def test_host_oom_advice_stays_within_the_largest_node():
    one_node = {"partitions": {"main": {"is_default": True, "max_mem_per_node_mb": None,
                                        "tres": {"cpu": "2", "mem": "2000M", "node": "1"}}}}
    [item] = advice_for("host_oom", {"req_mem_mb": 1500.0, "max_rss_mb": 1499.0, "partition": "main"}, one_node)
    assert item["actions"] == [sbatch("--mem", "1500M", "2000M")]  # never the 3G the node cannot give
    assert "more than any node here has" in item["fix"]
    two = {"partitions": {"main": {"max_mem_per_node_mb": 2000}, "bigmem": {"max_mem_per_node_mb": 512000}}}
    [moved] = advice_for("host_oom", {"req_mem_mb": 1500.0, "max_rss_mb": 1499.0, "partition": "main"}, two)
    assert moved["actions"][0] == {"type": "sbatch", "option": "--partition", "to": "bigmem", "from": "main"}


def test_host_oom_advice_is_capped_by_the_nodes_of_the_partition_when_the_snapshot_has_them():
    import json

    from tests.kb.environment.test_site_check import LAB, site

    env = json.loads(site(LAB).to_json())  # cpu: 515000M nodes; bigmem: 2060000M less 16000M kept
    [item] = advice_for("host_oom", {"req_mem_mb": 400 * 1024.0, "max_rss_mb": 400 * 1024.0 - 1, "partition": "cpu"},
                        env)
    assert item["actions"][0] == {"type": "sbatch", "option": "--partition", "to": "bigmem", "from": "cpu"}, item
    assert "bigmem" in item["fix"]


def test_host_oom_advice_names_seff_only_where_it_is_installed(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    [item] = advice_for("host_oom", {"req_mem_mb": 1024.0})
    assert "seff" not in item["fix"] and "sacct -j <jobid>" in item["fix"]
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/seff" if name == "seff" else None)
    [item] = advice_for("host_oom", {"req_mem_mb": 1024.0})
    assert "`seff <jobid>`" in item["fix"]


# --------------------------------------------------------------------------- time


@pytest.mark.parametrize("seconds, expected", [(90, 900), (901, 1800), (3599, 3600), (3601, 7200), (21600, 21600)])
def test_round_up_time(seconds, expected):
    assert round_up_time(seconds) == expected


def test_time_limit_suggestion_fits_the_partition(cluster_env):
    occ = {"req_time_s": 4 * 3600, "elapsed_s": 4 * 3600 + 32, "partition": "cpu"}
    more, checkpoint = advice_for("time_limit", occ, cluster_env)
    assert more["actions"] == [sbatch("--time", "04:00:00", "06:00:00")]  # 1.5 x 4 h
    assert "after 04:00:32" in more["cause"]
    assert checkpoint["actions"] == [sbatch("--signal", None, "B:USR1@300")]
    assert "checkpoint" in checkpoint["fix"].lower()


def test_time_limit_over_partition_maxtime_names_a_partition_that_fits(cluster_env):
    occ = {"req_time_s": 4 * 3600, "elapsed_s": 4 * 3600 + 29, "partition": "gpu_test", "req_gres": "gpu=1,gpu:v100=1"}
    more = advice_for("time_limit", occ, cluster_env)[0]
    assert "more than partition gpu_test's MaxTime 04:00:00" in more["fix"]
    # GPU partitions whose MaxTime fits 6 h, shortest first: a100 (1 day), gpu (2 days); never cpu.
    assert "Partitions with a long enough MaxTime: a100, gpu;" in more["fix"]
    assert more["actions"] == [sbatch("--partition", "gpu_test", "a100"), sbatch("--time", "04:00:00", "06:00:00")]

    cpu_job = advice_for("time_limit", {"req_time_s": 1800, "elapsed_s": 1815, "partition": "debug"}, cluster_env)[0]
    assert cpu_job["actions"] == [sbatch("--partition", "debug", "cpu"), sbatch("--time", "00:30:00", "00:45:00")]


def test_time_limit_on_the_real_cluster_moves_to_main():
    env = env_from("real-slurm/partitions/scontrol-show-partition.txt")  # debug 2 min, main UNLIMITED
    more = advice_for("time_limit", {"req_time_s": 60, "elapsed_s": 85, "partition": "debug"}, env)[0]
    assert more["actions"] == [sbatch("--partition", "debug", "main"), sbatch("--time", "00:01:00", "00:15:00")]


def test_time_limit_when_no_partition_is_long_enough():
    env = {"partitions": {"short": {"max_time_s": 7200, "is_default": True}, "shorter": {"max_time_s": 3600}}}
    more = advice_for("time_limit", {"req_time_s": 7200, "partition": "short"}, env)[0]
    assert more["actions"] == [sbatch("--time", "02:00:00", "02:00:00")]
    assert "No partition allows that long" in more["fix"] and "--dependency=afterany" in more["fix"]


def test_time_limit_exceeds_partition(cluster_env):
    [item] = advice_for("time_limit_exceeds_partition", {"req_time_s": 7200, "partition": "debug"}, cluster_env)
    assert "asked for 02:00:00 but partition debug allows at most 00:30:00" in item["cause"]
    assert item["actions"] == [sbatch("--partition", "debug", "cpu")]
    [plain] = advice_for("time_limit_exceeds_partition", {"req_time_s": 7200, "partition": "debug"})
    assert "sinfo" in plain["fix"] and plain["actions"] == []


# --------------------------------------------------------------------------- modules, partitions, libraries


def test_unknown_module_names_existing_versions(cluster_env):
    occ = {"template": 'unknown module(s): "cuda/11.7"'}
    [item] = advice_for("unknown_module", occ, cluster_env)
    assert "cuda exists in versions 12.1, 12.4 (default 12.4)" in item["fix"]
    assert item["actions"] == [{"type": "module", "op": "load", "name": "cuda/12.4"}]
    [wrong_case] = advice_for("unknown_module", {"template": 'unknown module(s): "CUDA/12.4"'}, cluster_env)
    assert "case-sensitive: it is cuda" in wrong_case["cause"]
    [absent] = advice_for("unknown_module", {"template": 'unknown module(s): "tensorflow/2.15"'}, cluster_env)
    assert "There is no module tensorflow here" in absent["fix"] and absent["actions"] == []
    [no_env] = advice_for("unknown_module", occ)
    assert "module spider cuda" in no_env["fix"]


def test_invalid_partition_lists_partitions(cluster_env):
    occ = {"template": "sbatch: error: invalid partition specified: gpux"}
    [item] = advice_for("invalid_partition", occ, cluster_env)
    assert item["cause"] == "Partition gpux does not exist on this cluster."
    assert "Partitions here: a100, cpu, debug, gpu, gpu_test (default cpu)." in item["fix"]
    assert item["actions"] == [sbatch("--partition", "gpux", "gpu")]
    [no_env] = advice_for("invalid_partition", occ)
    assert "sinfo -s" in no_env["fix"]


@pytest.mark.parametrize(
    "template, action, words",
    [
        ("libcudart.so.12: cannot open shared object file", {"type": "module", "op": "load", "name": "cuda/12.4"},
         "12.x series"),
        ("libcudnn.so.8: cannot open shared object file",
         {"type": "module", "op": "load", "name": "cudnn/8.9.7-cuda12"}, "cudnn"),
        ("libcudart.so.11.0: cannot open shared object file", None, "No cuda 11.x is installed"),
        ("libfoo.so.3: cannot open shared object file", None, "ldd"),
    ],
)
def test_missing_shared_library(cluster_env, template, action, words):
    [item] = advice_for("missing_shared_library", {"template": template}, cluster_env)
    assert item["actions"] == ([action] if action else [])
    assert words in item["fix"]


def test_symbol_version_not_found(cluster_env):
    [cxx] = advice_for("symbol_version_not_found", {"template": "libstdc++.so.6: version `GLIBCXX_3.4.30' not found"},
                       cluster_env)
    assert "GLIBCXX_3.4.30" in cxx["cause"] and cxx["actions"] == [{"type": "module", "op": "load", "name": "gcc/13.2.0"}]
    [libc] = advice_for("symbol_version_not_found", {"template": "libc.so.6: version `GLIBC_2.34' not found"})
    assert "newer C library" in libc["cause"] and libc["actions"] == []


# --------------------------------------------------------------------------- every category


BRIEF_CATEGORIES = (
    "host_oom", "time_limit", "cuda_oom", "unknown_module", "invalid_partition", "time_limit_exceeds_partition",
    "missing_shared_library", "symbol_version_not_found", "python_import_error", "disk_quota", "disk_full",
    "node_failure", "preempted", "lmod_not_available",
)


@pytest.mark.parametrize("category", sorted(set(BRIEF_CATEGORIES) | set(advised_categories())))
@pytest.mark.parametrize("with_data", [False, True])
def test_every_category_gives_advice(category, with_data, cluster_env):
    occ = env = None
    if with_data:
        occ = {"req_mem_mb": 8 * GIB, "max_rss_mb": 7.9 * GIB, "req_time_s": 3600, "elapsed_s": 3629,
               "partition": "gpu_test", "exit_code": 1, "nodes": "gn015",
               "template": 'unknown module(s): "cuda/11.7"'}
        env = cluster_env
    items = advice_for(category, occ, env)
    assert items, category
    for item in items:
        assert item["cause"].strip() and item["fix"].strip()
        assert item["source"] == "rule" and item["category"] == category
        assert 0 < item["confidence"] <= 0.5
        for action in item["actions"]:
            assert validate_action(action) == action


def test_unknown_category_has_no_advice():
    assert advice_for("job_cancelled", {"exit_code": 0}) == []
    assert advice_for("no_such_category", None) == []


def test_specific_notes():
    [quota] = advice_for("disk_quota", {"template": "OSError: [Errno <NUM>] Disk quota exceeded: '<FILE>'"})
    assert "lfs quota" in quota["fix"] and "$SCRATCH" in quota["fix"]
    [lmod] = advice_for("lmod_not_available", {"template": "bash: module: command not found"})
    assert "#!/bin/bash -l" in lmod["fix"] and "/etc/profile.d/lmod.sh" in lmod["fix"]
    [node] = advice_for("node_failure", {"nodes": "cpu-07"})
    assert node["actions"] == [sbatch("--requeue", None, None)] and "--exclude=cpu-07" in node["fix"]
    [imp] = advice_for("python_import_error", {"template": "ModuleNotFoundError: No module named 'torch'"})
    assert "import torch" in imp["fix"] and "activate" in imp["fix"]
    bigger = advice_for("cuda_oom", None, {"partitions": {"a100": {"tres": {"gres/gpu:a100": "64"}}}})
    assert bigger[0]["actions"] == [{"type": "env", "name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]
    assert "a100 (a100)" in bigger[1]["fix"]


def test_pending_reasons_that_wait_and_that_never_start():
    from hpcmem.kb.jobs.context import Facts
    from hpcmem.kb.recall.advice import pending_advice

    [waits] = pending_advice("77", "Priority", Facts({}, {}))
    assert "can start as it is" in waits["fix"] and "squeue -j 77 --start" in waits["fix"]
    [qos] = pending_advice("78", "QOSMaxWallDurationPerJobLimit", Facts({"qos": "short"}, {}))
    assert "never start" in qos["cause"] and "sacctmgr show qos short format=Name,MaxWall" in qos["fix"]
    env = {"partitions": {"debug": {"max_time_s": 120}, "main": {"max_time_s": None, "is_default": True}}}
    [part] = pending_advice("79", "PartitionTimeLimit", Facts({"req_time_s": 600, "partition": "debug"}, env))
    assert part["actions"][0] == {"type": "command", "command": "scontrol update JobId=79 TimeLimit=00:02:00"}
