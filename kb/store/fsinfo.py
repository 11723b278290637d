"""Which filesystem a path lives on, and the SQLite journal mode that is safe there.

SQLite's WAL mode needs shared memory between every process that opens the database,
which network and parallel filesystems (NFS, Lustre, GPFS, BeeGFS, CIFS...) cannot give
across nodes: WAL there corrupts databases or fails with "disk I/O error". Rollback
journal mode (DELETE) relies only on POSIX locks, which these filesystems do provide
(NFSv4 and Lustre with `flock`/`localflock` mounts), so lab stores on shared storage use it.
"""

from __future__ import annotations

import os
from pathlib import Path

# Filesystem types (as /proc/mounts spells them) where WAL is unsafe.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "cephfs",
        "9p", "panfs", "wekafs", "glusterfs", "fuse.glusterfs", "fuse.sshfs", "fuse.cephfs",
        "afs", "orangefs", "pvfs2", "vboxsf", "virtiofs",
    }
)


def _unescape(field: str) -> str:
    # /proc/mounts escapes spaces, tabs and backslashes as octal.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def filesystem_type(path: str | os.PathLike[str], mounts_file: str = "/proc/mounts") -> str | None:
    """The type of the filesystem holding ``path`` (longest mount-point prefix wins)."""
    # Resolve symlinks in the part that exists; a store may not be created yet.
    target, rest = Path(os.path.abspath(path)), []
    while not target.exists() and target != target.parent:
        rest.append(target.name)
        target = target.parent
    real = os.path.join(os.path.realpath(target), *reversed(rest))
    best, best_type = "", None
    try:
        with open(mounts_file, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mount_point, fstype = _unescape(parts[1]), parts[2]
                prefix = mount_point.rstrip("/") + "/"
                if (real == mount_point or real.startswith(prefix) or mount_point == "/") and len(mount_point) >= len(best):
                    best, best_type = mount_point, fstype
    except OSError:
        return None
    return best_type


def safe_journal_mode(path: str | os.PathLike[str], mounts_file: str = "/proc/mounts") -> str:
    """WAL on local disks (concurrent readers never block), DELETE on shared filesystems."""
    fstype = filesystem_type(path, mounts_file) or ""
    return "DELETE" if fstype in NETWORK_FILESYSTEMS else "WAL"
