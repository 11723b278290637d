"""Slurm partition output -> PartitionInfo: value parsers, every layout, sniffing."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from hpcmem.ingest.partitions import (
    SINFO_FIELDS,
    PartitionInfo,
    format_time_limit,
    live_partitions,
    parse_memory_mb,
    parse_scontrol_partitions,
    parse_sinfo,
    parse_time_limit,
    read_partitions,
)
from hpcmem.kb.errors import InputError

CAT = shutil.which("cat")  # resolved before the tests empty PATH
ENV = Path(__file__).resolve().parents[2] / "data" / "samples" / "env"
REAL = ENV / "real-slurm" / "partitions"
FORMATS = ENV / "formats" / "partitions"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def transcript(path: Path) -> list[tuple[str, str]]:
    """(command, output) pairs of a capture transcript: '$ cmd', output, '# exit=N'."""
    steps: list[tuple[str, list[str]]] = []
    for line in read(path).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.startswith("# "):
            continue
        elif steps:
            steps[-1][1].append(line)
    return [(command, "\n".join(lines) + "\n") for command, lines in steps]


# ---------------------------------------------------------------------------
# Values


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("UNLIMITED", None),
        ("infinite", None),  # sinfo
        ("NONE", None),  # DefaultTime not set
        ("30", 1800),  # bare minutes, as in slurm.conf and `scontrol update`
        ("5:00", 300),  # sinfo prints M:SS below an hour
        ("30:00", 1800),
        ("8:00:00", 28800),  # sinfo H:MM:SS
        ("08:00:00", 28800),
        ("00:02:00", 120),
        ("2-12", 2 * 86400 + 12 * 3600),  # D-HH
        ("2-12:30", 2 * 86400 + 12 * 3600 + 30 * 60),  # D-HH:MM
        ("7-00:00:00", 604800),
        ("14-00:00:00", 1209600),
        ("1-12:00:00", 129600),
    ],
)
def test_parse_time_limit(text, seconds):
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1:2:3:4", "1-2:3:4:5", "12:75", "x-01:00:00"])
def test_parse_time_limit_rejects(text):
    with pytest.raises(InputError):
        parse_time_limit(text)


@pytest.mark.parametrize(
    "seconds, text",
    [
        (None, "UNLIMITED"),
        (120, "00:02:00"),
        (28800, "08:00:00"),
        (604800, "7-00:00:00"),
        (129600, "1-12:00:00"),
        (59, "00:00:59"),
    ],
)
def test_format_time_limit_is_scontrols_form(seconds, text):
    assert format_time_limit(seconds) == text
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize(
    "text, mb",
    [
        ("UNLIMITED", None),
        ("0", None),
        ("4315", 4315),
        ("2060000", 2060000),
        ("512M", 512),
        ("64G", 65536),
        ("1T", 1048576),
    ],
)
def test_parse_memory_mb(text, mb):
    assert parse_memory_mb(text) == mb


@pytest.mark.parametrize("text", ["", "lots", "-1", "12X"])
def test_parse_memory_mb_rejects(text):
    with pytest.raises(InputError):
        parse_memory_mb(text)


# ---------------------------------------------------------------------------
# Real captures (Slurm 22.05)


def test_real_scontrol_oneliner():
    partitions = read_partitions(read(REAL / "scontrol-show-partition.txt"))
    assert list(partitions) == ["debug", "main"]
    debug, main = partitions["debug"], partitions["main"]
    assert debug == PartitionInfo(
        name="debug",
        state="UP",
        max_time_s=120,
        default_time_s=None,
        max_mem_per_node_mb=None,
        max_mem_per_cpu_mb=None,
        def_mem_per_cpu_mb=None,
        def_mem_per_node_mb=None,
        max_nodes=None,
        total_cpus=2,
        total_nodes=1,
        tres={"cpu": "2", "mem": "2000M", "node": "1", "billing": "2"},
        allow_accounts=None,
        deny_accounts=(),
        allow_qos=None,
        deny_qos=(),
        allow_groups=None,
        qos=None,
        is_default=False,
        raw=debug.raw,
        source="scontrol",
    )
    assert debug.raw["MaxTime"] == "00:02:00" and debug.raw["Nodes"] == "localhost"
    assert len(debug.raw) == 33
    assert (main.is_default, main.max_time_s) == (True, None)


def test_real_sinfo():
    partitions = read_partitions(read(REAL / "sinfo.txt"))
    assert {
        n: (p.state, p.max_time_s, p.total_nodes, p.is_default) for n, p in partitions.items()
    } == {
        "debug": ("UP", 120, 1, False),
        "main": ("UP", None, 1, True),
    }
    assert partitions["main"].source == "sinfo"
    assert partitions["debug"].raw["NODELIST"] == "localhost"


def test_real_scontrol_update_create_delete_transcript():
    steps = transcript(REAL / "partition-changes-scontrol.txt")
    outputs = dict(steps)  # the last 'scontrol show partition -o' wins here
    assert steps[0][0] == "scontrol show partition -o"
    before = read_partitions(steps[0][1])
    assert before["debug"].max_time_s == 120
    assert read_partitions(outputs["scontrol show partition -o debug"])["debug"].max_time_s == 300
    gpu = read_partitions(outputs["scontrol show partition -o gpu"])["gpu"]
    assert (gpu.max_time_s, gpu.raw["MinNodes"], gpu.state) == (1800, "1", "UP")
    sinfo = read_partitions(outputs["sinfo"])
    assert {n: (p.state, p.max_time_s) for n, p in sinfo.items()} == {
        "debug": ("UP", 300),
        "main": ("DRAIN", None),
        "gpu": ("DOWN", 1800),
    }
    after = read_partitions(steps[-1][1])
    assert list(after) == ["debug", "main"] and after["debug"].max_time_s == 300


def test_real_reconfigure_transcript():
    shows = [
        out
        for cmd, out in transcript(REAL / "partition-changes-reconfigure.txt")
        if cmd.startswith("scontrol show")
    ]
    edited, restored = (read_partitions(text) for text in shows)
    assert {n: p.max_time_s for n, p in edited.items()} == {"debug": 180, "main": None, "gpu": 1800}
    assert {n: p.max_time_s for n, p in restored.items()} == {"debug": 120, "main": None}


# ---------------------------------------------------------------------------
# Own format samples


def test_multiline_records_without_blank_lines():
    partitions = read_partitions(read(FORMATS / "scontrol-multiline-unseparated.txt"))
    assert list(partitions) == ["short", "long"]
    short, long_ = partitions["short"], partitions["long"]
    assert (short.max_time_s, short.default_time_s, short.max_nodes, short.is_default) == (
        14400,
        900,
        4,
        True,
    )
    assert (long_.max_time_s, long_.default_time_s, long_.max_nodes) == (21 * 86400, None, None)
    assert (long_.total_cpus, long_.total_nodes, long_.raw["Nodes"]) == (384, 12, "node[13-24]")
    assert short.tres == {}  # this Slurm printed no TRES line


def test_multiline_records_with_blank_lines():
    partitions = read_partitions(read(FORMATS / "scontrol-multiline.txt"))
    compute, a40, maint = partitions["compute"], partitions["gpu-a40"], partitions["maint"]
    assert (
        compute.def_mem_per_cpu_mb,
        compute.max_mem_per_cpu_mb,
        compute.max_mem_per_node_mb,
    ) == (4000, 8000, None)
    assert (compute.max_time_s, compute.default_time_s, compute.max_nodes) == (3 * 86400, 7200, 32)
    assert a40.state == "DOWN"
    assert a40.allow_groups == ("hpc-gpu", "ml-lab")
    assert a40.allow_qos == ("gpu-long", "normal")
    assert a40.qos == "gpu-a40"
    assert (a40.max_mem_per_node_mb, a40.def_mem_per_node_mb) == (496000, None)
    assert a40.max_time_s == 36 * 3600
    assert a40.raw["JobDefaults"] == "DefCpuPerGPU=12"  # split at the first '=' only
    assert a40.tres["gres/gpu:a40"] == "24"
    assert (maint.state, maint.allow_accounts, maint.allow_groups) == (
        "INACTIVE",
        ("admin",),
        ("root",),
    )
    assert maint.raw["Hidden"] == "YES"


def test_oneliner_account_lists_licenses_and_null_values():
    partitions = read_partitions(read(FORMATS / "scontrol-oneliner-accounts-licenses.txt"))
    standard, longrun, burst = (
        partitions["standard"],
        partitions["longrun"],
        partitions["cloudburst"],
    )
    assert standard.allow_accounts is None  # only DenyAccounts printed: everyone else allowed
    assert standard.deny_accounts == ("ext0007", "ext0042", "stu2201")  # sorted, duplicate gone
    assert standard.raw["DenyAccounts"] == "ext0042,ext0007,stu2201,ext0007"
    assert standard.tres["license/matlab@lic"] == "200" and standard.tres["mem"] == "56250G"
    assert (standard.def_mem_per_cpu_mb, standard.max_mem_per_cpu_mb) == (3800, 7600)
    assert longrun.allow_accounts == ("astro0301", "clim0020", "geo0113")
    assert (longrun.allow_qos, longrun.deny_qos, longrun.qos) == (
        ("long", "normal"),
        ("debug",),
        "longrun",
    )
    assert (longrun.default_time_s, longrun.max_time_s) == (86400, 14 * 86400)
    assert longrun.raw["AllocNodes"] == "login[01-02]"
    assert (burst.tres, burst.raw["Nodes"], burst.total_nodes, burst.max_time_s) == (
        {},
        "(null)",
        0,
        None,
    )


def test_sinfo_rows_of_one_partition_are_merged():
    partitions = read_partitions(read(FORMATS / "sinfo-node-states.txt"))
    work = partitions["work"]
    assert (work.state, work.max_time_s, work.total_nodes, work.is_default) == (
        "UP",
        86400,
        29,
        True,
    )
    assert work.raw["STATE"] == "drain,alloc,idle"
    assert work.raw["NODELIST"] == "node[07-09],node[10-29],node[01-06]"
    assert (partitions["archive"].state, partitions["archive"].max_time_s) == ("INACTIVE", None)
    assert (partitions["bench"].state, partitions["bench"].max_time_s) == ("DOWN", 7200)
    assert work.total_cpus is None and work.max_mem_per_node_mb is None  # sinfo cannot say


def test_sinfo_summarize_counts_total_nodes():
    partitions = parse_sinfo(read(FORMATS / "sinfo-summarize.txt"))
    assert {n: (p.total_nodes, p.is_default, p.max_time_s) for n, p in partitions.items()} == {
        "work": (29, True, 86400),
        "quick": (2, False, 900),
    }


# ---------------------------------------------------------------------------
# The fictional cluster


def test_cluster_october_partitions():
    partitions = read_partitions(
        read(ENV / "cluster-2026-10" / "scontrol-show-partition-oneliner.txt")
    )
    assert list(partitions) == ["cpu", "gpu", "gpu_test", "bigmem", "debug"]
    cpu, gpu, test, bigmem, debug = partitions.values()
    assert (cpu.is_default, cpu.max_time_s, cpu.default_time_s, cpu.max_nodes) == (
        True,
        172800,
        3600,
        16,
    )
    assert (cpu.def_mem_per_cpu_mb, cpu.max_mem_per_node_mb, cpu.total_cpus) == (3900, None, 8192)
    assert gpu.allow_accounts == ("bio-struct", "chem-ml", "cs-vision", "phys-lattice")
    assert gpu.tres == {
        "cpu": "640",
        "mem": "5937.50G",
        "node": "16",
        "billing": "640",
        "gres/gpu": "64",
        "gres/gpu:v100": "64",
    }
    assert gpu.raw["JobDefaults"] == "DefCpuPerGPU=10,DefMemPerGPU=92000"
    assert (test.max_time_s, test.default_time_s, test.max_nodes) == (8 * 3600, 1800, 2)
    assert (bigmem.max_mem_per_node_mb, bigmem.def_mem_per_cpu_mb) == (2060000, 31000)
    assert (debug.deny_accounts, debug.allow_accounts, debug.qos) == (("guest-ext",), None, "debug")


@pytest.mark.parametrize("month", ["2026-10", "2026-11"])
def test_cluster_sinfo_agrees_with_scontrol(month):
    directory = ENV / f"cluster-{month}"
    scontrol = read_partitions(read(directory / "scontrol-show-partition-oneliner.txt"))
    sinfo = read_partitions(read(directory / "sinfo.txt"))
    assert list(sinfo) == list(scontrol)
    for name, partition in scontrol.items():
        for attribute in SINFO_FIELDS:
            assert getattr(sinfo[name], attribute) == getattr(partition, attribute), (
                name,
                attribute,
            )


# ---------------------------------------------------------------------------
# Sniffing and errors


@pytest.mark.parametrize(
    "path, source",
    [
        (REAL / "scontrol-show-partition.txt", "scontrol"),
        (REAL / "sinfo.txt", "sinfo"),
        (FORMATS / "scontrol-multiline.txt", "scontrol"),
        (FORMATS / "scontrol-multiline-unseparated.txt", "scontrol"),
        (FORMATS / "sinfo-summarize.txt", "sinfo"),
    ],
)
def test_read_partitions_sniffs_the_format(path, source):
    partitions = read_partitions(read(path))
    assert {p.source for p in partitions.values()} == {source}
    parser = parse_scontrol_partitions if source == "scontrol" else parse_sinfo
    assert partitions == parser(read(path))


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty partition listing"),
        (
            "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n",
            "not partition output",
        ),
        ("PartitionName=a MaxTime=01:00:00 oops\n", "is not a Key=Value pair"),
        ("MaxTime=01:00:00\n", "not partition output"),
        ("PartitionName=a\nPartitionName=a\n", "appears twice"),
        ("PartitionName=a MaxTime=forever\n", "not a Slurm time limit"),
        ("PartitionName=a DefMemPerCPU=lots\n", "not a Slurm memory size"),
        ("PartitionName=a TotalCPUs=many\n", "TotalCPUs='many' is not a number"),
        ("PARTITION AVAIL TIMELIMIT\ndebug up\n", "has 2 columns, the header 3"),
    ],
)
def test_read_partitions_rejects(text, message):
    with pytest.raises(InputError, match=message):
        read_partitions(text)


def test_scontrol_pair_before_any_partition():
    with pytest.raises(InputError, match="comes before any PartitionName"):
        parse_scontrol_partitions("   State=UP\nPartitionName=a\n")


def test_partition_dict_round_trip():
    for partition in read_partitions(
        read(FORMATS / "scontrol-oneliner-accounts-licenses.txt")
    ).values():
        assert PartitionInfo.from_dict(partition.to_dict()) == partition
    with pytest.raises(InputError):
        PartitionInfo.from_dict({"name": "x"})


# ---------------------------------------------------------------------------
# live_partitions runs scontrol; a stand-in plays its part


def make_script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bin_dir(monkeypatch, tmp_path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    return directory


def test_live_partitions_runs_scontrol_oneliner(bin_dir, tmp_path):
    sample = ENV / "cluster-2026-11" / "scontrol-show-partition-oneliner.txt"
    args = tmp_path / "args"
    make_script(bin_dir, "scontrol", f'echo "$@" > "{args}"\n{CAT} "{sample}"\n')
    partitions = live_partitions()
    assert args.read_text().split() == ["--oneliner", "show", "partition"]
    assert list(partitions) == ["cpu", "gpu", "gpu_test", "a100", "debug"]
    assert partitions["gpu_test"].max_time_s == 4 * 3600


def test_live_partitions_keeps_scontrols_error(bin_dir):
    make_script(
        bin_dir,
        "scontrol",
        'echo "scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2\n'
        'echo "slurm_load_partitions: Unable to contact slurm controller (connect failure)" >&2\n'
        "exit 1\n",
    )
    with pytest.raises(InputError, match=r"exit 1\): slurm_load_partitions: Unable to contact"):
        live_partitions()


def test_live_partitions_without_scontrol(bin_dir):
    with pytest.raises(InputError, match="scontrol not found"):
        live_partitions()
