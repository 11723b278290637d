"""`hpcmem lessons ...`: list, inspect and curate lessons across the store stack.

Each command calls one function of ``hpcmem.kb.lessons.curation`` or ``hpcmem.kb.lessons.portable``,
imported inside the command so `hpcmem --help` and recall never pay for the ORM.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any, List, Optional

import typer

from hpcmem.cli._output import emit_json, emit_jsonl, info, stdout
from hpcmem.cli._state import STATE

app = typer.Typer(help="List, review and curate lessons: propose to a lab, approve, promote, export, import.",
                  no_args_is_help=True)

SCOPE_HELP = "Only this store: user, lab:NAME or cluster."
ID_SCOPE_HELP = "Store holding the lesson, when its id is in several: user, lab:NAME or cluster."
OVERRIDE_HELP = "Approve despite blocking safety flags (needs --reason; audited)."


def _line(lesson: dict[str, Any]) -> str:
    flags = f" [{', '.join(f['code'] for f in lesson['safety_flags'])}]" if lesson["safety_flags"] else ""
    return (f"{lesson['lesson_id'][:8]}  {lesson['store']:<12} {lesson['status']:<9} "
            f"{lesson['provenance']['source']:<8} {lesson['category'] or '-':<14} {lesson['fix'][:70]}{flags}")


def embed_in_shared(store_label: str) -> None:
    """A lesson written to a lab or cluster store gets its vector now, by its writer: the
    readers' recalls never write to shared stores (see `hpcmem lessons embed`)."""
    if store_label == "user":
        return
    from hpcmem.kb.recall.embed import embed_new_lessons

    _done_count, warning = embed_new_lessons(STATE.stack.by_scope(store_label), STATE.config)
    if warning:
        from hpcmem.cli._output import stderr

        stderr.print(f"Warning: {warning}")


def _done(lesson: dict[str, Any], verb: str, json_: bool) -> None:
    if lesson.get("status") not in ("rejected", "expired"):
        embed_in_shared(lesson["store"])
    if json_:
        emit_json(lesson)
        return
    stdout.print(f"{verb} lesson {lesson['lesson_id']} in {lesson['store']} ({lesson['status']})")
    for flag in lesson["safety_flags"]:
        stdout.print(f"  warning [{flag['severity']}] {flag['code']}: {flag['message']}")


@app.command("list")
def list_(
    scope: Optional[str] = typer.Option(None, "--scope", help=SCOPE_HELP),
    status: List[str] = typer.Option([], "--status", help="Only these statuses (repeatable)."),
    category: Optional[str] = typer.Option(None, "--category", help="Only this failure category."),
    json_: bool = typer.Option(False, "--json", help="Print a JSON list."),
) -> None:
    """List lessons of every store you can read (or one scope)."""
    from hpcmem.kb.lessons.curation import list_lessons

    lessons = list_lessons(STATE.stack, scope=scope, statuses=status, category=category)
    if json_:
        emit_json(lessons)
        return
    if not lessons:
        info("no lessons")
    for lesson in lessons:
        stdout.print(_line(lesson))


@app.command("show")
def show(
    lesson_id: str = typer.Argument(..., help="Lesson id (the first 8 characters are enough)."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show one lesson with its evidence and audit history."""
    from hpcmem.kb.lessons.actions import describe_action
    from hpcmem.kb.lessons.curation import show_lesson

    lesson = show_lesson(STATE.stack, lesson_id, scope)
    if json_:
        emit_json(lesson)
        return
    prov = lesson["provenance"]
    stdout.print(f"lesson {lesson['lesson_id']} in {lesson['store']}: {lesson['status']}"
                 + (f" ({lesson['status_reason']})" if lesson["status_reason"] else ""))
    stdout.print(f"failure: {lesson['category']}  {lesson['template']}")
    if lesson["context"]:
        stdout.print(f"context: {lesson['context']}")
    if lesson.get("job_context"):
        from hpcmem.kb.jobs.context import describe_context

        stdout.print(f"job:     {describe_context(lesson['job_context'])}")
    stdout.print(f"cause:   {lesson['cause']}")
    stdout.print(f"fix:     {lesson['fix']}")
    if lesson["actions"]:
        stdout.print("do:      " + "; ".join(describe_action(a) for a in lesson["actions"]))
    for flag in lesson["safety_flags"]:
        stdout.print(f"warning [{flag['severity']}] {flag['code']}: {flag['message']}")
    stdout.print(f"source {prov['source']} by {prov['author'] or '-'}, confidence {lesson['confidence']:.2f}")
    aliases = lesson.get("aliases") or []
    stdout.print(f"known variants ({len(aliases)}):")
    for a in aliases:
        stdout.print(f"  {a['fingerprint']}  {a['category']}  {a['template']}  (from {a['source']})")
    stdout.print(f"evidence ({len(lesson['evidence'])}):")
    for e in lesson["evidence"]:
        stdout.print(f"  {e['kind']:<10} job {e['job_id'] or '-'}  {e['actor'] or ''}  {e['note'] or ''}")
    stdout.print("history:")
    for h in lesson["history"]:
        stdout.print(f"  {h['at'][:19]}  {h['actor']:<10} {h['action']:<16} {h['reason'] or ''}")


@app.command("edit")
def edit(
    lesson_id: str = typer.Argument(..., help="Lesson id."),
    cause: Optional[str] = typer.Option(None, "--cause", help="New cause."),
    fix: Optional[str] = typer.Option(None, "--fix", help="New fix."),
    action: Optional[List[str]] = typer.Option(None, "--action", help="Structured fix (repeatable); replaces all actions."),
    context: Optional[str] = typer.Option(None, "--context", help="New context."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print the edited lesson as JSON."),
) -> None:
    """Edit a lesson; the new text is redacted, sanitised and linted again."""
    from hpcmem.kb.lessons.curation import edit_lesson

    lesson = edit_lesson(STATE.stack, lesson_id, actor=getpass.getuser(), cause=cause, fix=fix, context=context,
                         actions=list(action) if action else None, scope=scope)
    _done(lesson, "edited", json_)


@app.command("propose")
def propose(
    lesson_id: str = typer.Argument(..., help="Lesson id (usually in your user store)."),
    to: str = typer.Option(..., "--to", help="Lab store to propose to: lab:NAME."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print the proposed copy as JSON."),
) -> None:
    """Propose a lesson to a lab: a generalised copy (no private paths or job ids) awaits review."""
    from hpcmem.kb.lessons.curation import propose_lesson

    lesson = propose_lesson(STATE.stack, lesson_id, to=to, actor=getpass.getuser(), scope=scope)
    _done(lesson, "proposed", json_)


@app.command("review")
def review(
    scope: Optional[str] = typer.Option(None, "--scope", help="Lab store to review (default: all your labs)."),
    json_: bool = typer.Option(False, "--json", help="Print the queue as JSON."),
) -> None:
    """The review queue: candidates with evidence, safety flags and a diff against known lessons."""
    from hpcmem.kb.lessons.curation import review_queue

    queue = review_queue(STATE.stack, scope)
    if json_:
        emit_json(queue)
        return
    if not queue:
        info("nothing to review")
    for item in queue:
        stdout.print(_line(item))
        if item["proposal"]:
            stdout.print(f"    {item['proposal']['note']}")
        stdout.print(f"    cause: {item['cause']}")
        evidence = ", ".join(f"{n} {kind}" for kind, n in item["evidence_summary"].items()) or "none"
        stdout.print(f"    evidence: {evidence}")
        if item.get("aliases"):
            stdout.print(f"    known variants: {len(item['aliases'])}")
        for flag in item["safety_flags"]:
            stdout.print(f"    warning [{flag['severity']}] {flag['code']}: {flag['message']}")
        for other in item["same_fingerprint"]:
            stdout.print(f"    same failure: lesson {other['lesson_id'][:8]} ({other['status']})")
            for line in other["diff"].splitlines()[2:]:
                stdout.print(f"      {line}")


@app.command("approve")
def approve(
    lesson_id: str = typer.Argument(..., help="Lesson id in a lab (or the cluster) store."),
    override_safety: bool = typer.Option(False, "--override-safety", help=OVERRIDE_HELP),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why (required with --override-safety)."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print the approved lesson as JSON."),
) -> None:
    """Approve a candidate: it becomes validated and curated."""
    from hpcmem.kb.lessons.curation import approve_lesson

    lesson = approve_lesson(STATE.stack, lesson_id, actor=getpass.getuser(), override_safety=override_safety,
                            reason=reason, scope=scope)
    _done(lesson, "approved", json_)


@app.command("reject")
def reject(
    lesson_id: str = typer.Argument(..., help="Lesson id."),
    reason: str = typer.Option(..., "--reason", help="Why it is rejected (kept with the lesson)."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print the lesson as JSON."),
) -> None:
    """Reject a lesson; recall stops showing it."""
    from hpcmem.kb.lessons.curation import reject_lesson

    _done(reject_lesson(STATE.stack, lesson_id, actor=getpass.getuser(), reason=reason, scope=scope), "rejected", json_)


@app.command("expire")
def expire(
    lesson_id: str = typer.Argument(..., help="Lesson id."),
    reason: str = typer.Option(..., "--reason", help="Why it no longer holds."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print the lesson as JSON."),
) -> None:
    """Expire a lesson by hand (revalidation will not bring it back)."""
    from hpcmem.kb.lessons.curation import expire_lesson

    _done(expire_lesson(STATE.stack, lesson_id, actor=getpass.getuser(), reason=reason, scope=scope), "expired", json_)


@app.command("promote")
def promote(
    lesson_id: str = typer.Argument(..., help="A validated lab lesson."),
    to: str = typer.Option("cluster", "--to", help="Only 'cluster'."),
    override_safety: bool = typer.Option(False, "--override-safety", help=OVERRIDE_HELP),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why (required with --override-safety)."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print the cluster copy as JSON."),
) -> None:
    """Promote a validated lab lesson to the cluster store."""
    from hpcmem.kb.lessons.curation import promote_lesson

    lesson = promote_lesson(STATE.stack, lesson_id, actor=getpass.getuser(), to=to,
                            override_safety=override_safety, reason=reason, scope=scope)
    _done(lesson, "promoted", json_)


@app.command("merge")
def merge(
    first: str = typer.Argument(..., help="Lesson id."),
    second: str = typer.Argument(..., help="Lesson id of a duplicate in the same store."),
    keep: Optional[str] = typer.Option(None, "--keep", help="Which one to keep (default: the first)."),
    scope: Optional[str] = typer.Option(None, "--scope", help=ID_SCOPE_HELP),
    json_: bool = typer.Option(False, "--json", help="Print the kept lesson as JSON."),
) -> None:
    """Merge two duplicate lessons: one keeps both's evidence, the other is rejected."""
    from hpcmem.kb.lessons.curation import merge_lessons

    lesson = merge_lessons(STATE.stack, first, second, actor=getpass.getuser(), keep=keep, scope=scope)
    if json_:
        emit_json(lesson)
        return
    stdout.print(f"merged {lesson['merged']} into {lesson['lesson_id']} in {lesson['store']} "
                 f"({lesson['evidence_moved']} evidence moved, {lesson['conditions_added']} condition(s) added)")


@app.command("embed")
def embed(
    scope: str = typer.Option("user", "--scope", help="Store whose lessons to embed: user, lab:NAME or cluster."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Give lessons without vectors their vectors (a store's maintainer or timer runs it; recall never
    writes to shared stores)."""
    from hpcmem.kb.recall.embed import embed_new_lessons
    from hpcmem.kb.errors import StoreError

    done, warning = embed_new_lessons(STATE.stack.by_scope(scope), STATE.config)
    if warning:
        raise StoreError(warning)
    if json_:
        emit_json({"scope": scope, "embedded": done})
        return
    stdout.print(f"{done} lesson signature(s) embedded in the {scope} store")


@app.command("export")
def export(
    scope: Optional[str] = typer.Option(None, "--scope", help=SCOPE_HELP),
    status: List[str] = typer.Option([], "--status", help="Only these statuses (repeatable)."),
) -> None:
    """Write lessons as JSONL on stdout (schemas/lesson.schema.json)."""
    from hpcmem.kb.lessons.portable import export_lessons

    count = 0
    for record in export_lessons(STATE.stack, scope=scope, statuses=status):
        emit_jsonl(record)
        count += 1
    info(f"exported {count} lesson(s)")


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="A JSONL file written by `hpcmem lessons export`."),
    scope: str = typer.Option(..., "--scope", help="Store to import into: user, lab:NAME or cluster."),
    keep_status: bool = typer.Option(
        False, "--keep-status", help="Keep the file's status, source, confidence and evidence instead of importing "
        "candidates for review (lab leads and cluster admins; audited)."),
    override_safety: bool = typer.Option(False, "--override-safety",
                                         help="With --keep-status: keep a validated status despite blocking "
                                              "safety flags (needs --reason; audited)."),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why (required with --override-safety)."),
    json_: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """Import lessons as candidates attributed to you, for review (idempotent by id; a newer
    updated_at replaces an older copy). The file's status and provenance are claims."""
    from hpcmem.kb.lessons.portable import import_lessons

    result = import_lessons(STATE.stack, file, scope=scope, actor=getpass.getuser(), keep_status=keep_status,
                            override_safety=override_safety, reason=reason)
    if json_:
        emit_json(result)
        return
    how = "with their status" if keep_status else "as candidates for review"
    reviewed = (f", {result['kept_reviewed']} kept (reviewed in the store; only --keep-status replaces it)"
                if result["kept_reviewed"] else "")
    stdout.print(f"imported {result['lessons']} lesson(s) into {result['store']} {how}: {result['created']} new, "
                 f"{result['updated']} updated, {result['unchanged']} unchanged, "
                 f"{result['kept_newer']} kept (store copy newer){reviewed}")
