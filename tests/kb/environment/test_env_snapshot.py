"""EnvSnapshot JSON form and hash, and the diff of two snapshots."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hpcmem.kb.environment.snapshot import (
    DefaultChange,
    EnvSnapshot,
    ModuleVersionChange,
    PartitionLimitChange,
    PartitionPresenceChange,
    SnapshotDiff,
    diff_snapshots,
)
from hpcmem.ingest.lmod import ModuleInfo, read_modules
from hpcmem.ingest.partitions import read_partitions
from hpcmem.kb.errors import InputError

ENV = Path(__file__).resolve().parents[3] / "data" / "samples" / "env"
REAL = ENV / "real-slurm"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def cluster(
    month: str,
    modules: str = "spider-json.json",
    partitions: str = "scontrol-show-partition-oneliner.txt",
) -> EnvSnapshot:
    directory = ENV / f"cluster-{month}"
    return EnvSnapshot(
        read_modules(read(directory / modules)), read_partitions(read(directory / partitions))
    )


def transcript_outputs(path: Path, command: str) -> list[str]:
    """Outputs of every `command` in a '$ cmd' / output / '# exit=N' transcript."""
    outputs, current = [], None
    for line in read(path).splitlines():
        if line.startswith("$ "):
            current = [] if line[2:] == command else None
            if current is not None:
                outputs.append(current)
        elif not line.startswith("# ") and current is not None:
            current.append(line)
    return ["\n".join(lines) + "\n" for lines in outputs]


# ---------------------------------------------------------------------------
# The fictional cluster, October -> November

EXPECTED_CLUSTER_DIFF = [
    "module openmpi/5.0.3 added",
    "module cuda/11.8 removed",
    "module gcc: default 12.2.0 -> 13.2.0",
    "module openmpi: default 4.1.6 -> 5.0.3",
    "partition a100 added",
    "partition bigmem removed",
    "partition gpu: AllowAccounts bio-struct,chem-ml,cs-vision,phys-lattice -> "
    "astro-sim,chem-ml,cs-vision,phys-lattice (+astro-sim -bio-struct)",
    "partition gpu_test: MaxTime 08:00:00 -> 04:00:00",
]


def test_cluster_diff_describes_every_change():
    diff = diff_snapshots(cluster("2026-10"), cluster("2026-11"))
    assert diff.describe() == EXPECTED_CLUSTER_DIFF


def test_cluster_diff_structure():
    diff = diff_snapshots(cluster("2026-10"), cluster("2026-11"))
    assert diff.modules_removed == (ModuleVersionChange("cuda", "11.8", "removed"),)
    assert diff.modules_added == (ModuleVersionChange("openmpi", "5.0.3", "added"),)
    assert diff.defaults_changed == (
        DefaultChange("gcc", "12.2.0", "13.2.0", True, True),
        DefaultChange("openmpi", "4.1.6", "5.0.3", False, False),
    )
    assert diff.partitions_added == (PartitionPresenceChange("a100", "added"),)
    assert diff.partitions_removed == (PartitionPresenceChange("bigmem", "removed"),)
    assert diff.partition_changes[1] == PartitionLimitChange(
        "gpu_test", "MaxTime", "08:00:00", "04:00:00"
    )
    assert diff.partition_changes[0].field == "AllowAccounts"


def test_cluster_diff_backwards_is_the_mirror_image():
    diff = diff_snapshots(cluster("2026-11"), cluster("2026-10"))
    assert diff.describe() == [
        "module cuda/11.8 added",
        "module openmpi/5.0.3 removed",
        "module gcc: default 13.2.0 -> 12.2.0",
        "module openmpi: default 5.0.3 -> 4.1.6",
        "partition bigmem added",
        "partition a100 removed",
        "partition gpu: AllowAccounts astro-sim,chem-ml,cs-vision,phys-lattice -> "
        "bio-struct,chem-ml,cs-vision,phys-lattice (+bio-struct -astro-sim)",
        "partition gpu_test: MaxTime 04:00:00 -> 08:00:00",
    ]


def test_sinfo_snapshots_compare_only_what_sinfo_knows():
    by_sinfo = diff_snapshots(
        cluster("2026-10", partitions="sinfo.txt"), cluster("2026-11", partitions="sinfo.txt")
    )
    assert [c.describe() for c in by_sinfo.changes() if "partition" in c.describe()] == [
        "partition a100 added",
        "partition bigmem removed",
        "partition gpu_test: MaxTime 08:00:00 -> 04:00:00",
    ]  # sinfo has no account lists: the gpu AllowAccounts change is invisible
    # The same month through scontrol and through sinfo: no partition change at all.
    mixed = diff_snapshots(cluster("2026-10"), cluster("2026-10", partitions="sinfo.txt"))
    assert not mixed


def test_module_source_change_alone_changes_nothing_when_defaults_are_visible():
    # spider-json vs `module avail` of the same month: the (D) on gcc/12.2.0 is
    # below the highest version, so avail knows it is marked too.
    assert not diff_snapshots(cluster("2026-10"), cluster("2026-10", modules="module-avail.txt"))


def test_identical_snapshots_have_an_empty_diff():
    diff = diff_snapshots(cluster("2026-11"), cluster("2026-11"))
    assert not diff and diff.describe() == [] and diff == SnapshotDiff()
    assert json.loads(diff.to_json()) == {
        "defaults_changed": [],
        "modules_added": [],
        "modules_removed": [],
        "partition_changes": [],
        "partitions_added": [],
        "partitions_removed": [],
    }


def test_diff_json_is_stable_and_sorted():
    text = diff_snapshots(cluster("2026-10"), cluster("2026-11")).to_json()
    assert text == diff_snapshots(cluster("2026-10"), cluster("2026-11")).to_json()
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["partition_changes"][1] == {
        "field": "MaxTime",
        "new": "04:00:00",
        "old": "08:00:00",
        "partition": "gpu_test",
    }
    assert list(data["defaults_changed"][0]) == sorted(data["defaults_changed"][0])
    assert data["modules_removed"] == [{"change": "removed", "name": "cuda", "version": "11.8"}]


# ---------------------------------------------------------------------------
# Real captures


@pytest.mark.parametrize(
    "v1, v2",
    [
        ("spider-json.json", "spider-json.v2.json"),
        ("spider-jsonSoftwarePage.json", "spider-jsonSoftwarePage.v2.json"),
    ],
)
def test_real_lmod_tree_v1_to_v2(v1, v2):
    old = EnvSnapshot(read_modules(read(REAL / "lmod" / v1)), {})
    new = EnvSnapshot(read_modules(read(REAL / "lmod" / v2)), {})
    assert diff_snapshots(old, new).describe() == [
        "module gcc/14.1.0 added",
        "module cuda/11.8 removed",
        "module gcc: default 13.1.0 -> 12.2.0",
    ]


def test_real_lmod_terse_v1_to_v2_sees_versions_but_guesses_the_default():
    old = EnvSnapshot(read_modules(read(REAL / "lmod" / "module-t-avail.txt")), {})
    new = EnvSnapshot(read_modules(read(REAL / "lmod" / "module-t-avail.v2.txt")), {})
    diff = diff_snapshots(old, new)
    assert [c.describe() for c in diff.modules_added + diff.modules_removed] == [
        "module gcc/14.1.0 added",
        "module cuda/11.8 removed",
    ]
    # Lmod 8.6 -t avail hides the .modulerc default: the guess is the highest version.
    assert diff.defaults_changed == (DefaultChange("gcc", "13.1.0", "14.1.0", False, False),)


def test_real_partition_changes_by_scontrol_update_create_delete():
    path = REAL / "partitions" / "partition-changes-scontrol.txt"
    first, last = (
        EnvSnapshot({}, read_partitions(t))
        for t in transcript_outputs(path, "scontrol show partition -o")
    )
    assert diff_snapshots(first, last).describe() == [
        "partition debug: MaxTime 00:02:00 -> 00:05:00"
    ]
    gpu_output = transcript_outputs(path, "scontrol show partition -o gpu")[0]
    with_gpu = EnvSnapshot({}, {**last.partitions, **read_partitions(gpu_output)})
    assert diff_snapshots(last, with_gpu).describe() == ["partition gpu added"]
    assert diff_snapshots(with_gpu, last).describe() == ["partition gpu removed"]


def test_real_partition_changes_by_reconfigure():
    path = REAL / "partitions" / "partition-changes-reconfigure.txt"
    edited, restored = (
        EnvSnapshot({}, read_partitions(t))
        for t in transcript_outputs(path, "scontrol show partition -o")
    )
    before = EnvSnapshot(
        {}, read_partitions(read(REAL / "partitions" / "scontrol-show-partition.txt"))
    )
    assert diff_snapshots(before, edited).describe() == [
        "partition gpu added",
        "partition debug: MaxTime 00:02:00 -> 00:03:00",
    ]
    assert not diff_snapshots(before, restored)


def test_real_sinfo_state_changes():
    path = REAL / "partitions" / "partition-changes-scontrol.txt"
    during = EnvSnapshot({}, read_partitions(transcript_outputs(path, "sinfo")[0]))
    before = EnvSnapshot({}, read_partitions(read(REAL / "partitions" / "sinfo.txt")))
    assert diff_snapshots(before, during).describe() == [
        "partition gpu added",
        "partition debug: MaxTime 00:02:00 -> 00:05:00",
        "partition main: State UP -> DRAIN",
    ]


# ---------------------------------------------------------------------------
# Field-level diffs built from a known partition


def base_partition():
    return read_partitions(read(ENV / "cluster-2026-10" / "scontrol-show-partition-oneliner.txt"))[
        "gpu"
    ]


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"default_time_s": None}, "partition gpu: DefaultTime 01:00:00 -> NONE"),
        ({"max_time_s": None}, "partition gpu: MaxTime 2-00:00:00 -> UNLIMITED"),
        ({"max_mem_per_node_mb": 380000}, "partition gpu: MaxMemPerNode UNLIMITED -> 380000"),
        ({"def_mem_per_cpu_mb": 4500}, "partition gpu: DefMemPerCPU 9000 -> 4500"),
        ({"max_nodes": None}, "partition gpu: MaxNodes 4 -> UNLIMITED"),
        ({"state": "DRAIN"}, "partition gpu: State UP -> DRAIN"),
        ({"deny_qos": ("long",)}, "partition gpu: DenyQos (none) -> long (+long)"),
        ({"allow_qos": ("gpu",)}, "partition gpu: AllowQos ALL -> gpu"),
        (
            {"allow_accounts": None},
            "partition gpu: AllowAccounts bio-struct,chem-ml,cs-vision,phys-lattice -> ALL",
        ),
        ({"qos": "gpu-part"}, "partition gpu: QoS N/A -> gpu-part"),
        ({"is_default": True}, "partition gpu: Default NO -> YES"),
    ],
)
def test_partition_field_changes(changes, expected):
    old = base_partition()
    new = dataclasses.replace(old, **changes)
    diff = diff_snapshots(EnvSnapshot({}, {"gpu": old}), EnvSnapshot({}, {"gpu": new}))
    assert diff.describe() == [expected]


def test_tres_changes_are_one_entry_per_key():
    old = base_partition()
    tres = dict(old.tres, **{"gres/gpu": "48", "gres/gpu:v100": "48"})
    tres["gres/shard"] = "128"
    new = dataclasses.replace(old, tres=tres)
    diff = diff_snapshots(EnvSnapshot({}, {"gpu": old}), EnvSnapshot({}, {"gpu": new}))
    assert diff.describe() == [
        "partition gpu: TRES gres/gpu=64 -> gres/gpu=48",
        "partition gpu: TRES gres/gpu:v100=64 -> gres/gpu:v100=48",
        "partition gpu: TRES (none) -> gres/shard=128",
    ]


def test_versionless_module_added_and_removed():
    tacc = ModuleInfo("TACC", (), None, False)
    gcc = ModuleInfo("gcc", ("9.4",), "9.4", False)
    with_tacc = EnvSnapshot({"TACC": tacc, "gcc": gcc}, {})
    without = EnvSnapshot({"gcc": gcc}, {})
    assert diff_snapshots(without, with_tacc).describe() == ["module TACC added"]
    assert diff_snapshots(with_tacc, without).describe() == ["module TACC removed"]


def test_versions_are_listed_in_version_order():
    old = EnvSnapshot({"gcc": ModuleInfo("gcc", ("9.3.0",), "9.3.0", False)}, {})
    new = EnvSnapshot(
        {"gcc": ModuleInfo("gcc", ("9.3.0", "10.1.0", "11.4.0"), "11.4.0", False)}, {}
    )
    assert diff_snapshots(old, new).describe() == [
        "module gcc/10.1.0 added",
        "module gcc/11.4.0 added",
        "module gcc: default 9.3.0 -> 11.4.0",
    ]


# ---------------------------------------------------------------------------
# JSON form and hash


@pytest.mark.parametrize("month", ["2026-10", "2026-11"])
def test_json_round_trip(month):
    snapshot = cluster(month)
    again = EnvSnapshot.from_json(snapshot.to_json())
    assert again == snapshot
    assert again.to_json() == snapshot.to_json()
    assert again.content_hash() == snapshot.content_hash()
    assert not diff_snapshots(snapshot, again)


def test_json_is_sorted_and_independent_of_input_order():
    snapshot = cluster("2026-10")
    shuffled = EnvSnapshot(
        dict(reversed(list(snapshot.modules.items()))),
        dict(reversed(list(snapshot.partitions.items()))),
    )
    assert shuffled.to_json() == snapshot.to_json()
    assert shuffled.content_hash() == snapshot.content_hash()
    data = json.loads(snapshot.to_json())
    assert (data["format"], data["version"]) == ("hpcmem-env-snapshot", 1)
    assert list(data["modules"]) == sorted(data["modules"])
    assert list(data["partitions"]) == ["bigmem", "cpu", "debug", "gpu", "gpu_test"]
    assert data["modules"]["gcc"] == {
        "default": "12.2.0",
        "marked_default": True,
        "name": "gcc",
        "versions": ["11.4.0", "12.2.0", "13.2.0"],
    }
    assert data["partitions"]["gpu_test"]["max_time_s"] == 28800
    assert data["partitions"]["gpu"]["allow_accounts"] == [
        "bio-struct",
        "chem-ml",
        "cs-vision",
        "phys-lattice",
    ]


def test_hash_follows_content():
    october, november = cluster("2026-10"), cluster("2026-11")
    assert len(october.content_hash()) == 64
    assert october.content_hash() != november.content_hash()
    gpu_test = dataclasses.replace(october.partitions["gpu_test"], max_time_s=4 * 3600)
    changed = EnvSnapshot(october.modules, {**october.partitions, "gpu_test": gpu_test})
    assert changed.content_hash() != october.content_hash()


@pytest.mark.parametrize(
    "text, message",
    [
        ("not json", "not an environment snapshot"),
        ('{"modules": {}}', "no 'hpcmem-env-snapshot' format"),
        (
            '{"format": "hpcmem-env-snapshot", "version": 99}',
            "unsupported environment snapshot version 99",
        ),
        (
            '{"format": "hpcmem-env-snapshot", "version": 1, "modules": {"gcc": {"name": "gcc"}}}',
            "not a module record",
        ),
        (
            '{"format": "hpcmem-env-snapshot", "version": 1, "partitions": {"a": {"name": "a"}}}',
            "not a partition record",
        ),
    ],
)
def test_from_json_rejects(text, message):
    with pytest.raises(InputError, match=message):
        EnvSnapshot.from_json(text)
