"""Environment snapshots kept in a store: what modules, partitions and site limits existed, and when.

A snapshot is stored only when the environment changed since the latest one, so a site
can take one every hour from cron without filling the store; `taken_at` is when the
environment was first seen in that state.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import null, select

from hpcmem.kb.environment.snapshot import EnvSnapshot, diff_snapshots
from hpcmem.kb.errors import NotFound
from hpcmem.kb.store.models import EnvSnapshot as SnapshotRow
from hpcmem.kb.store.database import Store


@dataclass
class StoredSnapshot:
    id: int
    cluster: str
    taken_at: Any
    source: str
    snapshot: EnvSnapshot
    content_hash: str

    def summary(self) -> dict[str, Any]:
        s = self.snapshot
        return {"id": self.id, "cluster": self.cluster, "taken_at": self.taken_at.isoformat(), "source": self.source,
                "modules": len(s.modules), "partitions": len(s.partitions), "nodes": len(s.nodes),
                "qos": len(s.qos), "associations": len(s.associations), "default_accounts": len(s.default_accounts),
                "content_hash": self.content_hash}


def _from_row(row: SnapshotRow) -> StoredSnapshot:
    # ``site`` holds only the parts present (EnvSnapshot.site_json), as to_json writes them,
    # so the snapshot read back has the hash it was stored under.
    document = json.dumps({"format": "hpcmem-env-snapshot", "version": 1,
                           "modules": row.modules or {}, "partitions": row.partitions or {}, **(row.site or {})})
    return StoredSnapshot(row.id, row.cluster, row.taken_at, row.source, EnvSnapshot.from_json(document),
                          row.content_hash)


def save_snapshot(store: Store, snapshot: EnvSnapshot, *, cluster: str, source: str) -> tuple[StoredSnapshot, bool]:
    """Store the snapshot unless it equals the latest one; returns (snapshot, stored?)."""
    latest = latest_snapshot(store, cluster)
    digest = snapshot.content_hash()
    if latest is not None and latest.content_hash == digest:
        return latest, False
    document = json.loads(snapshot.to_json())
    # Without site limits: SQL NULL (not JSON null), as in the rows stored before migration 0009.
    site = {key: document[key] for key in snapshot.site_json()} or null()
    with store.transaction() as session:
        row = SnapshotRow(cluster=cluster, source=source, modules=document["modules"],
                          partitions=document["partitions"], site=site, content_hash=digest)
        session.add(row)
        session.flush()
        stored = _from_row(row)
    return stored, True


def latest_snapshot(store: Store, cluster: str | None = None) -> StoredSnapshot | None:
    found = snapshots(store, cluster, limit=1)
    return found[0] if found else None


def snapshots(store: Store, cluster: str | None = None, limit: int | None = None) -> list[StoredSnapshot]:
    """Newest first."""
    with store.session() as session:
        query = select(SnapshotRow).order_by(SnapshotRow.taken_at.desc(), SnapshotRow.id.desc())
        if cluster:
            query = query.where(SnapshotRow.cluster == cluster)
        if limit:
            query = query.limit(limit)
        return [_from_row(row) for row in session.scalars(query).all()]


def get_snapshot(store: Store, snapshot_id: int) -> StoredSnapshot:
    with store.session() as session:
        row = session.get(SnapshotRow, snapshot_id)
        if row is None:
            raise NotFound(f"no environment snapshot {snapshot_id}", hint="list them with `hpcmem env list`")
        return _from_row(row)


def snapshot_at(store: Store, cluster: str | None, when) -> StoredSnapshot | None:
    """The snapshot in force at ``when``: the latest taken at or before it, else the oldest."""
    return SnapshotHistory(store, cluster).at(when)


class SnapshotHistory:
    """A cluster's snapshots for many ``at`` lookups: one query lists (taken_at, id), and
    each snapshot is read and parsed the first time a lookup needs it, then kept."""

    def __init__(self, store: Store, cluster: str | None) -> None:
        self.store = store
        query = select(SnapshotRow.taken_at, SnapshotRow.id).order_by(SnapshotRow.taken_at, SnapshotRow.id)
        if cluster:
            query = query.where(SnapshotRow.cluster == cluster)
        with store.session() as session:
            self._order = [tuple(row) for row in session.execute(query)]  # oldest first
        self._parsed: dict[int, StoredSnapshot] = {}

    def at(self, when) -> StoredSnapshot | None:
        """As ``snapshot_at``: ties in taken_at go to the highest id, as in ``snapshots``."""
        if not self._order:
            return None
        # (when, inf) sorts after every (taken_at, id) with taken_at <= when
        index = bisect.bisect_right(self._order, (when, float("inf"))) - 1
        return self._get(self._order[max(index, 0)][1])

    def _get(self, snapshot_id: int) -> StoredSnapshot:
        if snapshot_id not in self._parsed:
            with self.store.session() as session:
                self._parsed[snapshot_id] = _from_row(session.get(SnapshotRow, snapshot_id))
        return self._parsed[snapshot_id]


def diff(a: StoredSnapshot, b: StoredSnapshot) -> dict[str, Any]:
    changes = diff_snapshots(a.snapshot, b.snapshot)
    return {"from": a.summary(), "to": b.summary(), "changes": json.loads(changes.to_json()),
            "describe": changes.describe()}
