"""Site limits in environment snapshots (issue 27, item 1): the diff, the store on SQLite and
PostgreSQL, migration 0009, the plain-SQL reader and build_snapshot's carry-over."""

from __future__ import annotations

import dataclasses
import json
import shutil
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from hpcmem.ingest.environment import build_snapshot
from hpcmem.ingest.lmod import read_modules
from hpcmem.ingest.partitions import read_partitions
from hpcmem.ingest.site_limits import (parse_sacctmgr_assoc, parse_sacctmgr_qos, parse_sacctmgr_users,
                                       parse_scontrol_nodes)
from hpcmem.kb.environment.history import diff, latest_snapshot, save_snapshot, snapshots
from hpcmem.kb.environment.revalidate import revalidate
from hpcmem.kb.environment.snapshot import (AssociationLimitChange, AssociationPresenceChange, EnvSnapshot,
                                            NodeChange, NodePresenceChange, QosLimitChange, QosPresenceChange,
                                            SitePartChange, diff_snapshots)
from hpcmem.kb.errors import InputError
from tests.conftest import SAMPLES

CAT = shutil.which("cat")
ENV = SAMPLES / "env"
NOV, DEC = ENV / "cluster-2026-11", ENV / "cluster-2026-12"
REAL = ENV / "real-slurm-limits"
SITE_FILES = {"nodes": "scontrol-show-node-oneliner.txt", "qos": "sacctmgr-show-qos.txt",
              "assoc": "sacctmgr-show-assoc.txt", "users": "sacctmgr-show-user.txt"}


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def december(**replace: str) -> EnvSnapshot:
    """The December site; ``replace`` maps a part (nodes/qos/assoc/users) to other text."""
    texts = {part: replace.get(part, read(DEC / name)) for part, name in SITE_FILES.items()}
    return EnvSnapshot(read_modules(read(DEC / "module-t-avail.txt")),
                       read_partitions(read(DEC / "scontrol-show-partition-oneliner.txt")),
                       nodes=parse_scontrol_nodes(texts["nodes"]), qos=parse_sacctmgr_qos(texts["qos"]),
                       associations=parse_sacctmgr_assoc(texts["assoc"]),
                       default_accounts=parse_sacctmgr_users(texts["users"]))


def without_lines(text: str, *starts: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(starts))


# ---------------------------------------------------------------------------
# The diff


def january() -> EnvSnapshot:
    """December with a month of changes to nodes, QOS, associations and default accounts."""
    nodes = read(DEC / SITE_FILES["nodes"])
    nodes = without_lines(nodes, "NodeName=bm04 ")  # retired
    nodes = nodes.replace("NodeName=gn001 ", "NodeName=gn017 ", 1)  # renamed: one added, one removed
    ga01 = next(line for line in nodes.splitlines() if line.startswith("NodeName=ga01 "))
    new_ga01 = (ga01.replace("RealMemory=1000000", "RealMemory=2000000").replace("gpu:a100:8(S:0-1)", "gpu:a100:4(S:0-1)")
                .replace("AvailableFeatures=a100,ib,nvlink,zen3", "AvailableFeatures=a100,ib,zen3"))
    nodes = nodes.replace(ga01, new_ga01).replace("CPUTot=128 CPULoad", "CPUTot=96 CPULoad", 1)  # cn001
    nodes = nodes.replace("State=IDLE ", "State=ALLOCATED ")  # busy: no change worth a line
    qos = read(DEC / SITE_FILES["qos"])
    qos = without_lines(qos, "scavenger|").replace("|04:00:00|", "|02:00:00|")  # short: 4 h -> 2 h
    qos = qos.replace("cpu=2048,gres/gpu=8|||2-00:00:00", "cpu=2048,gres/gpu=4|||2-00:00:00")  # normal MaxTRES
    qos += "gpu-large|0|00:00:00|||cluster|DenyOnLimit||1.000000|||||||gres/gpu=32|||1-00:00:00|||||||\n"
    assoc = read(DEC / SITE_FILES["assoc"])
    assoc = without_lines(assoc, "lab|physics|alice|debug|")
    assoc = assoc.replace("lab|research|dmitri||1||||||||||100|||debug,normal,short|",
                          "lab|research|dmitri||1||||||||||100|||debug,long,normal,short|")
    assoc += "lab|chem-ml|alice|gpu|1|||||||||||||normal|normal|\n"
    users = read(DEC / SITE_FILES["users"]).replace("bob|physics|", "bob|research|")
    return december(nodes=nodes, qos=qos, assoc=assoc, users=users)


EXPECTED_SITE_DIFF = [
    "node gn017 added",
    "node bm04 removed",
    "node gn001 removed",
    "node cn001: CPUTot 128 -> 96",
    "node ga01: RealMemory 1000000 -> 2000000",
    "node ga01: Gres gpu:a100:8 -> gpu:a100:4",
    "node ga01: AvailableFeatures a100,ib,nvlink,zen3 -> a100,ib,zen3",
    "QOS gpu-large added",
    "QOS scavenger removed",
    "QOS normal: MaxTRES gres/gpu=8 -> gres/gpu=4",
    "QOS short: MaxWall 04:00:00 -> 02:00:00",
    "association alice/chem-ml on gpu added",
    "association alice/physics on debug removed",
    "association dmitri/research: QOS debug,normal,short -> debug,long,normal,short (+long)",
    "user bob: default account physics -> research",
]


def test_site_diff_describes_every_change():
    assert diff_snapshots(december(), january()).describe() == EXPECTED_SITE_DIFF


def test_site_diff_structure_and_json():
    changes = diff_snapshots(december(), january())
    assert changes.nodes_added == (NodePresenceChange("gn017", "added"),)
    assert NodeChange("ga01", "RealMemory", "1000000", "2000000") in changes.node_changes
    assert changes.qos_added == (QosPresenceChange("gpu-large", "added"),)
    assert changes.qos_changes[1] == QosLimitChange("short", "MaxWall", "04:00:00", "02:00:00")
    assert changes.associations_added == (AssociationPresenceChange("lab", "chem-ml", "alice", "gpu", "added"),)
    assert changes.association_changes == (AssociationLimitChange(
        "lab", "research", "dmitri", None, "QOS", "debug,normal,short", "debug,long,normal,short"),)
    data = json.loads(changes.to_json())
    assert list(data) == sorted(data)
    assert data["associations_removed"] == [{"cluster": "lab", "account": "physics", "user": "alice",
                                             "partition": "debug", "change": "removed"}]
    assert "site_parts" not in data  # both sides hold every part: nothing to say about parts


def test_a_part_held_by_one_side_is_one_line_not_every_record():
    nov = EnvSnapshot(read_modules(read(NOV / "module-t-avail.txt")),
                      read_partitions(read(NOV / "scontrol-show-partition-oneliner.txt")))
    dec = december()
    forward = diff_snapshots(nov, dec)
    assert forward.site_parts == (SitePartChange("nodes", "recorded", 92), SitePartChange("QOS", "recorded", 5),
                                  SitePartChange("associations", "recorded", 13),
                                  SitePartChange("default accounts", "recorded", 6))
    assert not forward.nodes_added and not forward.associations_added
    assert diff_snapshots(dec, nov).describe()[-4:] == [
        "nodes no longer recorded (the older snapshot had 92)", "QOS no longer recorded (the older snapshot had 5)",
        "associations no longer recorded (the older snapshot had 13)",
        "default accounts no longer recorded (the older snapshot had 6)"]


def test_a_diff_without_site_limits_keeps_its_json():
    nov = EnvSnapshot({}, read_partitions(read(NOV / "scontrol-show-partition-oneliner.txt")))
    assert set(json.loads(diff_snapshots(nov, nov).to_json())) == {
        "defaults_changed", "modules_added", "modules_removed", "partition_changes", "partitions_added",
        "partitions_removed"}
    assert not diff_snapshots(december(), december())


# ---------------------------------------------------------------------------
# The store: SQLite and PostgreSQL


@pytest.fixture
def store(store_factory):
    return store_factory().open()


def test_round_trip_keeps_every_part_and_the_hash(store):
    dec = december()
    stored, new = save_snapshot(store, dec, cluster="lab", source="test")
    assert new and stored.content_hash == dec.content_hash()
    [again] = snapshots(store, "lab")
    assert again.snapshot == dec
    assert again.snapshot.content_hash() == again.content_hash == dec.content_hash()
    assert again.summary()["nodes"] == 92 and again.summary()["associations"] == 13
    assert save_snapshot(store, december(), cluster="lab", source="test") == (again, False)  # unchanged


def test_a_snapshot_without_site_limits_stores_no_site(store):
    nov = EnvSnapshot(read_modules(read(NOV / "module-t-avail.txt")),
                      read_partitions(read(NOV / "scontrol-show-partition-oneliner.txt")))
    stored, _ = save_snapshot(store, nov, cluster="lab", source="test")
    with store.engine.connect() as conn:  # SQL NULL, as in rows stored before migration 0009
        assert conn.execute(text("SELECT count(*) FROM env_snapshots WHERE site IS NULL")).scalar_one() == 1
    assert latest_snapshot(store, "lab").snapshot.content_hash() == stored.content_hash == nov.content_hash()


def test_reader_returns_the_site_parts_of_the_latest_snapshot(store):
    from hpcmem.kb.store.reader import StoreReader

    nov = EnvSnapshot({}, read_partitions(read(NOV / "scontrol-show-partition-oneliner.txt")))
    save_snapshot(store, nov, cluster="lab", source="nov")
    reader = StoreReader.open(store)
    try:
        before = reader.latest_environment("lab")
        assert (before["nodes"], before["qos"], before["associations"], before["default_accounts"]) == ({}, {}, [], {})
        stored, _ = save_snapshot(store, december(), cluster="lab", source="dec")
        found = reader.latest_environment("lab")
    finally:
        reader.close()
    assert (found["id"], found["source"], found["content_hash"]) == (stored.id, "dec", stored.content_hash)
    assert found["taken_at"] == stored.taken_at
    document = json.loads(december().to_json())
    for key in ("partitions", "modules", "nodes", "qos", "associations", "default_accounts"):
        assert found[key] == document[key], key
    assert found["nodes"]["bm01"]["mem_spec_limit_mb"] == 16000


def test_migration_0009_keeps_old_snapshots_readable_and_hash_equal(store):
    """A store at 0008 with a snapshot in it, upgraded: the snapshot reads back with its hash,
    and the next one (with site limits) diffs against it."""
    store.downgrade("0008")
    nov = EnvSnapshot(read_modules(read(NOV / "module-t-avail.txt")),
                      read_partitions(read(NOV / "scontrol-show-partition-oneliner.txt")))
    document = json.loads(nov.to_json())
    json_value = "CAST(:{} AS jsonb)" if store.dialect == "postgresql" else ":{}"
    with store.transaction() as s:  # the row as 0008 wrote it: no site column yet
        s.execute(text("INSERT INTO env_snapshots (cluster, taken_at, source, modules, partitions, content_hash) "
                       f"VALUES ('lab', '2026-11-01 00:00:00', 'old', {json_value.format('m')}, "
                       f"{json_value.format('p')}, :h)"),
                  {"m": json.dumps(document["modules"]), "p": json.dumps(document["partitions"]),
                   "h": nov.content_hash()})
    store.open()
    assert store.revision() == "0009"
    old = latest_snapshot(store, "lab")
    assert old.snapshot == nov and old.snapshot.content_hash() == old.content_hash == nov.content_hash()
    assert save_snapshot(store, nov, cluster="lab", source="again")[1] is False  # same hash: not stored again
    dec, _ = save_snapshot(store, december(), cluster="lab", source="dec")
    assert "nodes first recorded (92)" in diff(old, dec)["describe"]
    store.downgrade("0008")  # and back down: the column goes, the rows stay
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM env_snapshots")).scalar_one() == 2


def test_revalidation_runs_over_a_snapshot_with_site_limits(store):
    save_snapshot(store, december(), cluster="lab", source="dec")
    stored, _ = save_snapshot(store, january(), cluster="lab", source="jan")
    report = revalidate(store, stored, dry_run=True, actor="alice")
    assert report.snapshot_id == stored.id and report.changes == []


# ---------------------------------------------------------------------------
# build_snapshot: files, carry-over, live


@pytest.fixture
def first(store):
    """A stored snapshot of December with every part."""
    snapshot, _ = build_snapshot(read(DEC / "module-t-avail.txt"), read(DEC / "scontrol-show-partition-oneliner.txt"),
                                 live=False, previous=None, **{f"{part}_text": read(DEC / name)
                                                               for part, name in SITE_FILES.items()})
    return save_snapshot(store, snapshot, cluster="lab", source="dec")[0]


def test_parts_not_given_carry_over(first):
    qos = read(DEC / SITE_FILES["qos"]).replace("|04:00:00|", "|02:00:00|")
    snapshot, sources = build_snapshot(None, None, live=False, previous=first, qos_text=qos)
    assert sources == ("modules carried over from snapshot 1; partitions carried over from snapshot 1; "
                       "nodes, associations, default accounts carried over from snapshot 1")
    assert snapshot.nodes == first.snapshot.nodes and snapshot.associations == first.snapshot.associations
    assert diff_snapshots(first.snapshot, snapshot).describe() == ["QOS short: MaxWall 04:00:00 -> 02:00:00"]


def test_without_an_earlier_snapshot_the_site_parts_are_simply_absent():
    snapshot, sources = build_snapshot(read(NOV / "module-t-avail.txt"),
                                       read(NOV / "scontrol-show-partition-oneliner.txt"), live=False, previous=None)
    assert sources == "" and not snapshot.has_site_limits


def test_a_wipe_shaped_node_or_qos_listing_is_refused(first):
    other_nodes = read(REAL / "scontrol-show-node-oneliner.txt")  # the harness: none of the 92 nodes
    with pytest.raises(InputError, match=r"^nodes.txt: none of the 92 nodes of snapshot 1 \(bm01, bm02, "):
        build_snapshot(None, None, live=False, previous=first, nodes_text=other_nodes, nodes_from="nodes.txt")
    with pytest.raises(InputError, match="^--qos: empty QOS listing$"):
        build_snapshot(None, None, live=False, previous=first, qos_text="")
    snapshot, _ = build_snapshot(None, None, live=False, previous=first, nodes_text=other_nodes, allow_empty=True)
    assert list(snapshot.nodes) == ["localhost"]


def test_bad_site_input_names_the_file(first):
    with pytest.raises(InputError, match=r"^assoc.txt: line 1: not a `sacctmgr show assoc -P` header"):
        build_snapshot(None, None, live=False, previous=first, assoc_text="lab|research|alice\n",
                       assoc_from="assoc.txt")


def test_nothing_given_is_refused():
    with pytest.raises(InputError, match=r"^give --modules FILE, --partitions FILE or --live \(and --nodes"):
        build_snapshot(None, None, live=False, previous=None)


def make_script(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def live_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """scontrol and Lmod stand-ins printing the harness's real output; no sacctmgr yet."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make_script(bin_dir, "scontrol", f'case "$*" in\n  *partition*) {CAT} "{REAL / "scontrol-show-partition-oneliner.txt"}" ;;\n'
                                     f'  *node*) {CAT} "{REAL / "scontrol-show-node-oneliner.txt"}" ;;\nesac\n')
    make_script(bin_dir, "lmod", f'{CAT} "{ENV / "real-slurm" / "lmod" / "module-t-avail.txt"}" >&2\n')
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("LMOD_DIR", "")
    monkeypatch.setenv("LMOD_CMD", str(bin_dir / "lmod"))
    return bin_dir


def test_live_without_accounting_keeps_going_with_a_warning(live_tools: Path, store):
    snapshot, sources = build_snapshot(None, None, live=True, previous=None)
    assert sources == ("live: Lmod spider/avail, scontrol show partition, scontrol show node; "
                       "warning: accounting not read (sacctmgr not found)")
    assert list(snapshot.nodes) == ["localhost"] and list(snapshot.partitions) == ["debug", "main"]
    assert not snapshot.qos and not snapshot.associations
    # with an earlier snapshot that has them, they carry over instead of reading as removed
    first, _ = save_snapshot(store, december(), cluster="lab", source="dec")
    make_script(live_tools, "sacctmgr", f'{CAT} "{REAL / "sacctmgr-unreachable.stderr.txt"}" >&2\nexit 1\n')
    snapshot, sources = build_snapshot(None, None, live=True, previous=first)
    assert sources.endswith("warning: nodes not read (scontrol show node: none of the 92 nodes of snapshot 1 "
                            "(bm01, bm02, bm03, bm04, cn001, ...) is in the listing, refusing to record them all "
                            "as removed); warning: accounting not read (sacctmgr show qos failed (exit 1): sacctmgr: "
                            "error: Sending PersistInit msg: Connection refused); "
                            "nodes, QOS, associations, default accounts carried over from snapshot 1")
    assert snapshot.qos == first.snapshot.qos and snapshot.nodes == first.snapshot.nodes


def test_live_with_accounting_reads_every_part(live_tools: Path, tmp_path: Path):
    args = tmp_path / "args"
    make_script(live_tools, "sacctmgr", f'echo "$@" >> "{args}"\n'
                f'case "$*" in\n'
                f'  *qos*) {CAT} "{REAL / "sacctmgr-show-qos.txt"}" ;;\n'
                f'  *user=alice*) {CAT} "{REAL / "sacctmgr-show-assoc-user-alice.txt"}" ;;\n'
                f'  *user*) {CAT} "{REAL / "sacctmgr-show-user.txt"}" ;;\n'
                f'esac\n')
    snapshot, sources = build_snapshot(None, None, live=True, previous=None, assoc_user="alice")
    assert sources == "live: Lmod spider/avail, scontrol show partition, scontrol show node, sacctmgr show qos/assoc/user"
    assert list(snapshot.qos) == ["normal", "short", "urgent"]
    assert [(a.account, a.partition) for a in snapshot.associations] == [("research", None), ("teaching", "main")]
    assert snapshot.default_accounts == {"alice": "research", "bob": "research", "root": "root"}
    assert args.read_text().splitlines() == ["-P show qos", "-P show assoc user=alice", "-P show user alice"]


def test_site_records_survive_json_unchanged():
    dec = december()
    again = EnvSnapshot.from_json(dec.to_json())
    assert again == dec and again.to_json() == dec.to_json()
    node = dec.nodes["ga01"]
    assert dataclasses.asdict(again.nodes["ga01"]) == dataclasses.asdict(node)
