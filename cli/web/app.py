"""The lab lead's web console behind `hpcmem serve`: Starlette routes over ``kb.lessons.curation``.

Why Starlette (with Jinja2, served by uvicorn): it is small, typed and well kept, it is
already installed with the MCP SDK (``hpcmem mcp``), and the console needs only routing,
forms, cookies and static files: no ORM layer, no validation framework, no JavaScript.

Access model (docs/web-console.md):

- one random token per process; the first request carries it in the URL (``?token=``),
  gets it back as an HttpOnly, SameSite=Strict cookie and is redirected to the same page
  without it, so the token leaves the address bar and the history;
- every other request without the cookie is refused (401; a wrong token is 403),
  static files included;
- every change is a POST whose form carries a second per-process token (CSRF); a POST
  without it is refused (403) before anything is read or written;
- the console acts as the OS user and database roles running it: every move calls the
  same library function as `hpcmem lessons ...`, so it never has more rights than the CLI.

Every value shown passes ``kb.safety.redact`` (Jinja's ``finalize``) and Jinja's autoescape, so a
cause containing ``<script>`` is shown as text; charts escape their own labels.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from hpcmem.kb.jobs.context import describe_context
from hpcmem.cli.web import charts
from hpcmem.kb.errors import HpcmemError, InputError, NotFound, PermissionDenied, StoreError
from hpcmem.kb.safety.redact import redact_text
from hpcmem.kb.safety.trust import trust_level

HERE = Path(__file__).resolve().parent
ACTIONS = ("approve", "reject", "expire", "promote", "edit", "merge")
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                                 b"frame-ancestors 'none'; base-uri 'none'"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]


@dataclass
class Console:
    """What every request needs: the stack, who acts, and this process's two secrets."""

    stack: Any
    config: Any
    actor: str
    scope: str | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    cookie_name: str = "hpcmem_console"
    secure_cookie: bool = False
    # Curation moves run one at a time: the store stack is shared by the server's threads.
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    flashes: dict[str, str] = field(default_factory=dict)
    # store label -> (data version, week, trends): the dashboard's figures until the store changes
    trends_cache: dict[str, tuple[Any, Any, Any]] = field(default_factory=dict)

    def flash(self, message: str) -> str:
        key = secrets.token_urlsafe(8)
        if len(self.flashes) > 200:  # nobody reads old ones
            self.flashes.clear()
        self.flashes[key] = message
        return key


def _same(given: str | None, expected: str) -> bool:
    return bool(given) and secrets.compare_digest(given.encode(), expected.encode())


class TokenGate:
    """ASGI middleware: nothing is served without the token; security headers on everything."""

    def __init__(self, app, console: Console) -> None:
        self.app, self.console = app, console

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        request = Request(scope)
        console = self.console
        given = request.query_params.get("token")
        if given is not None:
            if not _same(given, console.token):
                response: Response = PlainTextResponse("wrong access token\n", status_code=403)
            else:
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = scope.get("root_path", "") + _route_path(scope) + ("?" + urlencode(rest) if rest else "")
                response = RedirectResponse(target or "/", status_code=303)
                response.set_cookie(console.cookie_name, console.token, httponly=True, samesite="strict",
                                    secure=console.secure_cookie, path=scope.get("root_path") or "/")
            await response(scope, receive, send_with_headers)
            return
        if not _same(request.cookies.get(console.cookie_name), console.token):
            response = PlainTextResponse("hpcmem console: open the URL `hpcmem serve` printed; it carries the "
                                         "access token.\n", status_code=401)
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


def _route_path(scope) -> str:
    from starlette._utils import get_route_path

    return get_route_path(scope) or "/"


def _finalize(value: Any) -> Any:
    # Everything a template prints is redacted; markup we built ourselves (charts) already is.
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return redact_text(value)


def _templates() -> Environment:
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(default=True),
                      finalize=_finalize, trim_blocks=True, lstrip_blocks=True)
    env.filters["trust"] = trust_level
    env.filters["pct"] = lambda v: "-" if v is None else f"{v:.0%}"
    env.filters["q"] = lambda v: quote(str(v), safe="")
    env.filters["job_context"] = describe_context
    return env


STATUS_FOR = ((PermissionDenied, 403), (NotFound, 404), (InputError, 400), (StoreError, 503))


def _status(exc: HpcmemError) -> int:
    return next((code for kind, code in STATUS_FOR if isinstance(exc, kind)), 400)


def _as_library_error(exc: Exception) -> HpcmemError | None:
    if isinstance(exc, HpcmemError):
        return exc
    from hpcmem.kb.store.access import as_permission_denied

    return as_permission_denied(exc)


def create_app(console: Console) -> Starlette:
    env = _templates()

    def render(request: Request, name: str, http_status: int = 200, **ctx: Any) -> HTMLResponse:
        flash = console.flashes.pop(request.query_params.get("flash", ""), None)
        page = env.get_template(name).render(
            root=request.scope.get("root_path", ""), csrf=Markup(console.csrf), actor=console.actor,
            scope=console.scope, flash=flash, request_path=_route_path(request.scope), **ctx)
        return HTMLResponse(page, status_code=http_status)

    def error_page(request: Request, exc: HpcmemError) -> HTMLResponse:
        return render(request, "error.html", http_status=_status(exc), error=str(exc), hint=getattr(exc, "hint", None))

    async def call(fn, *args, **kwargs):
        """Run a library call in a worker thread; database refusals become PermissionDenied."""
        try:
            return await run_in_threadpool(fn, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised unless the library or the database refused
            known = _as_library_error(exc)
            if known is None or known is exc:
                raise
            raise known from None

    async def queue(request: Request) -> Response:
        from hpcmem.kb.lessons.curation import review_queue

        try:
            items = await call(review_queue, console.stack, console.scope)
        except HpcmemError as exc:
            return error_page(request, exc)
        labs: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            labs.setdefault(item["store"], []).append(item)
        return render(request, "queue.html", labs=labs)

    async def lessons(request: Request) -> Response:
        from hpcmem.kb.lessons.curation import list_lessons

        status = [s for s in request.query_params.getlist("status") if s]
        store = request.query_params.get("store") or console.scope
        try:
            rows = await call(list_lessons, console.stack, scope=store, statuses=status)
        except HpcmemError as exc:
            return error_page(request, exc)
        return render(request, "lessons.html", lessons=rows, status=status, store=store or "",
                      stores=_store_labels(console))

    def _lesson_context(ident: str, store: str | None) -> dict[str, Any]:
        from hpcmem.kb.lessons.curation import list_lessons, show_lesson

        lesson = show_lesson(console.stack, ident, store or console.scope)
        known = {lesson["fingerprint"], *(a["fingerprint"] for a in lesson.get("aliases") or [])}
        siblings = [
            other for other in list_lessons(console.stack, scope=lesson["store"])
            if other["lesson_id"] != lesson["lesson_id"] and other["status"] != "rejected"
            and ({other["fingerprint"], *(a["fingerprint"] for a in other.get("aliases") or [])} & known)
        ]
        reval = [h for h in lesson["history"] if h["action"] == "revalidate"]
        return {"lesson": lesson, "siblings": siblings, "last_revalidation": reval[-1] if reval else None,
                "timeline": sorted(lesson["evidence"], key=lambda e: e["at"] or "")}

    async def lesson_page(request: Request) -> Response:
        try:
            ctx = await call(_lesson_context, request.path_params["lesson_id"], request.query_params.get("store"))
        except HpcmemError as exc:
            return error_page(request, exc)
        return render(request, "lesson.html", **ctx)

    def _apply(action: str, ident: str, store: str | None, form: dict[str, str]) -> tuple[dict[str, Any], str]:
        from hpcmem.kb.lessons import curation

        reason = (form.get("reason") or "").strip() or None
        override = form.get("override_safety") == "on"
        who = {"actor": console.actor, "scope": store}
        with console.write_lock:
            if action == "approve":
                done = curation.approve_lesson(console.stack, ident, override_safety=override, reason=reason, **who)
            elif action == "reject":
                done = curation.reject_lesson(console.stack, ident, reason=reason or "", **who)
            elif action == "expire":
                done = curation.expire_lesson(console.stack, ident, reason=reason or "", **who)
            elif action == "promote":
                done = curation.promote_lesson(console.stack, ident, override_safety=override, reason=reason, **who)
            elif action == "edit":
                fields = {k: form[k] for k in ("cause", "fix", "context") if form.get(k) is not None}
                done = curation.edit_lesson(console.stack, ident, reason=reason, **fields, **who)
            else:  # merge
                other = (form.get("other") or "").strip()
                if not other:
                    raise InputError("choose the lesson to merge into this one")
                done = curation.merge_lessons(console.stack, ident, other, keep=ident, reason=reason, **who)
            message = f"{action}: lesson {done['lesson_id'][:8]} in {done['store']} is {done['status']}"
            if done["status"] not in ("rejected", "expired") and done["store"] != "user":
                # like the CLI: the writer of a shared store embeds what it wrote
                from hpcmem.kb.recall.embed import embed_new_lessons

                _count, warning = embed_new_lessons(console.stack.by_scope(done["store"]), console.config)
                if warning:
                    message += f" (warning: {warning})"
        return done, message

    async def lesson_action(request: Request) -> Response:
        action, ident = request.path_params["action"], request.path_params["lesson_id"]
        if action not in ACTIONS:
            return PlainTextResponse("unknown action\n", status_code=404)
        form = await request.form()
        if not _same(form.get("csrf"), console.csrf):
            return PlainTextResponse("refused: the form's CSRF token is missing or wrong; reload the page\n",
                                     status_code=403)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        store = fields.get("store") or None
        try:
            done, message = await call(_apply, action, ident, store, fields)
        except HpcmemError as exc:
            try:
                ctx = await call(_lesson_context, ident, store)
            except HpcmemError:
                return error_page(request, exc)
            return render(request, "lesson.html", http_status=_status(exc), error=str(exc),
                          hint=getattr(exc, "hint", None), **ctx)
        root = request.scope.get("root_path", "")
        target = f"{root}/lessons/{quote(done['lesson_id'])}?store={quote(done['store'])}&flash={console.flash(message)}"
        return RedirectResponse(target, status_code=303)

    def _cached_trends(label: str, store) -> dict[str, Any]:
        """Aggregating 10^6 occurrences takes most of a second; reuse it until the data changes."""
        import datetime as dt

        from hpcmem.kb.jobs.trends import data_version, store_trends

        version, today = data_version(store), dt.date.today()
        hit = console.trends_cache.get(label)
        if hit is not None and hit[:2] == (version, today):
            return hit[2]
        data = store_trends(store).as_dict()
        console.trends_cache[label] = (version, today, data)
        return data

    async def trends(request: Request) -> Response:
        labels = _store_labels(console)
        label = request.query_params.get("store") or (console.scope or (labels[1] if len(labels) > 1 else labels[0]))
        try:
            store = console.stack.by_scope(label)
            await call(store.open, create=store is console.stack.user)
            data = await call(_cached_trends, label, store)
        except HpcmemError as exc:
            return error_page(request, exc)
        recurrence = data["recurrence"]
        chart = {
            "weekly": charts.stacked_weeks(data["weeks"], data["weekly"], title=f"Failures per category per week, {label}"),
            "top": charts.hbars([(f"{t['category']}: {t['template']}", t["repeat_users"],
                                  f"{t['repeat_users']} of {t['users']} users hit it again ({t['hits']} failures)")
                                 for t in data["top"]], title="Signatures most often hit again (users)"),
            "recurrence": charts.paired_shares(
                [(r["lab"], r["uncovered_share"], r["covered_share"]) for r in recurrence],
                title="Share of users who hit a failure signature again, per lab",
                labels=("first hit before any lesson", "first hit with a lesson")),
        }
        return render(request, "trends.html", data=data, chart=chart, store=label, stores=labels)

    routes = [
        Route("/", queue),
        Route("/lessons", lessons),
        Route("/lessons/{lesson_id}", lesson_page),
        Route("/lessons/{lesson_id}/{action}", lesson_action, methods=["POST"]),
        Route("/trends", trends),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(TokenGate, console=console)
    return app


def _store_labels(console: Console) -> list[str]:
    from hpcmem.kb.lessons.curation import scope_label

    if console.scope:
        return [console.scope]
    return [scope_label(s) for s in console.stack.all()]
