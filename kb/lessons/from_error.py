"""`hpcmem record`: turn an error (or a stored failure) plus cause and fix into a lesson."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hpcmem.kb.lessons.actions import parse_action
from hpcmem.kb.errors import InputError, NotFound
from hpcmem.kb.lessons.write import Condition, LessonDraft, error_excerpt, record_lesson
from hpcmem.kb.signatures.fingerprint import CONTENTLESS, fingerprint, has_content, signature_text
from hpcmem.kb.store.stack import StoreStack


def find_occurrence(stack: StoreStack, job_id: str, cluster: str | None = None):
    """The stored failure of a job, from the first store of the stack that has it."""
    from sqlalchemy import select

    from hpcmem.kb.store.models import Occurrence, Signature

    for store in stack.all():
        store.open(create=store is stack.user)
        with store.session() as session:
            query = select(Occurrence).where(Occurrence.job_id == job_id)
            if cluster:
                query = query.where(Occurrence.cluster == cluster)
            occ = session.scalars(query.order_by(Occurrence.id.desc())).first()
            if occ is not None:
                sig = session.get(Signature, occ.signature_id) if occ.signature_id else None
                return store, occ, sig
    raise NotFound(f"no stored failure for job {job_id}", hint="ingest it first with `hpcmem ingest sacct` or `ingest logs`")


def parse_module(spec: str) -> Condition:
    name, sep, version = spec.partition("/")
    if not name or not sep or not version:
        raise InputError(f"--module expects NAME/VERSION, got '{spec}'")
    return Condition("module", spec, version)


def record(
    stack: StoreStack,
    *,
    cause: str,
    fix: str,
    author: str,
    source: str = "agent",
    error_text: str | None = None,
    job_id: str | None = None,
    actions: list[str] = (),
    scope: str = "user",
    partition: str | None = None,
    modules: list[str] = (),
    cluster: str | None = None,
    context: str | None = None,
    valid_until: dt.datetime | None = None,
    job_context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if bool(error_text) + bool(job_id) == 0:
        raise InputError("give the error: --error TEXT, --error-file FILE or --job ID")
    if valid_until is not None and valid_until <= dt.datetime.now(dt.timezone.utc):
        # revalidate expires a lesson once valid_until has passed, and recall hides it: such
        # a lesson would be dead on arrival
        raise InputError(f"--valid-until {valid_until:%Y-%m-%d} has already passed (a lesson expires at "
                         "00:00 UTC on that day)", hint="give a later date, or leave --valid-until out")
    evidence: list[dict[str, Any]] = []
    if job_id:
        occ_store, occ, _ = find_occurrence(stack, job_id, cluster)
        text = occ.log_excerpt or occ.message or ""
        if error_text:
            text = f"{error_text}\n{text}"
        partition = partition or occ.partition
        modules = list(modules) or list(occ.modules or [])
        cluster = cluster or occ.cluster
        job_context = _with_job_facts(job_context, occ)
        # occurrence ids are local to a store; elsewhere the job id is the evidence
        same_store = occ_store is stack.by_scope(scope)
        evidence.append({"kind": "occurrence", "job_id": occ.job_id, "occurrence_id": occ.id if same_store else None})
    else:
        text = error_text or ""
    text = signature_text(text)  # normalised, then redacted: as recall fingerprints a query
    if not has_content(text):
        raise InputError(CONTENTLESS)
    sig = fingerprint(text)  # as recall computes it; what is stored is sanitised too
    conditions = [Condition("cluster", cluster)] if cluster else []
    if partition:
        conditions.append(Condition("partition", partition))
    conditions += [parse_module(m) for m in modules]
    target = stack.by_scope(scope)
    kind, _, name = scope.partition(":")
    draft = LessonDraft(
        fingerprint=sig.fingerprint, template=sig.template, category=sig.category, cause=cause, fix=fix,
        source=source, author=author, context=context, actions=[parse_action(a) for a in actions],
        conditions=conditions, scope=kind, scope_name=name or (target.name if kind == "lab" else None),
        valid_until=valid_until, evidence=evidence, excerpt=error_excerpt(text),
        job_context=_with_flags(job_context, partition, modules),
    )
    if target is not stack.user:
        target.check_exists()  # record_lesson creates or migrates only what exists
    return record_lesson(target, draft, actor=author)


# What Slurm recorded of a stored job's request and run. It wins over what the caller gave:
# a script's #SBATCH lines are defaults that sbatch's command line overrides, so the script
# of a job resubmitted with --mem=256M still says the 100M that job did not ask.
RECORDED_BY_SLURM = frozenset({
    "partition", "account", "qos", "mem_mb", "cpus", "nodes", "time_limit_s", "gres", "gpus", "constraint",
    "job_name", "workdir", "max_rss_mb", "elapsed_s", "exit_code", "signal", "state",
})


def stored_job_context(given: dict[str, Any] | None, stored: dict[str, Any]) -> dict[str, Any]:
    """A stored job's context: what Slurm recorded of it, then what the caller said (its script,
    options, modules...), then the job's other stored facts."""
    from hpcmem.kb.jobs.context import merge_contexts

    recorded = {key: value for key, value in stored.items() if key in RECORDED_BY_SLURM}
    return merge_contexts(recorded, given, stored)


def _with_job_facts(given: dict[str, Any] | None, occ: Any) -> dict[str, Any]:
    from hpcmem.kb.jobs.request import OCCURRENCE_FIELDS, from_occurrence

    return stored_job_context(given, from_occurrence({name: getattr(occ, name, None) for name in OCCURRENCE_FIELDS}))


def _with_flags(given: dict[str, Any] | None, partition: str | None, modules: Any) -> dict[str, Any]:
    from hpcmem.kb.jobs.context import merge_contexts

    return merge_contexts(given, {"partition": partition, "modules": list(modules) or None})
