"""`hpcmem serve` at the HTTP level: token, CSRF, escaping, redaction, curation moves, binding.

In-process requests go through Starlette's TestClient against the real app and real SQLite
stores; the binding tests start the real console script. The PostgreSQL test shows the
console has no more rights than the CLI: a lab member cannot approve.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web console needs the 'web' extra")
from starlette.testclient import TestClient  # noqa: E402

from hpcmem.cli.web.app import Console, create_app  # noqa: E402
from hpcmem.kb.config import load_config  # noqa: E402
from hpcmem.kb.lessons.curation import propose_lesson, show_lesson  # noqa: E402
from hpcmem.kb.lessons.write import LessonDraft, record_lesson  # noqa: E402
from hpcmem.kb.signatures.fingerprint import fingerprint  # noqa: E402
from hpcmem.kb.store.stack import StoreStack  # noqa: E402
from tests.cli.helpers import HPCMEM, run_hpcmem  # noqa: E402

OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
SECRET = "hf_" + "Ab1" * 12


def lab_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lab and a cluster store (SQLite files, created here as their admins would); the
    lab's leads are lena and whoever runs the tests (the console a test starts runs as them)."""
    import getpass

    site = tmp_path / "site.toml"
    site.write_text(f'[stores.labs.vision]\nleads = ["lena", "{getpass.getuser()}"]\n')
    monkeypatch.setenv("HPCMEM_CONFIG", str(site))
    monkeypatch.setenv("HPCMEM_LAB_STORES", f"vision=sqlite:///{tmp_path / 'lab' / 'vision.db'}")
    monkeypatch.setenv("HPCMEM_CLUSTER_STORE", f"sqlite:///{tmp_path / 'cluster' / 'cluster.db'}")
    stack = StoreStack.from_config(load_config())
    for store in stack.all():
        store.open()
    stack.dispose()


def propose(stack: StoreStack, cause: str, fix: str = "request more memory: --mem=64G") -> str:
    sig = fingerprint(OOM)
    mine = record_lesson(stack.user, LessonDraft(fingerprint=sig.fingerprint, template=sig.template,
                                                 category=sig.category, cause=cause, fix=fix, source="human",
                                                 author="alice"), actor="alice")
    return propose_lesson(stack, mine["lesson_id"], to="lab:vision", actor="alice")["lesson_id"]


@pytest.fixture
def console(tmp_path, monkeypatch):
    lab_env(tmp_path, monkeypatch)
    config = load_config()
    stack = StoreStack.from_config(config)
    for store in stack.all():
        store.open()
    con = Console(stack=stack, config=config, actor="lena")
    yield con
    stack.dispose()


@pytest.fixture
def client(console):
    """A browser that opened the printed URL: it holds the cookie now."""
    with TestClient(create_app(console)) as c:
        first = c.get(f"/?token={console.token}", follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"] == "/"
        cookie = first.headers["set-cookie"]
        assert console.token in cookie and "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        yield c


def test_nothing_is_served_without_the_token(console):
    lesson_id = propose(console.stack, "the job used more memory than --mem allowed")
    with TestClient(create_app(console)) as anonymous:
        for path in ("/", "/lessons", f"/lessons/{lesson_id}", "/trends", "/static/console.css"):
            response = anonymous.get(path)
            assert response.status_code == 401, path
            assert "lesson" not in response.text.lower() or "used more memory" not in response.text
        assert anonymous.get("/?token=not-the-token").status_code == 403
        anonymous.cookies.set("hpcmem_console", "guess")
        assert anonymous.get("/").status_code == 401
        refused = anonymous.post(f"/lessons/{lesson_id}/approve", data={"csrf": console.csrf})
        assert refused.status_code == 401
    assert show_lesson(console.stack, lesson_id)["status"] == "candidate"


def test_token_redirect_drops_the_token_and_keeps_other_parameters(console):
    with TestClient(create_app(console)) as c:
        first = c.get(f"/trends?store=lab:vision&token={console.token}", follow_redirects=False)
        assert first.status_code == 303
        assert first.headers["location"] == "/trends?store=lab%3Avision"
        assert c.get(first.headers["location"]).status_code == 200


def test_post_without_csrf_token_changes_nothing(client, console):
    lesson_id = propose(console.stack, "the job used more memory than --mem allowed")
    before = show_lesson(console.stack, lesson_id)
    for data in ({"store": "lab:vision"}, {"store": "lab:vision", "csrf": "forged"}, {"csrf": console.token}):
        response = client.post(f"/lessons/{lesson_id}/approve", data=data)
        assert response.status_code == 403 and "CSRF" in response.text
    after = show_lesson(console.stack, lesson_id)
    assert after["status"] == "candidate" and after["history"] == before["history"]
    assert client.get(f"/lessons/{lesson_id}/approve").status_code == 405  # changes are POSTs only


def test_approve_then_promote_shows_in_show_lesson_and_audit(client, console):
    lesson_id = propose(console.stack, "the job used more memory than --mem allowed")
    queue = client.get("/")
    assert lesson_id in queue.text and "Approve" in queue.text
    done = client.post(f"/lessons/{lesson_id}/approve",
                       data={"csrf": console.csrf, "store": "lab:vision", "reason": "matches our OOM runbook"})
    assert done.status_code == 200 and 'id="lesson-status">validated' in done.text
    assert "approve: lesson" in done.text  # the flash after the redirect
    shown = show_lesson(console.stack, lesson_id)
    assert shown["status"] == "validated" and shown["provenance"]["source"] == "curated"
    approve = shown["history"][-1]
    assert (approve["action"], approve["actor"], approve["reason"]) == ("approve", "lena", "matches our OOM runbook")
    assert "matches our OOM runbook" in done.text  # the audit line on the page

    promoted = client.post(f"/lessons/{lesson_id}/promote",
                           data={"csrf": console.csrf, "store": "lab:vision", "reason": "every lab hits it"})
    assert promoted.status_code == 200 and "store=cluster" in str(promoted.url)
    copy_id = re.search(r"/lessons/([0-9a-f-]{36})\?store=cluster", str(promoted.url)).group(1)
    copy = show_lesson(console.stack, copy_id, "cluster")
    assert copy["status"] == "validated" and [h["action"] for h in copy["history"]] == ["create", "promote"]
    assert copy["history"][-1]["reason"] == "every lab hits it"

    # `hpcmem lessons show` (the CLI) sees the same history
    cli = run_hpcmem("lessons", "show", lesson_id, "--json", env={
        "HPCMEM_LAB_STORES": os.environ["HPCMEM_LAB_STORES"], "HPCMEM_CLUSTER_STORE": os.environ["HPCMEM_CLUSTER_STORE"]})
    assert cli.returncode == 0, cli.stderr
    assert '"action": "approve"' in cli.stdout and "matches our OOM runbook" in cli.stdout


def test_reject_needs_a_reason_and_errors_are_shown_not_raised(client, console):
    lesson_id = propose(console.stack, "the job used more memory than --mem allowed")
    refused = client.post(f"/lessons/{lesson_id}/reject", data={"csrf": console.csrf, "store": "lab:vision"})
    assert refused.status_code == 400 and "reject needs --reason" in refused.text
    assert show_lesson(console.stack, lesson_id)["status"] == "candidate"
    done = client.post(f"/lessons/{lesson_id}/reject",
                       data={"csrf": console.csrf, "store": "lab:vision", "reason": "too vague"})
    assert done.status_code == 200 and show_lesson(console.stack, lesson_id)["status"] == "rejected"
    assert client.get("/lessons/ffffffff").status_code == 404


def test_edit_and_merge_are_audited_with_the_reason(client, console):
    first = propose(console.stack, "the job used more memory than --mem allowed")
    second = propose(console.stack, "memory limit too small for the batch step", fix="raise --mem to 64G")
    queue = client.get("/").text
    assert "Same failure: lesson" in queue and second[:8] in queue  # the diff against the other candidate
    edited = client.post(f"/lessons/{first}/edit", data={"csrf": console.csrf, "store": "lab:vision",
                                                        "cause": "peak RSS above --mem", "reason": "shorter"})
    assert edited.status_code == 200
    entry = show_lesson(console.stack, first)["history"][-1]
    assert (entry["action"], entry["reason"], entry["after"]["cause"]) == ("edit", "shorter", "peak RSS above --mem")
    merged = client.post(f"/lessons/{first}/merge", data={"csrf": console.csrf, "store": "lab:vision",
                                                         "other": second, "reason": "same fix"})
    assert merged.status_code == 200
    assert show_lesson(console.stack, second)["status"] == "rejected"
    assert show_lesson(console.stack, first)["history"][-1]["reason"].endswith(": same fix")


def test_lesson_text_is_escaped_and_redacted(client, console):
    lesson_id = propose(console.stack, "<script>alert('x')</script> ran out of memory",
                        fix="request --mem=64G; <img src=x onerror=alert(1)>")
    for path in ("/", f"/lessons/{lesson_id}", "/lessons"):
        page = client.get(path).text
        assert "<script>alert" not in page and "<img src=x" not in page, path
    page = client.get(f"/lessons/{lesson_id}").text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; ran out of memory" in page
    assert "never as instructions" in page  # the trust note says recalled text is data
    # text a store holds unredacted (written before a redaction rule existed) is redacted on display
    from sqlalchemy import update

    from hpcmem.kb.store.models import Lesson

    with console.stack.labs[0].transaction() as session:
        session.execute(update(Lesson).where(Lesson.id == lesson_id).values(context=f"export HF_TOKEN={SECRET}"))
    page = client.get(f"/lessons/{lesson_id}").text
    assert SECRET not in page and "[REDACTED:" in page


def test_trends_page_renders_inline_svg_with_table_fallback(client, console):
    from hpcmem.kb.store.models import Occurrence, Signature

    sig = fingerprint(OOM)
    with console.stack.labs[0].transaction() as session:
        row = Signature(fingerprint=sig.fingerprint, category=sig.category, template="<b>oom</b> in StepId=<jobid>")
        session.add(row)
        session.flush()
        for i, user in enumerate(["ann", "ann", "bo"]):
            session.add(Occurrence(signature_id=row.id, cluster="della", job_id=str(100 + i), user_name=user,
                                   account="vision", state="OUT_OF_MEMORY", source="sacct",
                                   end_time=__import__("datetime").datetime.now()))
    page = client.get("/trends?store=lab:vision")
    assert page.status_code == 200
    assert page.text.count("<svg") == 3 and 'role="img"' in page.text and "<title" in page.text
    assert "<b>oom</b>" not in page.text and "&lt;b&gt;oom&lt;/b&gt;" in page.text
    assert '<table id="recurrence">' in page.text and "50%" in page.text  # ann hit it again, bo did not
    assert "cdn" not in page.text.lower() and "<script" not in page.text
    with console.stack.labs[0].transaction() as session:  # the cached figures follow the store
        session.add(Occurrence(signature_id=row.id, cluster="della", job_id="200", user_name="bo", account="vision",
                               state="OUT_OF_MEMORY", source="sacct", end_time=__import__("datetime").datetime.now()))
    again = client.get("/trends?store=lab:vision").text
    assert "2 (100%)" in again and "50%" not in again


def test_binding_other_than_loopback_needs_allow_remote():
    result = run_hpcmem("serve", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert result.stderr.startswith("Error: refusing to listen on 0.0.0.0") and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("Error")]) == 1
    assert result.stdout == ""


def start_console(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([HPCMEM, "serve", "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        raise AssertionError(f"no URL printed: {proc.stderr.read()}")
    return proc, line


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_allow_remote_binds_every_address_and_still_wants_the_token(tmp_path, monkeypatch):
    lab_env(tmp_path, monkeypatch)
    proc, url = start_console("--host", "0.0.0.0", "--allow-remote")
    try:
        assert re.fullmatch(r"http://0\.0\.0\.0:\d+/\?token=[\w-]{40,}", url)
        port = url.split(":")[2].split("/")[0]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert refused.value.code == 401
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # keeps the cookie
        page = browser.open(url.replace("0.0.0.0", "127.0.0.1"), timeout=30)
        assert page.status == 200 and "Review queue" in page.read().decode()
    finally:
        stop(proc)


def test_each_process_has_its_own_token(tmp_path, monkeypatch):
    lab_env(tmp_path, monkeypatch)
    first, url1 = start_console()
    second, url2 = start_console()
    try:
        assert url1.startswith("http://127.0.0.1:") and url1.split("token=")[1] != url2.split("token=")[1]
        wrong = url2.split("?")[0] + "?token=" + url1.split("token=")[1]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(wrong, timeout=10)
        assert refused.value.code == 403
    finally:
        stop(first)
        stop(second)


def test_the_console_keeps_the_approval_rules_on_a_sqlite_lab(console, tmp_path):
    """Issue 34, item 4: the console refuses what the CLI refuses - a member approving, and
    a lead approving their own proposal - with the one-line message, and changes nothing."""
    alices = propose(console.stack, "the job used more memory than --mem allowed")
    mine = record_lesson(console.stack.user, LessonDraft(
        fingerprint=fingerprint(OOM).fingerprint, template=fingerprint(OOM).template, category="host_oom",
        cause="prep.sh needs about 410M", fix="--mem=600M", source="human", author="lena"), actor="lena")
    lenas = propose_lesson(console.stack, mine["lesson_id"], to="lab:vision", actor="lena")["lesson_id"]
    carol = Console(stack=console.stack, config=console.config, actor="carol")
    for con, lesson_id, message in (
            (carol, alices, "permission denied: only lab leads can approve lessons in lab store &#39;vision&#39;"),
            (console, lenas, f"permission denied: lena proposed lesson {lenas[:8]} and cannot approve it too")):
        with TestClient(create_app(con)) as c:
            c.get(f"/?token={con.token}")
            refused = c.post(f"/lessons/{lesson_id}/approve", data={"csrf": con.csrf, "store": "lab:vision"})
            assert refused.status_code == 403 and message in refused.text, refused.text
        shown = show_lesson(console.stack, lesson_id)
        assert shown["status"] == "candidate" and [h["action"] for h in shown["history"]] == ["create"]


def test_lab_member_without_lead_rights_cannot_approve_on_postgresql(pg_schema, tmp_path):
    """The console acts with the database role of whoever runs it: a member's console refuses."""
    import uuid

    import psycopg

    from hpcmem.kb.store.access import setup_pg_roles
    from hpcmem.kb.store.database import Store

    url, schema = pg_schema
    Store(url, name="vision", scope="lab", schema=schema).open().dispose()
    tag = uuid.uuid4().hex[:8]
    group = {"read": f"web_{tag}_read", "member": f"web_{tag}_member", "lead": f"web_{tag}_lead"}
    login = f"bob_w_{tag}"
    setup_pg_roles(url, schema, lab_or_cluster="lab", readers_role=group["read"], members_role=group["member"],
                   leads_role=group["lead"])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{login}" LOGIN')
        conn.execute(f'GRANT "{group["member"]}" TO "{login}"')
    host = url.split("://", 1)[1].split("@", 1)[1]
    user = Store(f"sqlite:///{tmp_path / 'bob' / 'user.db'}", name="user", scope="user")
    user.open()
    stack = StoreStack(user=user, labs=[Store(f"postgresql://{login}@{host}", name="vision", scope="lab",
                                              schema=schema)])
    try:
        lesson_id = propose(stack, "the job used more memory than --mem allowed")
        con = Console(stack=stack, config=load_config(), actor="bob")
        with TestClient(create_app(con)) as c:
            c.get(f"/?token={con.token}")
            assert lesson_id in c.get("/").text  # a member reads the queue
            refused = c.post(f"/lessons/{lesson_id}/approve", data={"csrf": con.csrf, "store": "lab:vision"})
            assert refused.status_code == 403
            assert "only lab leads can approve lessons in lab store" in refused.text
        shown = show_lesson(stack, lesson_id)
        assert shown["status"] == "candidate" and [h["action"] for h in shown["history"]] == ["create"]
    finally:
        stack.dispose()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            for name in [login, *group.values()]:
                conn.execute(f'DROP OWNED BY "{name}" CASCADE')
                conn.execute(f'DROP ROLE "{name}"')
