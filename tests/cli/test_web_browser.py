"""The console in a real browser: Debian's chromium driven by Playwright, fully offline.

Playwright is pointed at /usr/bin/chromium (`playwright install` would download its own
build). Without chromium or playwright the test skips; HPCMEM_REQUIRE_BROWSER=1 (set by
.ci/run) makes that a failure, so CI always runs it.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import shutil

import pytest

REQUIRE = os.environ.get("HPCMEM_REQUIRE_BROWSER") == "1"  # read before conftest clears HPCMEM_*
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")


def _need(problem: str | None) -> None:
    if problem:
        if REQUIRE:
            pytest.fail(problem + " (HPCMEM_REQUIRE_BROWSER=1 makes the browser test mandatory)")
        pytest.skip(problem)


@pytest.fixture(scope="module")
def browser():
    _need(None if os.path.exists(CHROMIUM) else f"no chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright is not installed (the 'test' extra)")
    with sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_lead_approves_a_candidate_in_the_browser(browser, tmp_path, monkeypatch):
    from hpcmem.kb.config import load_config
    from hpcmem.kb.lessons.curation import show_lesson
    from hpcmem.kb.store.models import Occurrence, Signature
    from hpcmem.kb.signatures.fingerprint import fingerprint
    from hpcmem.kb.store.stack import StoreStack
    from tests.cli.test_web import OOM, lab_env, propose, start_console, stop

    lab_env(tmp_path, monkeypatch)
    stack = StoreStack.from_config(load_config())
    for store in stack.all():
        store.open()
    lesson_id = propose(stack, "<script>document.title='owned'</script>the job used more memory than --mem")
    sig = fingerprint(OOM)
    with stack.labs[0].transaction() as session:  # a few failures for the dashboard
        row = session.query(Signature).filter_by(fingerprint=sig.fingerprint).one_or_none()
        if row is None:
            row = Signature(fingerprint=sig.fingerprint, category=sig.category, template=sig.template)
            session.add(row)
            session.flush()
        now = dt.datetime.now(dt.timezone.utc)
        for i, user in enumerate(["ann", "ann", "bo", "cy", "cy"]):
            session.add(Occurrence(signature_id=row.id, cluster="della", job_id=str(500 + i), user_name=user,
                                   account="vision", state="OUT_OF_MEMORY", source="sacct",
                                   end_time=now - dt.timedelta(days=3 * i)))
    proc, url = start_console()
    page = browser.new_page()
    try:
        page.goto(url)
        assert "token=" not in page.url  # the token moved into the HttpOnly cookie
        assert page.context.cookies()[0]["httpOnly"] is True
        card = page.locator(f"#lesson-{lesson_id}")
        assert card.locator(".cause").inner_text().startswith("<script>")  # shown as text, not run
        assert page.title() != "owned"
        approve = card.locator("form.action-approve")
        approve.locator("input[name=reason]").fill("matches the OOM runbook")
        approve.locator("button").click()
        page.wait_for_url("**/lessons/**")
        assert page.locator("#lesson-status").inner_text() == "validated"
        audit_line = page.locator("#history tr.audit-approve")
        assert audit_line.count() == 1
        assert getpass.getuser() in audit_line.inner_text() and "matches the OOM runbook" in audit_line.inner_text()
        assert show_lesson(stack, lesson_id)["status"] == "validated"  # the store agrees

        page.goto(url.split("?")[0] + "trends?store=lab:vision")
        chart = page.locator("svg.chart").first
        chart.wait_for(state="visible")
        box = chart.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 100
        assert chart.locator("title").first.text_content().startswith("Failures per category per week")
        assert chart.locator("rect").count() >= 2  # bars and legend drawn
        assert page.locator("#recurrence").inner_text().count("vision") >= 1
    finally:
        page.close()
        stop(proc)
        stack.dispose()
