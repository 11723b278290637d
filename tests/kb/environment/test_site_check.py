"""The submission checks (kb/environment/site_check.py) on the project's two sites: the sample
cluster `lab` (data/samples/env/cluster-2026-12: 92 nodes, 5 QOS, 6 users) and the real
single-node harness as Slurm printed it (data/samples/env/real-slurm-limits). Which request
gives which of Slurm's real messages on the harness is tested in tests/integration/
test_submission_checks.py; here, each limit on its own."""

from __future__ import annotations

import pytest

from hpcmem.ingest.partitions import read_partitions
from hpcmem.ingest.site_limits import (parse_sacctmgr_assoc, parse_sacctmgr_qos, parse_sacctmgr_users,
                                       parse_scontrol_nodes)
from hpcmem.kb.environment.site_check import check_request, kinds_for_message
from hpcmem.kb.environment.snapshot import EnvSnapshot
from hpcmem.kb.jobs.request import from_sbatch_args
from tests.conftest import SAMPLES

LAB = SAMPLES / "env" / "cluster-2026-12"
HARNESS = SAMPLES / "env" / "real-slurm-limits"


def site(folder, qos="sacctmgr-show-qos.txt", partitions_only=False) -> EnvSnapshot:
    def read(name):
        return (folder / name).read_text()

    partitions = read_partitions(read("scontrol-show-partition-oneliner.txt"))
    if partitions_only:
        return EnvSnapshot({}, partitions)
    return EnvSnapshot({}, partitions, nodes=parse_scontrol_nodes(read("scontrol-show-node-oneliner.txt")),
                       qos=parse_sacctmgr_qos(read(qos)),
                       associations=parse_sacctmgr_assoc(read("sacctmgr-show-assoc.txt")),
                       default_accounts=parse_sacctmgr_users(read("sacctmgr-show-user.txt")))


@pytest.fixture(scope="module")
def lab() -> EnvSnapshot:
    return site(LAB)


@pytest.fixture(scope="module")
def harness() -> EnvSnapshot:
    return site(HARNESS)


def kinds(result) -> list[str]:
    return [p.kind for p in result.problems]


def check(args: str, snapshot: EnvSnapshot, user: str = "alice"):
    return check_request(from_sbatch_args(args), snapshot, user)


def test_a_request_within_every_limit_fits(lab, harness):
    assert check("-p cpu -c 16 --mem=64G -t 12:00:00", lab).fits
    assert check("-p gpu --gres=gpu:a100:2 -c 16 --mem=200G -t 1-00:00:00", lab).fits
    assert check("--mem=1G -c 2 --gres=gpu:2", harness).fits  # the default partition, main
    assert check("-A teaching -p main", harness).fits


def test_memory_names_the_largest_node_by_how_much_and_the_partitions_that_have_it(lab):
    result = check("-p cpu --mem=900G", lab)
    [problem] = result.problems
    assert problem.kind == "memory_per_node"
    assert "largest node of partition cpu has 515000M" in problem.message and "short by 406600M" in problem.message
    assert problem.accepted[0] == "--mem=515000M" and "--partition=bigmem" in problem.accepted
    # bigmem nodes keep MemSpecLimit for the system: 2060000M less 16000M
    over = check("-p bigmem -q long --mem=2050000M", lab)
    assert kinds(over) == ["memory_per_node"] and over.problems[0].allowed == "2044000M"


def test_memory_per_cpu_counts_the_cpus_on_one_node(harness):
    result = check("--mem-per-cpu=1500M -c 2", harness)
    assert kinds(result) == ["memory_per_node"]
    assert result.problems[0].message.startswith("--mem-per-cpu=1500M x 2 CPUs = 3000M per node")
    assert result.problems[0].accepted == ["--mem-per-cpu=1000M"]  # asked the way the job asks


def test_cpus_per_node_and_in_all(harness, lab):
    assert "cpus_per_node" in kinds(check("-c 4", harness))
    assert "cpus_total" in kinds(check("-n 4", harness))  # 4 tasks on a 2-CPU partition
    # tasks may spread over nodes: 200 single-CPU tasks fit on cpu's 128-CPU nodes
    assert check("-p cpu -n 200 -N 2", lab).fits
    assert kinds(check("-p cpu -c 200", lab)) == ["cpus_per_node"]


def test_gres_name_type_and_count(lab, harness):
    assert kinds(check("--gres=fpga:1", harness)) == ["gres_unknown"]
    unknown = check("--gres=fpga:1", harness).problems[0]
    assert unknown.accepted == ["--gres=gpu:1"]  # the name the nodes really have
    assert kinds(check("--gres=gpu:3", harness)) == ["gres_count"]
    typed = check("-p gpu_test --gres=gpu:a100:1", lab)
    assert kinds(typed) == ["gres_type"] and typed.problems[0].accepted[0] == "--gres=gpu:v100:1"
    assert "--partition=gpu" in typed.problems[0].accepted  # where a100s are
    assert kinds(check("-p cpu --gres=gpu:1", lab)) == ["gres_count"]  # a GPU on a CPU partition
    assert check("-p cpu --gres=gpu:1", lab).fits_as_is[0].startswith("--partition=")


def test_no_single_node_has_it_all_at_once(lab):
    # partition gpu: 64-CPU a100 nodes and 40-CPU v100 nodes; 64 CPUs and a v100 are on no one node
    result = check("-p gpu --gres=gpu:v100:4 -c 64", lab)
    assert kinds(result) == ["node_combination"]


def test_time_against_partition_qos_and_association(lab, harness):
    part = check("-p debug -t 10", harness)
    assert kinds(part) == ["partition_max_time"] and part.problems[0].allowed == "00:02:00"
    assert "--partition=main" in part.problems[0].accepted
    qos = check("-q short -t 5", harness)
    assert kinds(qos) == ["qos_max_wall"] and qos.problems[0].accepted[0] == "--time=00:01:00"
    assert "by 00:04:00" in qos.problems[0].message
    assert kinds(check("-p cpu -t 1-12:00:00", lab, "carol")) == ["assoc_max_wall"]
    both = check("-p cpu -t 3-00:00:00", lab)
    assert set(kinds(both)) == {"partition_max_time", "qos_max_wall"}
    assert both.fits_as_is == ["--partition=bigmem --qos=long"]  # one change that takes it as it is


def test_accounts_and_qos_from_the_users_associations(lab, harness):
    assert kinds(check("-A teaching -p debug", harness)) == ["account_partition"]
    assert kinds(check("-A nosuch", harness)) == ["account_unknown"]
    assert kinds(check("-q bogus", harness)) == ["qos_unknown"]
    denied = check("-p gpu", lab, "bob")  # gpu's AllowAccounts leaves out physics
    assert kinds(denied) == ["account_partition"] and "--partition=cpu" in denied.problems[0].accepted
    assert kinds(check("-p bigmem -q short", lab)) == ["qos_partition"]  # bigmem allows long, normal
    assert kinds(check("-p debug -A physics -q normal", lab)) == ["qos_unknown"]  # alice/physics on debug: debug only
    erin = check("-p cpu -c 64", lab, "erin")
    assert kinds(erin) == ["assoc_max_tres"] and "cpu=64" in erin.problems[0].message


def test_partitions_that_do_not_exist_or_take_no_jobs(harness):
    result = check("-p nope", harness)
    assert kinds(result) == ["partition_unknown"] and "main" in result.problems[0].allowed


def test_facts_the_snapshot_lacks_are_undecided_never_guessed():
    partitions_only = site(LAB, partitions_only=True)
    result = check("-p cpu --mem=900G", partitions_only)
    assert result.fits  # nothing known breaks...
    assert {u.kind for u in result.undecided} == {"account", "nodes"}  # ...and what is not known is said
    assert any("sinfo -N -p cpu" in u.command for u in result.undecided)
    unknown_user = check("-p cpu", site(LAB), "zoe")
    assert [u.kind for u in unknown_user.undecided] == ["account"]
    assert "sacctmgr -P show assoc user=zoe" in unknown_user.undecided[0].command


@pytest.mark.parametrize("text, kind", [
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available", "memory_per_node"),
    ("sbatch: error: Memory specification can not be satisfied", "memory_per_node"),
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "account_partition"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
     "partition_max_time"),
    ("sbatch: error: QOSMaxWallDurationPerJobLimit", "qos_max_wall"),
    ("sbatch: error: Invalid generic resource (gres) specification", "gres_unknown"),
    ("sbatch: error: Batch job submission failed: Requested partition configuration not available now",
     "partition_down"),
])
def test_each_rejection_message_names_the_kinds_that_explain_it(text, kind):
    assert kind in kinds_for_message(text)


def test_text_that_is_no_rejection_names_no_kind():
    assert kinds_for_message("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1.batch") == ()


def test_mincpus_is_cpus_on_each_node(harness):
    assert kinds(check("--mincpus=4", harness)) == ["cpus_per_node"]
    assert check("--mincpus=2", harness).fits


def test_the_default_memory_of_a_partition_is_checked_when_no_mem_is_given():
    # the harness's debug partition as `SlurmLab(submission_limits=True)` configures it
    text = (HARNESS / "scontrol-show-partition-oneliner.txt").read_text().splitlines()
    debug = next(line for line in text if line.startswith("PartitionName=debug "))
    limited = debug.replace("DefMemPerNode=UNLIMITED", "DefMemPerCPU=600").replace(
        "MaxMemPerNode=UNLIMITED", "MaxMemPerNode=1000")
    base = site(HARNESS)
    partitions = read_partitions("\n".join(limited if line == debug else line for line in text))
    snapshot = EnvSnapshot({}, partitions, nodes=base.nodes, qos=base.qos, associations=base.associations,
                           default_accounts=base.default_accounts)
    two = check("-p debug -c 2", snapshot)
    assert kinds(two) == ["memory_per_node"]
    assert two.problems[0].message == ("no --mem given: partition debug gives DefMemPerCPU 600M x 2 CPUs per node "
                                       "= 1200M, more than its MaxMemPerNode 1000M")
    assert two.problems[0].accepted == ["--mem=1000M"]
    assert kinds(check("-p debug --exclusive", snapshot)) == ["memory_per_node"]  # both CPUs of the node
    assert check("-p debug -n 2", snapshot).fits  # Slurm counts one task per node here: 600M
    assert check("-p debug -c 2 --mem=1000M", snapshot).fits


def test_a_partition_for_some_groups_only_is_undecided_with_the_command():
    text = (HARNESS / "scontrol-show-partition-oneliner.txt").read_text()
    grouped = text.replace("PartitionName=debug AllowGroups=ALL", "PartitionName=debug AllowGroups=hpc-staff")
    assert grouped != text
    base = site(HARNESS)
    snapshot = EnvSnapshot({}, read_partitions(grouped), nodes=base.nodes, qos=base.qos,
                           associations=base.associations, default_accounts=base.default_accounts)
    result = check("-p debug", snapshot)
    assert result.fits and [(u.kind, u.command) for u in result.undecided] == [("partition_groups", "id -Gn alice")]
    assert "hpc-staff" in result.undecided[0].message
    assert not check("-p main", snapshot).undecided


def test_a_job_that_will_never_start_gets_the_limit_and_what_lets_it_start(harness):
    import json

    from hpcmem.kb.recall.submission_advice import pending_site_advice

    env = {**json.loads(harness.to_json()), "id": 3, "taken_at": "2026-12-05T04:00:00+00:00", "store": "cluster"}
    [wall] = pending_site_advice("77", "QOSMaxWallDurationPerJobLimit",
                                 {"partition": "main", "qos": "short", "time_limit_s": 300}, env, "alice")
    assert wall["check"]["kind"] == "qos_max_wall" and "QOS short's MaxWall 00:01:00" in wall["cause"]
    assert wall["cause"].startswith("Job 77 is pending and will never start as it is")
    assert "`scontrol update JobId=77 TimeLimit=00:01:00`" in wall["fix"] and "`--qos=normal`" in wall["fix"]
    assert wall["actions"] == [{"type": "command", "command": "scontrol update JobId=77 TimeLimit=00:01:00"}]
    assert wall["snapshot"]["id"] == 3
    [gpus] = pending_site_advice("78", "PartitionConfig", {"partition": "main", "gres": ["gpu:3"], "gpus": 3}, env,
                                 "alice")
    assert gpus["check"]["kind"] == "gres_count" and gpus["fix"].startswith("`scancel 78` and resubmit with `--gres=gpu:2`")
    # a reason that waits, or no site limits: nothing from the site
    assert pending_site_advice("79", "Priority", {"partition": "main"}, env, "alice") == []
    assert pending_site_advice("80", "PartitionConfig", {"gpus": 3}, {"partitions": env["partitions"]}, "alice") == []
