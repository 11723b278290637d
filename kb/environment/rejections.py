"""Which of the submission checks' problems explain which of Slurm's rejection messages.

Kept apart from ``site_check.py`` so that recall can ask "is this text a refused submission?"
for every query without importing the snapshot types: agents pay start-up on every recall.
"""

from __future__ import annotations

__all__ = ["KINDS_FOR_MESSAGE", "kinds_for_message"]

# Which problems explain which of Slurm's rejection messages (sbatch's stderr, squeue's Reason).
KINDS_FOR_MESSAGE: dict[str, tuple[str, ...]] = {
    "Requested node configuration is not available": (
        "memory_per_node", "cpus_per_node", "gres_count", "gres_type", "node_combination", "nodes_count",
        "feature_unknown"),
    "Memory specification can not be satisfied": ("memory_per_node", "node_combination"),
    "CPU count per node can not be satisfied": ("cpus_per_node", "node_combination"),
    "More processors requested than permitted": ("cpus_total", "cpus_per_node"),
    "Invalid account or account/partition combination specified": ("account_unknown", "account_partition"),
    "not permitted to use this partition": ("account_partition",),
    "Requested time limit is invalid": ("partition_max_time",),
    "PartitionTimeLimit": ("partition_max_time",),
    "QOSMaxWallDurationPerJobLimit": ("qos_max_wall",),
    "AssocMaxWallDurationPerJobLimit": ("assoc_max_wall",),
    "Job violates accounting/QOS policy": ("qos_max_wall", "assoc_max_wall", "qos_max_tres", "assoc_max_tres"),
    "Invalid generic resource (gres) specification": ("gres_unknown",),
    "Invalid qos specification": ("qos_unknown", "qos_partition"),
    "Invalid partition name specified": ("partition_unknown",),
    "invalid partition specified": ("partition_unknown",),
    "Requested partition configuration not available now": ("partition_down", "nodes_count", "partition_max_time",
                                                            "memory_per_node"),
    "Invalid feature specification": ("feature_unknown",),
    # per-job TRES limits: squeue's reasons, or the rejection of a QOS with DenyOnLimit
    "QOSMaxCpuPerJobLimit": ("qos_max_tres",), "QOSMaxGRESPerJob": ("qos_max_tres",),
    "QOSMaxMemoryPerJob": ("qos_max_tres",), "QOSMaxNodePerJobLimit": ("qos_max_tres",),
    "AssocMaxCpuPerJobLimit": ("assoc_max_tres",), "AssocMaxGRESPerJob": ("assoc_max_tres",),
    "AssocMaxMemPerJob": ("assoc_max_tres",), "AssocMaxNodePerJobLimit": ("assoc_max_tres",),
    "Node count specification invalid": ("nodes_count",),
    # squeue's reasons for a job that can never start as it is
    "PartitionConfig": ("memory_per_node", "cpus_per_node", "gres_count", "gres_type", "node_combination",
                        "feature_unknown"),
    "PartitionNodeLimit": ("nodes_count",), "BadConstraints": ("feature_unknown", "node_combination"),
    "InvalidQOS": ("qos_unknown", "qos_partition"), "InvalidAccount": ("account_unknown", "account_partition"),
}


def kinds_for_message(text: str) -> tuple[str, ...]:
    """The problem kinds that explain a rejection text (empty when it is none of Slurm's)."""
    kinds: list[str] = []
    for message, found in KINDS_FOR_MESSAGE.items():
        if message in text:
            kinds.extend(k for k in found if k not in kinds)
    return tuple(kinds)
