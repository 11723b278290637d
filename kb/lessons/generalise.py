"""Generalising a lesson for a shared store: what stays private, what keeps its scope.

A user's failures reveal unpublished work, so a copy for a lab or the cluster loses the
author's paths (home and scratch, work directories), job ids and login name. What scoped
the lesson stays: the script and the program it was learnt for, its partition and its
other conditions, and its job context (``lessons.job_context``) without the fields that
are private (the work directory; a virtualenv or conda prefix in someone's home). A lab
lesson for ``prep.sh`` must still say ``prep.sh``: stripped of it, it reads "any OOM ->
600M" and is applied to every job that runs out of memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from hpcmem.kb.lessons.write import Condition
from hpcmem.kb.store.models import Lesson, Occurrence

# A path under a per-user root; the root tells where (home or scratch), the rest is private.
_USER_PATH = re.compile(
    r"(?<![\w$])(?P<root>/(?:home|scratch|work|users|u)\d*/"
    r"(?:(?:gpfs|network|lustre|local)/)?|/global/(?:homes|cscratch\d*|u\d)/(?:[a-z]/)?)"
    r"(?P<user>[A-Za-z_][A-Za-z0-9_.-]{0,31})(?P<rest>/[^\s'\"`;|&<>),]*)?"
)
_SHARED_DIRS = frozenset({"shared", "share", "public", "common", "apps", "software", "sw", "datasets",
                          "data", "containers", "modules", "tmp", "groups", "group"})
# Slurm job and step ids in the forms logs and people write them.
_JOB_IDS = (
    (re.compile(r"\b(?P<k>(?:Job|Step)Id=)\d+(?:_\d+)?(?P<s>\.\w+)?", re.I), r"\g<k><jobid>\g<s>"),
    (re.compile(r"\b(?P<k>(?:slurm|job)-)\d+(?:_\d+)?(?P<s>\.(?:out|err|log))", re.I), r"\g<k><jobid>\g<s>"),
    (re.compile(r"\b(?P<k>(?:array\s+)?job(?:\s*id)?[\s#:=]*)\d{3,}(?:_\d+)?\b", re.I), r"\g<k><jobid>"),
    (re.compile(r"(?P<k>SLURM_JOB_ID=|%j\b|\$SLURM_JOB_ID)\d*"), r"\g<k>"),
)
# Job context fields that name a place on the author's file systems.
_ENVIRONMENT_PATHS = ("venv", "conda_env")


@dataclass
class PrivateContext:
    """What is known to be private to the author (name, job ids, work directories), and the
    script and program names that scope the lesson and so stay, even inside a private path."""

    user: str | None = None
    job_ids: frozenset[str] = frozenset()
    work_dirs: frozenset[str] = frozenset()
    scope_names: frozenset[str] = frozenset()


def _base(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def generalise_text(text: str | None, private: PrivateContext) -> str | None:
    """``text`` without the author's paths, job ids, work dirs or login name; a path's last
    part stays when it is the lesson's script or program (``$HOME/…/prep.sh``)."""
    if not text:
        return text

    def user_path(m: re.Match[str]) -> str:
        if m.group("user").lower() in _SHARED_DIRS:
            return m.group(0)  # /scratch/shared/... is a shared area, not someone's
        root = m.group("root")
        base = "$HOME" if root.startswith("/home") or "homes" in root else root + "$USER"
        rest = m.group("rest")
        if not rest or rest == "/":
            return base
        name = _base(rest)
        return base + ("/…/" + name if name in private.scope_names else "/…")

    for work_dir in sorted(private.work_dirs, key=len, reverse=True):
        text = text.replace(work_dir, "<workdir>")
    text = _USER_PATH.sub(user_path, text)
    for job_id in sorted(private.job_ids, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(job_id)}(?![\w])", "<jobid>", text)
    for pattern, repl in _JOB_IDS:
        text = pattern.sub(repl, text)
    if private.user and len(private.user) >= 3:
        text = re.sub(rf"(?<![\w$~/-]){re.escape(private.user)}(?![\w-])", "$USER", text)
    return text


def private_context(session: Session, lesson: Lesson) -> PrivateContext:
    """The author's private context, from the lesson's evidence (its jobs' occurrences) and
    its job context; the scripts those jobs ran and the lesson's program are its scope."""
    from hpcmem.kb.errors import InputError
    from hpcmem.kb.jobs.request import from_submit_line

    context = dict(lesson.job_context or {})
    job_ids = {e.job_id for e in lesson.evidence if e.job_id}
    dirs = {context["workdir"].rstrip("/")} if len(str(context.get("workdir") or "")) > 1 else set()
    names = {_base(context["command"])} if context.get("command") else set()
    occ_ids = [e.occurrence_id for e in lesson.evidence if e.occurrence_id]
    if occ_ids or job_ids:
        clauses = []
        if occ_ids:
            clauses.append(Occurrence.id.in_(occ_ids))
        if job_ids:
            clauses.append(Occurrence.job_id.in_(job_ids))
        for occ in session.scalars(select(Occurrence).where(or_(*clauses))):
            job_ids.add(occ.job_id)
            if occ.work_dir and len(occ.work_dir) > 1:
                dirs.add(occ.work_dir.rstrip("/"))
            try:
                script = from_submit_line(occ.submit_line).get("command") if occ.submit_line else None
            except InputError:
                script = None
            if script:
                names.add(_base(script))
    return PrivateContext(lesson.author, frozenset(job_ids), frozenset(dirs), frozenset(n for n in names if n))


def public_job_context(context: dict[str, Any] | None, private: PrivateContext) -> dict[str, Any]:
    """The lesson's job context for a shared store: the work directory goes, and so does a
    virtualenv or conda prefix in a user's home or work directory; a program named by its
    path keeps its name; the rest (request, modules, partition, job name...) is scope."""
    out: dict[str, Any] = {}
    for key, value in (context or {}).items():
        if key == "workdir":
            continue
        if key in _ENVIRONMENT_PATHS and isinstance(value, str) and _is_private_path(value, private):
            continue
        if key == "command" and isinstance(value, str) and "/" in value:
            value = _base(value)
        elif isinstance(value, str):
            value = generalise_text(value, private)
        out[key] = value
    return out


def _is_private_path(value: str, private: PrivateContext) -> bool:
    if value.startswith(("~", "$HOME", "${HOME}")):
        return True
    if any(value == d or value.startswith(d + "/") for d in private.work_dirs):
        return True
    return generalise_text(value, PrivateContext(work_dirs=private.work_dirs)) != value


def scope_conditions(context: dict[str, Any], have: list[Condition]) -> list[Condition]:
    """Conditions that say what the lesson was learnt for, beyond those it has: the program
    (``application``) its job ran."""
    program = context.get("command")
    if not program or any(c.kind == "application" for c in have):
        return []
    return [Condition("application", program)]
