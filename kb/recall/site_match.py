"""Refused submissions: the site's limits say which limit each job broke (issues 26 and 27).

One rejection message has several causes: ``Requested node configuration is not available``
is too much memory, too many CPUs, a GPU count or type no node has. The text cannot tell them
apart and neither can the request alone - 4 GPUs is fine on one site and too many on another.
With the site's limits (an environment snapshot with nodes, QOS and associations), the
submission checks of ``kb/environment/site_check.py`` name the limit the query's job broke and
the limit the lesson's job broke. A lesson whose job broke another limit is about another
cause: it is at most related, with both named. Lessons whose jobs broke the same limit agree.

Slurm words one limit in several messages (``CPU count per node can not be satisfied`` and
``More processors requested than permitted`` for too many CPUs on a node): when both jobs broke
the same limit, a difference between two rejection messages is not counted (the recaller drops
it with ``scoring.without_rejection_wording``).

Nothing is decided when the text is no rejection, the snapshot has no site limits, or either
job's request is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcmem.kb.environment.site_check import check_request, has_request, kinds_for_message
from hpcmem.kb.environment.snapshot import EnvSnapshot


@dataclass
class SiteFacts:
    """The site a query is judged on: its snapshot, the querying user and the message's kinds."""

    snapshot: EnvSnapshot
    user: str
    message_kinds: tuple[str, ...]
    query_broke: frozenset[str]

    @classmethod
    def of(cls, text: str, context: dict[str, Any], snapshot: EnvSnapshot | None, user: str) -> "SiteFacts | None":
        kinds = kinds_for_message(text)
        if not kinds or snapshot is None or not snapshot.has_site_limits or not has_request(context):
            return None
        return cls(snapshot, user, kinds, broken(context, snapshot, user, kinds))


# The context fields (as ``differs`` names them) each broken limit is about: when both jobs
# broke the same limit, their values differing there is the same cause at another amount.
# Not so where the values name the pair that is refused (this account on that partition, a
# time over that partition's MaxTime): a fix for one pair is not a fix for another.
COVERS = {
    "memory_per_node": {"mem", "mem_per_cpu", "memory_asked"},
    "cpus_per_node": {"cpus", "many_cpus"}, "cpus_total": {"cpus", "many_cpus"},
    "gres_unknown": {"gres", "gpus"}, "gres_type": {"gres", "gpus"}, "gres_count": {"gres", "gpus"},
    "node_combination": {"mem", "mem_per_cpu", "memory_asked", "cpus", "many_cpus", "gres", "gpus"},
    "nodes_count": {"nodes"}, "feature_unknown": {"constraint"},
    "account_unknown": {"account"}, "account_partition": set(),
    "qos_unknown": {"qos"}, "qos_partition": {"qos"}, "qos_max_wall": {"time_limit"},
    "assoc_max_wall": {"time_limit"}, "partition_max_time": {"time_limit"},
    "qos_max_tres": {"cpus", "mem", "gres", "gpus", "nodes"}, "assoc_max_tres": {"cpus", "mem", "gres", "gpus", "nodes"},
    "partition_unknown": {"partition"}, "partition_down": set(),
}
# Limits that refuse a pair, not an amount: when both jobs broke one of them, the pair must be
# the same one - a fix for research on main (move to debug) is not a fix for teaching on debug.
PAIRED = {"account_partition": {"account", "partition"}, "partition_max_time": {"partition"}}
# A refused job never ran: what it would have run says nothing about why it was refused.
NOT_ABOUT_A_REFUSAL = {"program", "job_name"}



def broken(context: dict[str, Any], snapshot: EnvSnapshot, user: str, kinds: tuple[str, ...]) -> frozenset[str]:
    """The limits ``context``'s request breaks that give one of the message's ``kinds``."""
    return frozenset(p.kind for p in check_request(context, snapshot, user).problems if p.kind in kinds)


@dataclass(frozen=True)
class Judgement:
    agrees: bool
    query: str  # the limit(s) the query's job broke, for people
    lesson: str  # the limit(s) the lesson's job broke
    covers: frozenset[str] = frozenset()  # for agreement: the context fields the shared limit is about
    paired: frozenset[str] = frozenset()  # for agreement: the fields that name the refused pair

    @property
    def reason(self) -> str:
        return f"your job broke {self.query}, the lesson's job {self.lesson} (the site's limits, latest snapshot)"


def judge(site: SiteFacts, lesson: dict[str, Any]) -> Judgement | None:
    """Whether the lesson's job broke a limit the query's job broke too (agrees) or other ones;
    None when it cannot be said."""
    context = lesson.get("job_context") or {}
    if not has_request(context):
        return None
    kinds = tuple(dict.fromkeys(site.message_kinds + kinds_for_message(lesson.get("template") or "")))
    # the lesson's job as its author ran it, when the site knows the author
    author = lesson.get("author")
    user = author if author and any(a.user == author for a in site.snapshot.associations) else site.user
    theirs = broken(context, site.snapshot, user, kinds)
    if not site.query_broke and not theirs:
        return None  # neither request breaks a limit the snapshot shows: nothing to compare
    shared = site.query_broke & theirs
    if shared:
        covers = set(NOT_ABOUT_A_REFUSAL).union(*(COVERS.get(kind, set()) for kind in shared))
        paired = set().union(*(PAIRED.get(kind, set()) for kind in shared))
        return Judgement(True, _names(shared), _names(shared), frozenset(covers), frozenset(paired))
    return Judgement(False, _names(site.query_broke), _names(theirs))


def _names(kinds: frozenset[str]) -> str:
    return " and ".join(k.replace("_", " ") for k in sorted(kinds)) if kinds else "no limit the snapshot shows"
