"""Slurm node, QOS, association and user listings -> the site's limits (issue 27, item 1).

Real outputs from the project's harness (data/samples/env/real-slurm-limits/) are read with
exact values; the December sample site is checked for consistency with its own partitions
and for fitting every sample job script; stand-ins for scontrol and sacctmgr (shell scripts on
PATH printing real captures) play the live tools.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hpcmem.ingest.partitions import read_partitions
from hpcmem.ingest.site_limits import (
    live_associations,
    live_default_accounts,
    live_nodes,
    live_qos,
    node_availability,
    parse_sacctmgr_assoc,
    parse_sacctmgr_qos,
    parse_sacctmgr_users,
    parse_scontrol_nodes,
)
from hpcmem.kb.environment.site import Association, NodeInfo, QosInfo, gres_units
from hpcmem.kb.errors import InputError
from hpcmem.kb.slurm_units import parse_size_mb
from tests.conftest import SAMPLES
from tests.ingest.test_partitions import bin_dir, make_script  # noqa: F401 - bin_dir is a fixture

CAT = shutil.which("cat")  # resolved before the tests empty PATH
ENV = SAMPLES / "env"
REAL = ENV / "real-slurm-limits"
SITE = ENV / "cluster-2026-12"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------
# scontrol show node: the real captures


def test_real_node_oneliner_exact_values():
    nodes = parse_scontrol_nodes(read(REAL / "scontrol-show-node-oneliner.txt"))
    assert list(nodes) == ["localhost"]
    node = nodes["localhost"]
    assert (node.cpus, node.real_memory_mb, node.mem_spec_limit_mb, node.job_memory_mb) == (2, 2000, None, 2000)
    assert (node.sockets, node.cores_per_socket, node.threads_per_core) == (2, 1, 1)
    assert node.gres == ("gpu:2",) and gres_units(node.gres) == [("gpu", None, 2)]
    assert node.features == ()  # AvailableFeatures=(null)
    assert node.partitions == ("debug", "main")
    assert node.state == "UP"  # IDLE: takes jobs
    # a value with spaces is read whole; what changes while jobs run is not kept
    assert node.raw["OS"] == "Linux 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0"
    assert node.raw["CfgTRES"] == "cpu=2,mem=2000M,billing=2,gres/gpu=2"
    assert not {"CPULoad", "FreeMem", "AllocMem", "CPUAlloc", "State", "LastBusyTime", "BootTime"} & set(node.raw)


@pytest.mark.parametrize("name", ["scontrol-show-node.txt", "scontrol-show-node-drained.txt",
                                  "scontrol-show-node-oneliner-drained.txt"])
def test_both_layouts_give_the_same_node(name):
    oneliner = parse_scontrol_nodes(read(REAL / "scontrol-show-node-oneliner.txt"))["localhost"]
    node = parse_scontrol_nodes(read(REAL / name))["localhost"]
    drained = "drained" in name
    assert node.state == ("DRAIN" if drained else "UP")
    raw = dict(node.raw)
    if drained:
        # free text with '=' inside, to the end of its line (multi-line) or of the record
        assert raw.pop("Reason") == "disk check failed: exit=1 on /scratch [root@2026-12-05T04:07:35]"
    assert raw == oneliner.raw
    assert (node.cpus, node.real_memory_mb, node.gres, node.partitions) == (2, 2000, ("gpu:2",), ("debug", "main"))


@pytest.mark.parametrize("printed, availability", [
    ("IDLE", "UP"), ("MIXED", "UP"), ("ALLOCATED", "UP"), ("IDLE+POWERED_DOWN", "UP"), ("COMPLETING", "UP"),
    ("IDLE+DRAIN", "DRAIN"), ("MIXED+DRAIN", "DRAIN"), ("DOWN+DRAIN+NOT_RESPONDING", "DOWN+DRAIN+NOT_RESPONDING"),
    ("DOWN*", "DOWN"), ("FUTURE", "FUTURE"), ("IDLE+CLOUD+POWERED_DOWN", "CLOUD"), ("", None), (None, None),
])
def test_node_availability_drops_how_busy_a_node_is(printed, availability):
    assert node_availability(printed) == availability


def test_a_busy_node_listing_gives_the_same_nodes_as_an_idle_one():
    """An hourly snapshot must not change because jobs started: load, memory in use and the
    IDLE/MIXED/ALLOCATED state are not part of a node's record."""
    idle = read(REAL / "scontrol-show-node-oneliner.txt")
    busy = (idle.replace("CPUAlloc=0", "CPUAlloc=2").replace("CPULoad=0.64", "CPULoad=1.98")
            .replace("AllocMem=0", "AllocMem=1800").replace("FreeMem=15266", "FreeMem=201")
            .replace("State=IDLE", "State=ALLOCATED").replace("AllocTRES= ", "AllocTRES=cpu=2,mem=1800M ")
            .replace("LastBusyTime=2026-12-05T04:07:23", "LastBusyTime=2026-12-05T05:00:00"))
    assert busy != idle
    assert parse_scontrol_nodes(busy) == parse_scontrol_nodes(idle)


# ---------------------------------------------------------------------------
# scontrol show node: the multi-line layout and hand-made corner cases


MULTILINE = """\
NodeName=gpu-a01 Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.01
   AvailableFeatures=a100,nvlink,zen3
   ActiveFeatures=a100,nvlink,zen3
   Gres=gpu:a100:4(S:0-1),shard:a100:16(S:0,1)
   NodeAddr=gpu-a01 NodeHostName=gpu-a01 Version=23.02.7
   OS=Linux 5.14.0-362.13.1.el9_3.x86_64 #1 SMP PREEMPT_DYNAMIC Wed Dec 13 14:07:45 EST 2023
   RealMemory=515000 AllocMem=0 FreeMem=500123 Sockets=2 Boards=1
   CoreSpecCount=2 MemSpecLimit=8192
   State=IDLE+DRAIN ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu,gpu_long
   BootTime=2026-11-28T06:12:03 SlurmdStartTime=2026-11-28T06:14:33
   CfgTRES=cpu=64,mem=515000M,billing=64,gres/gpu=4
   AllocTRES=
   Comment=rack 12 (a = b)
   Reason=NHC: check_hw_mem_free: free=1G < 2G [root@2026-12-01T10:00:00]
NodeName=cn-future CoresPerSocket=1
   CPUTot=1 RealMemory=1 Sockets=1 ThreadsPerCore=1 State=FUTURE
   Gres=(null) AvailableFeatures=(null) Partitions=(null)
"""


def test_multiline_records_without_blank_lines():
    nodes = parse_scontrol_nodes(MULTILINE)
    assert list(nodes) == ["gpu-a01", "cn-future"]
    gpu = nodes["gpu-a01"]
    assert gpu == NodeInfo(
        name="gpu-a01", cpus=64, real_memory_mb=515000, mem_spec_limit_mb=8192, sockets=2, cores_per_socket=32,
        threads_per_core=2, gres=("gpu:a100:4", "shard:a100:16"), features=("a100", "nvlink", "zen3"),
        partitions=("gpu", "gpu_long"), state="DRAIN", raw=gpu.raw)
    assert gpu.job_memory_mb == 515000 - 8192
    assert gpu.raw["OS"] == "Linux 5.14.0-362.13.1.el9_3.x86_64 #1 SMP PREEMPT_DYNAMIC Wed Dec 13 14:07:45 EST 2023"
    assert gpu.raw["Comment"] == "rack 12 (a = b)"
    assert gpu.raw["Reason"] == "NHC: check_hw_mem_free: free=1G < 2G [root@2026-12-01T10:00:00]"
    assert gpu.raw["CoreSpecCount"] == "2"
    future = nodes["cn-future"]
    assert (future.gres, future.features, future.partitions, future.state) == ((), (), (), "FUTURE")


def test_oneliner_reason_then_comment_are_both_free_text():
    line = ("NodeName=n1 CPUTot=4 RealMemory=1000 State=DOWN Reason=bad dimm=B2 [root@2026-12-01T10:00:00] "
            "Comment=call vendor: case=77\n")
    node = parse_scontrol_nodes(line)["n1"]
    assert node.raw["Reason"] == "bad dimm=B2 [root@2026-12-01T10:00:00]"
    assert node.raw["Comment"] == "call vendor: case=77"
    assert node.state == "DOWN"


@pytest.mark.parametrize("text, message", [
    ("CPUTot=4 NodeName=n1\n", "line 1: CPUTot= comes before any NodeName="),
    ("NodeName= CPUTot=4\n", "line 1: NodeName= has no name"),
    ("NodeName=n1 CPUTot=4\nNodeName=n1 CPUTot=8\n", "line 2: node 'n1' appears twice"),
    ("NodeName=n1 CPUTot=four\n", "line 1: node n1: CPUTot='four' is not a number"),
    ("NodeName=n1 RealMemory=lots\n", "line 1: node n1: RealMemory='lots' is not a memory size"),
    ("NodeName=n1\n   garbage here\n", "line 2: 'garbage' is not a Key=Value pair of scontrol"),
    ("PartitionName=main Nodes=n1\n", "line 1: PartitionName= comes before any NodeName="),
    ("", "empty node listing"),
    ("No nodes in the system\n", "empty node listing"),
])
def test_bad_node_listings_are_one_line_errors(text, message):
    with pytest.raises(InputError) as caught:
        parse_scontrol_nodes(text)
    assert str(caught.value) == message


def test_an_empty_node_listing_is_accepted_when_allowed():
    assert parse_scontrol_nodes("", allow_empty=True) == {}
    assert parse_scontrol_nodes("No nodes in the system\n", allow_empty=True) == {}


# ---------------------------------------------------------------------------
# sacctmgr show qos


def test_real_qos_exact_values():
    qos = parse_sacctmgr_qos(read(REAL / "sacctmgr-show-qos.txt"))
    assert list(qos) == ["normal", "short", "urgent"]
    assert qos["short"] == QosInfo(name="short", max_wall_s=60, flags=("DenyOnLimit",), raw=qos["short"].raw)
    assert qos["normal"] == QosInfo(name="normal", raw=qos["normal"].raw)  # no limit at all
    assert qos["urgent"].raw["Preempt"] == "normal" and qos["urgent"].raw["PreemptMode"] == "cancel"
    assert len(qos["normal"].raw) == 26


def test_parsable_with_trailing_bar_reads_the_same():
    assert parse_sacctmgr_qos(read(REAL / "sacctmgr-p-show-qos.txt")) == parse_sacctmgr_qos(
        read(REAL / "sacctmgr-show-qos.txt"))


def test_qos_without_header_is_refused_with_the_command_to_run():
    with pytest.raises(InputError) as caught:
        parse_sacctmgr_qos(read(REAL / "sacctmgr-show-qos-noheader.txt"))
    assert str(caught.value).startswith("line 1: not a `sacctmgr show qos -P` header: 'normal|0|00:00:00")
    assert "(no Name)" in str(caught.value) and "no -n" in caught.value.hint


def test_site_qos_limits():
    qos = parse_sacctmgr_qos(read(SITE / "sacctmgr-show-qos.txt"))
    assert {name: q.max_wall_s for name, q in qos.items()} == {
        "normal": 2 * 86400, "long": 7 * 86400, "short": 4 * 3600, "debug": 1800, "scavenger": 86400}
    assert qos["normal"].max_tres_per_job == {"cpu": "2048", "gres/gpu": "8"}
    assert qos["normal"].max_tres_per_user == {"cpu": "4096", "gres/gpu": "16"}
    assert (qos["debug"].max_jobs_per_user, qos["debug"].max_submit_per_user) == (2, 4)
    assert qos["debug"].max_tres_per_job == {"cpu": "256", "node": "2"}
    assert qos["scavenger"].flags == ("NoReserve",)


@pytest.mark.parametrize("text, message", [
    ("", "empty QOS listing"),
    ("Name|MaxWall\n", "no QOS in the listing"),
    ("Name|MaxWall\nnormal|forever\n", "line 2: MaxWall='forever' is not a Slurm time limit"),
    ("Name|MaxWall\nnormal|1:00:00|x\n", "line 2: 3 cells, the header has 2: 'normal|1:00:00|x'"),
    ("Name|MaxTRES\nnormal|cpu\n", "line 2: MaxTRES='cpu' is not a TRES list"),
    ("Name|MaxJobsPU\nnormal|ten\n", "line 2: MaxJobsPU='ten' is not a number"),
    ("Name|MaxWall\nnormal|\nnormal|\n", "line 3: QOS 'normal' appears twice"),
    ("Name|MaxWall\n|1:00:00\n", "line 2: a QOS without a name"),
    ("Name|Name\nx|y\n", "line 1: a column appears twice in the header"),
])
def test_bad_qos_listings_are_one_line_errors(text, message):
    with pytest.raises(InputError) as caught:
        parse_sacctmgr_qos(text)
    assert str(caught.value) == message


# ---------------------------------------------------------------------------
# sacctmgr show assoc


def test_real_associations_exact_values():
    assocs = parse_sacctmgr_assoc(read(REAL / "sacctmgr-show-assoc.txt"))
    assert [(a.account, a.user, a.partition) for a in assocs] == [
        ("root", None, None), ("root", "root", None), ("research", None, None), ("research", "alice", None),
        ("research", "bob", None), ("research", "root", None), ("teaching", None, None),
        ("teaching", "alice", "main")]
    alice = assocs[3]
    assert alice == Association(cluster="hpcmem", account="research", user="alice", partition=None,
                                qos=("normal", "short", "urgent"), default_qos="normal", raw=alice.raw)
    teaching = assocs[7]
    assert (teaching.qos, teaching.default_qos, teaching.max_wall_s) == (("normal",), None, None)


def test_one_users_associations_and_a_format_subset():
    mine = parse_sacctmgr_assoc(read(REAL / "sacctmgr-show-assoc-user-alice.txt"))
    assert [(a.account, a.partition) for a in mine] == [("teaching", "main"), ("research", None)]
    subset = parse_sacctmgr_assoc(read(REAL / "sacctmgr-show-assoc-format.txt"))
    full = parse_sacctmgr_assoc(read(REAL / "sacctmgr-show-assoc.txt"))
    # no Cluster column: None; everything else the same as the default columns say
    assert [(a.cluster, a.account, a.user, a.partition, a.qos, a.default_qos) for a in subset] == [
        (None, a.account, a.user, a.partition, a.qos, a.default_qos) for a in full]


def test_site_associations():
    assocs = parse_sacctmgr_assoc(read(SITE / "sacctmgr-show-assoc.txt"))
    alice = {(a.account, a.partition): a for a in assocs if a.user == "alice"}
    assert sorted(alice, key=str) == [("physics", "cpu"), ("physics", "debug"), ("research", None)]
    assert alice["research", None].qos == ("debug", "long", "normal", "scavenger", "short")
    assert alice["physics", "debug"].default_qos == "debug"
    [carol] = [a for a in assocs if a.user == "carol"]
    assert carol.max_wall_s == 86400
    [erin] = [a for a in assocs if a.user == "erin"]
    assert erin.max_tres_per_job == {"cpu": "32", "gres/gpu": "1"}


@pytest.mark.parametrize("text, message", [
    ("Cluster|User\nlab|alice\n", "line 1: not a `sacctmgr show assoc -P` header: 'Cluster|User' (no Account)"),
    ("Account|User\n|alice\n", "line 2: an association without an account"),
    ("Account|User|MaxWall\nresearch|alice|2 days\n", "line 2: MaxWall='2 days' is not a Slurm time limit"),
    ("Account|User|Partition\nresearch|alice|\nresearch|alice|\n",
     "line 3: association alice/research appears twice (first on line 2)"),
    ("Account|User\n", "no association in the listing"),
])
def test_bad_association_listings_are_one_line_errors(text, message):
    with pytest.raises(InputError) as caught:
        parse_sacctmgr_assoc(text)
    assert str(caught.value) == message


# ---------------------------------------------------------------------------
# sacctmgr show user


def test_default_accounts():
    assert parse_sacctmgr_users(read(REAL / "sacctmgr-show-user.txt")) == {
        "alice": "research", "bob": "research", "root": "root"}
    assert parse_sacctmgr_users(read(SITE / "sacctmgr-show-user.txt")) == {
        "alice": "research", "bob": "physics", "carol": "chem-ml", "dmitri": "research", "erin": "guest-ext",
        "root": "root"}


def test_users_with_associations_listed_per_row():
    text = ("User|Def Acct|Admin|Cluster|Account|Partition\nalice|research|None|lab|research|\n"
            "alice|research|None|lab|physics|cpu\nnewbie||None|||\n")
    assert parse_sacctmgr_users(text) == {"alice": "research"}  # newbie has no default account yet
    with pytest.raises(InputError, match="line 3: user 'alice' has two default accounts"):
        parse_sacctmgr_users(text.replace("alice|research|None|lab|physics", "alice|physics|None|lab|physics"))
    with pytest.raises(InputError, match="no Def Acct"):
        parse_sacctmgr_users("User|Admin\nalice|None\n")


# ---------------------------------------------------------------------------
# The December sample site agrees with its partitions and takes every sample job script


def site_nodes() -> dict[str, NodeInfo]:
    return parse_scontrol_nodes(read(SITE / "scontrol-show-node-oneliner.txt"))


def test_every_partition_of_the_site_has_the_nodes_its_totals_say():
    nodes, partitions = site_nodes(), read_partitions(read(SITE / "scontrol-show-partition-oneliner.txt"))
    assert len(nodes) == 92
    for name, partition in partitions.items():
        members = [n for n in nodes.values() if name in n.partitions]
        assert len(members) == partition.total_nodes, name
        assert sum(n.cpus for n in members) == partition.total_cpus, name
        assert sum(n.real_memory_mb for n in members) == round(parse_size_mb(partition.tres["mem"])), name
        gpus = sum(count for n in members for gres, _, count in gres_units(n.gres) if gres == "gpu")
        assert gpus == int(partition.tres.get("gres/gpu", 0)), name
    assert all(n.partitions and set(n.partitions) <= set(partitions) for n in nodes.values())


def test_site_node_values():
    nodes = site_nodes()
    assert (nodes["cn001"].cpus, nodes["cn001"].real_memory_mb, nodes["cn001"].gres) == (128, 515000, ())
    assert nodes["gn015"].partitions == ("gpu", "gpu_test") and nodes["gn015"].gres == ("gpu:v100:4",)
    assert nodes["ga01"].gres == ("gpu:a100:8",) and nodes["ga01"].partitions == ("a100", "gpu")
    assert nodes["bm01"].job_memory_mb == 2060000 - 16000
    assert nodes["cn017"].state == "DOWN+DRAIN+NOT_RESPONDING" and nodes["cn041"].state == "DRAIN"
    assert nodes["cn041"].raw["Reason"] == "replace DIMM B2 (ticket 4471) [root@2026-12-01T08:03:55]"
    assert {n.state for n in nodes.values()} == {"UP", "DRAIN", "DOWN+DRAIN+NOT_RESPONDING"}


def test_every_sample_job_script_fits_the_site_for_the_sample_user():
    """What data/samples/env/README.md promises: alice's requests, as the scripts ask them."""
    from hpcmem.kb.environment.snapshot import EnvSnapshot
    from hpcmem.kb.jobs.request import from_script
    from hpcmem.kb.environment.site_check import check_request

    snapshot = EnvSnapshot(
        {}, read_partitions(read(SITE / "scontrol-show-partition-oneliner.txt")), nodes=site_nodes(),
        qos=parse_sacctmgr_qos(read(SITE / "sacctmgr-show-qos.txt")),
        associations=parse_sacctmgr_assoc(read(SITE / "sacctmgr-show-assoc.txt")),
        default_accounts=parse_sacctmgr_users(read(SITE / "sacctmgr-show-user.txt")))
    scripts = sorted((SAMPLES / "jobs").glob("*.sh"))
    assert len(scripts) >= 7
    for script in scripts:
        result = check_request(from_script(read(script)), snapshot, "alice")
        assert result.fits, (script.name, [p.as_dict() for p in result.problems])
    # and the site refuses what the README says it refuses
    bigmem = from_script(read(SAMPLES / "jobs" / "bigmem-assembly.sh"))
    assert not check_request(bigmem, snapshot, "dmitri").fits  # no QOS long
    assert not check_request(from_script(read(SAMPLES / "jobs" / "cuda-swap.sh")), snapshot, "bob").fits


# ---------------------------------------------------------------------------
# Live: scontrol and sacctmgr stand-ins print real captures


def test_live_readers_run_the_commands_with_their_arguments(bin_dir, tmp_path):
    args = tmp_path / "args"
    make_script(bin_dir, "scontrol", f'echo "$@" >> "{args}"\n{CAT} "{REAL / "scontrol-show-node-oneliner.txt"}"\n')
    make_script(bin_dir, "sacctmgr", f'echo "$@" >> "{args}"\n'
                f'case "$*" in\n'
                f'  *qos*) {CAT} "{REAL / "sacctmgr-show-qos.txt"}" ;;\n'
                f'  *user=alice*) {CAT} "{REAL / "sacctmgr-show-assoc-user-alice.txt"}" ;;\n'
                f'  *assoc*) {CAT} "{REAL / "sacctmgr-show-assoc.txt"}" ;;\n'
                f'  *user*) {CAT} "{REAL / "sacctmgr-show-user.txt"}" ;;\n'
                f'esac\n')
    assert list(live_nodes()) == ["localhost"]
    assert list(live_qos()) == ["normal", "short", "urgent"]
    assert len(live_associations()) == 8
    assert [a.account for a in live_associations("alice")] == ["teaching", "research"]
    assert live_default_accounts() == {"alice": "research", "bob": "research", "root": "root"}
    assert live_default_accounts("alice") == {"alice": "research", "bob": "research", "root": "root"}
    assert args.read_text().splitlines() == [
        "--oneliner --future show node", "-P show qos", "-P show assoc", "-P show assoc user=alice", "-P show user",
        "-P show user alice"]


def test_live_readers_keep_the_last_line_of_a_failure(bin_dir):
    make_script(bin_dir, "sacctmgr", f'{CAT} "{REAL / "sacctmgr-unreachable.stderr.txt"}" >&2\nexit 1\n')
    make_script(bin_dir, "scontrol", f'{CAT} "{REAL / "scontrol-unreachable.stderr.txt"}" >&2\nexit 1\n')
    for reader in (live_qos, live_associations, live_default_accounts):
        with pytest.raises(InputError) as caught:
            reader()
        assert str(caught.value).endswith("failed (exit 1): sacctmgr: error: Sending PersistInit msg: "
                                          "Connection refused")
    with pytest.raises(InputError, match=r"^scontrol show node failed \(exit 1\): slurm_load_node error: "
                                         r"Unable to contact slurm controller \(connect failure\)$"):
        live_nodes()


def test_live_readers_without_the_tools(bin_dir):
    with pytest.raises(InputError, match="^sacctmgr not found$"):
        live_qos()
    with pytest.raises(InputError, match="^scontrol not found$"):
        live_nodes()


def test_a_user_without_associations_is_named(bin_dir, tmp_path):
    header_only = tmp_path / "assoc-header.txt"  # what sacctmgr prints for a user it does not know
    header_only.write_text(read(REAL / "sacctmgr-show-assoc.txt").splitlines()[0] + "\n")
    make_script(bin_dir, "sacctmgr", f'{CAT} "{header_only}"\n')
    with pytest.raises(InputError, match="^user nobody has no association in Slurm's accounting$"):
        live_associations("nobody")
