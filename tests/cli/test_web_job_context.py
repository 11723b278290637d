"""The console's lesson page shows the job context a lesson was born with (issue 26)."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="the web console needs the 'web' extra")
from starlette.testclient import TestClient  # noqa: E402

from hpcmem.cli.web.app import create_app  # noqa: E402
from hpcmem.kb.lessons.write import LessonDraft, record_lesson  # noqa: E402
from hpcmem.kb.signatures.fingerprint import fingerprint  # noqa: E402
from tests.cli.test_web import OOM, client, console  # noqa: E402,F401 - fixtures


def test_the_lesson_page_shows_the_jobs_context(console, client):  # noqa: F811
    sig = fingerprint(OOM)
    lesson = record_lesson(console.stack.user, LessonDraft(
        fingerprint=sig.fingerprint, template=sig.template, category=sig.category, cause="8G was too little",
        fix="ask 32G", source="human", author="lena",
        job_context={"partition": "cpu", "mem_mb": 8192.0, "cpus": 8, "modules": ["gcc/13.1.0"],
                     "command": "assemble.sh"}), actor="lena")
    page = client.get(f"/lessons/{lesson['lesson_id']}?store=user")
    assert page.status_code == 200
    assert "partition cpu, mem 8G, cpus 8, modules gcc/13.1.0, program assemble.sh" in page.text
