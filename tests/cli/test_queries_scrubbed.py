"""Queries and fingerprinted text go through the same normalisation and redaction as what is
stored (issue 32): record, recall (CLI, --batch, human output), `hpcmem fingerprint`,
feedback's alias and the MCP recall/record tools fingerprint ``signature_text(text)``.

So a query that carries colour codes, an escape sequence, a zero-width character or a
secret computes the fingerprint of the clean text its lesson was recorded from (and the
other way round), and no secret reaches any output. Each trick of tests/kb/safety/fakes.py
(the secret hidden from a redactor that reads the raw text) is put on an error line of its
own; "shown" is the same line as a terminal shows it (codes and invisible characters gone,
the secret in clear). Real console script (in-process) and MCP server, real SQLite store;
outputs searched for every 16-character piece of each secret."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from hpcmem.kb.safety.lint import sanitize_text
from tests.cli.inprocess import invoke
from tests.kb.safety.fakes import ALNUM, leaked, run, tricks

TRICKS = tricks(offset=5)
WORDS = ("wandb", "github", "gitlab", "registry", "mirror", "vault", "artifact", "service")  # one failure each
RAW = [f"RuntimeError: {WORDS[i]} login failed: {text}" for i, (_n, text, _s) in enumerate(TRICKS)]
SHOWN = [sanitize_text(line, sys.maxsize) for line in RAW]
# The tricks whose raw and shown lines fingerprinted differently before (all but the
# %-escape, which the redactor reads in both).
HIDDEN = [i for i, (name, _t, _s) in enumerate(TRICKS) if not name.startswith("%")]
TOKEN = "ghp_" + run(ALNUM, 36, start=9, step=29)  # names itself: half of it is no token
BOX = re.compile(r"[\s\u2500-\u257f]")  # whitespace and box drawing: a secret wrapped in a panel is found too


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def assert_no_secret(*blobs: str | bytes) -> None:
    blobs = (*blobs, *(BOX.sub("", b) for b in blobs if isinstance(b, str)))
    found = {name: leaked(secret, *blobs)[:1] for name, _text, secret in TRICKS}
    assert not any(found.values()), {name: piece for name, piece in found.items() if piece}


def store_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "data").rglob("*")) if p.is_file())


def record(error: str, i: int) -> dict:
    done = ok(invoke("record", "--error", error, "--cause", f"cause {i}", "--fix", f"fix number {WORDS[i]}", "--json"))
    assert_no_secret(done.stdout, done.stderr)
    return json.loads(done.stdout)


def recall_batch(errors: list[str]) -> list[dict]:
    lines = "".join(json.dumps({"id": i, "error": e}) + "\n" for i, e in enumerate(errors))
    done = invoke("recall", "--batch", "-", "--no-model", input=lines)
    assert done.returncode in (0, 1), done.stderr
    assert_no_secret(done.stdout, done.stderr)
    return sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda r: r["id"])


def test_a_query_with_codes_or_a_secret_finds_the_lesson_recorded_from_the_clean_text(hpcmem_home: Path):
    lessons = [record(shown, i) for i, shown in enumerate(SHOWN)]
    assert len({l["fingerprint"] for l in lessons}) == len(TRICKS)

    for result, lesson in zip(recall_batch(RAW), lessons):
        assert result["query"]["fingerprint"] == lesson["fingerprint"], result["query"]
        top = result["matches"][0]
        assert (top["lesson_id"], top["match_kind"], top["found_by"]) == (lesson["lesson_id"], "exact", "exact")
        assert "[REDACTED:" in result["query"]["template"]

    # the human output, and `hpcmem fingerprint` (one message a line: the raw lines hold no newline)
    for i, raw in enumerate(RAW):
        shown = ok(invoke("recall", raw, "--no-model"))
        assert f"fix number {WORDS[i]}" in shown.stdout
        assert_no_secret(shown.stdout, shown.stderr)
    printed = ok(invoke("fingerprint", input="\n".join(RAW) + "\n"))
    assert_no_secret(printed.stdout, printed.stderr)
    assert [json.loads(line)["fingerprint"] for line in printed.stdout.splitlines()] == [l["fingerprint"] for l in lessons]
    assert_no_secret(store_bytes(hpcmem_home))


def test_a_lesson_recorded_from_the_raw_text_is_found_by_the_clean_text_and_feedback_aliases_agree(hpcmem_home: Path):
    lessons = [record(raw, i) for i, raw in enumerate(RAW)]
    for result, lesson in zip(recall_batch(SHOWN), lessons):
        assert (result["matches"][0]["lesson_id"], result["matches"][0]["found_by"]) == (lesson["lesson_id"], "exact")

    # A recurrence worded otherwise, confirmed with its raw text, is found by its shown text.
    reworded = [line.replace("login failed", "token refused at startup") for line in RAW]
    for i in HIDDEN:
        done = ok(invoke("feedback", lessons[i]["lesson_id"], "--worked", "--error", reworded[i], "--json"))
        assert_no_secret(done.stdout, done.stderr)
    shown = [sanitize_text(line, sys.maxsize) for line in reworded]
    results = recall_batch([shown[i] for i in HIDDEN])
    assert [(r["matches"][0]["lesson_id"], r["matches"][0]["found_by"]) for r in results] == \
        [(lessons[i]["lesson_id"], "alias") for i in HIDDEN]
    assert_no_secret(store_bytes(hpcmem_home))


def test_mcp_record_and_recall(hpcmem_home: Path):
    from tests.cli.test_mcp_hostile import RawServer, call_line

    server = RawServer(hpcmem_home)
    try:
        for i, raw in enumerate(RAW):
            server.send(call_line(100 + i, "record", json.dumps({"error": raw, "cause": f"cause {i}",
                                                                 "fix": f"fix number {WORDS[i]}"})))
        recorded = {r["id"]: r["result"] for r in server.replies(len(RAW))}
        for i in range(len(RAW)):
            server.send(call_line(200 + i, "recall", json.dumps({"error": SHOWN[i]})),
                        call_line(300 + i, "recall", json.dumps({"error": RAW[i]})))
        recalled = {r["id"]: r["result"] for r in server.replies(2 * len(RAW))}
        # the job's context is part of the query, and of recall's output
        server.send(call_line(400, "recall", json.dumps({"error": SHOWN[0], "context": {
            "command": f"python train.py {TRICKS[1][1]}", "workdir": f"/home/u/{TRICKS[2][1]}",
            "sbatch_args": f"--mem=8G --export=ALL,{TRICKS[3][1]}"}})))
        with_context = server.replies(1)[0]["result"]
        # a fact is cut to 512 characters: a token across the cut is scrubbed first, whole
        command = f"python train.py --notes '{'x' * 470}' --repo {TOKEN} --epochs 3"
        assert command.index(TOKEN) < 512 < command.index(TOKEN) + len(TOKEN)
        server.send(call_line(401, "recall", json.dumps({"error": SHOWN[0], "context": {"command": command}})))
        cut = server.replies(1)[0]["result"]
    finally:
        stderr = server.close()
    assert_no_secret(json.dumps(recorded, ensure_ascii=False), json.dumps(recalled, ensure_ascii=False),
                     json.dumps(with_context, ensure_ascii=False), json.dumps(cut, ensure_ascii=False), stderr)
    # (the marker is what the cut then shortens)
    assert TOKEN[4:20] not in json.dumps(cut) and "--repo [REDACT" in cut["structuredContent"]["query"]["context"]["command"]
    context = with_context["structuredContent"]["query"]["context"]
    assert "[REDACTED:" in context["command"] and "[REDACTED:" in context["workdir"], context
    for i in range(len(RAW)):
        lesson = recorded[100 + i]["structuredContent"]
        for qid in (200 + i, 300 + i):
            result = recalled[qid]["structuredContent"]
            assert result["query"]["fingerprint"] == lesson["fingerprint"]
            assert (result["matches"][0]["lesson_id"], result["matches"][0]["found_by"]) == (lesson["lesson_id"], "exact")
    assert_no_secret(store_bytes(hpcmem_home))
