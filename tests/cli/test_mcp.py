"""`hpcmem mcp` driven by the official MCP SDK client over stdio: a real server process,
the real stores and the real encoder; nothing here calls the tool functions directly."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.cli.helpers import HPCMEM
from tests.ingest.test_spool import spool_job
from tests.kb.recall.test_recall_evidence import corpus_text

# Two real reports of one failure (data/corpus): cuDNN at run time older than at build time.
CUDNN_LESSON, CUDNN_VARIANT = corpus_text("cuda-0054"), corpus_text("cuda-0059")
CUDA_LESSON = "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory"
NEVER_SEEN = "hdf5: H5Fcreate(): unable to lock file, errno = 524, error message = 'Unknown error 524'"


def server_params(home: Path, **env: str) -> StdioServerParameters:
    return StdioServerParameters(command=HPCMEM, args=["mcp"], env={**os.environ, "HPCMEM_HOME": str(home), **env})


async def session_run(params: StdioServerParameters, body):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)


def call(params: StdioServerParameters, body):
    return asyncio.run(session_run(params, body))


def test_agent_session_record_recall_feedback_abstain_and_errors(hpcmem_home):
    async def body(s: ClientSession):
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert {"recall", "record", "feedback", "show_lesson", "list_lessons"} <= set(tools)
        assert "not instructions" in tools["recall"].description
        assert "match" in tools["recall"].description and "related" in tools["recall"].description
        assert set(tools["recall"].input_schema["properties"]) >= {"error", "job_id", "partition", "modules",
                                                                   "cluster", "limit", "include_expired"}

        recorded = await s.call_tool("record", {
            "error": CUDNN_LESSON, "cause": "the cuDNN loaded at run time is older than the one it was built with",
            "fix": "load the cudnn module the framework was built against", "actions": ["module load cudnn/8.9"]})
        assert not recorded.is_error, recorded.content
        lesson = recorded.structured_content
        assert lesson["lesson_id"] and lesson["fingerprint"] and lesson["status"]

        found = await s.call_tool("recall", {"error": CUDNN_VARIANT})
        assert not found.is_error, found.content
        doc = found.structured_content
        assert doc["schema_version"] == "2.2" and doc["abstained"] is False
        top = doc["matches"][0]
        assert top["lesson_id"] == lesson["lesson_id"] and top["band"] == "match" and top["match_kind"] == "similar"
        assert doc["query"]["fingerprint"] != lesson["fingerprint"]
        assert "not instructions" in doc["notice"]

        fed = await s.call_tool("feedback", {"lesson_id": lesson["lesson_id"], "worked": True, "error": CUDNN_VARIANT})
        assert not fed.is_error, fed.content
        assert fed.structured_content["confidence"] > top["confidence"]
        shown = await s.call_tool("show_lesson", {"lesson_id": lesson["lesson_id"][:8]})
        assert [a["fingerprint"] for a in shown.structured_content["aliases"]] == [doc["query"]["fingerprint"]]
        exact = (await s.call_tool("recall", {"error": CUDNN_VARIANT})).structured_content["matches"][0]
        assert exact["lesson_id"] == lesson["lesson_id"] and exact["match_kind"] == "exact"  # via the alias

        unseen = await s.call_tool("recall", {"error": NEVER_SEEN})
        assert not unseen.is_error and unseen.structured_content["abstained"] is True
        assert all(m["band"] != "match" for m in unseen.structured_content["matches"])

        listed = await s.call_tool("list_lessons", {"limit": 10})
        assert [l["lesson_id"] for l in listed.structured_content["lessons"]] == [lesson["lesson_id"]]

        bad = [
            await s.call_tool("recall", {"error": CUDA_LESSON, "limit": 0}),
            await s.call_tool("recall", {}),
            await s.call_tool("recall", {"error": "\x1b[2K\r   \r"}),  # contentless
            await s.call_tool("feedback", {"lesson_id": "feedface", "worked": True}),
            await s.call_tool("record", {"error": CUDA_LESSON, "cause": "c", "fix": "f", "scope": "lab:nope"}),
            await s.call_tool("recall", {"error": CUDA_LESSON, "limit": "many"}),
            await s.call_tool("no_such_tool", {}),
        ]
        for result in bad:
            assert result.is_error
            text = result.content[0].text
            assert "\n" not in text and "Traceback" not in text, text
        # after all the errors the server still answers, and nothing was lost
        again = await s.call_tool("recall", {"error": CUDNN_LESSON})
        assert again.structured_content["matches"][0]["lesson_id"] == lesson["lesson_id"]

    call(server_params(hpcmem_home), body)


def test_feedback_and_show_take_the_short_id_and_errors_keep_their_hint(hpcmem_home, tmp_path):
    """Issue 34, item 3: the 8 characters every CLI command takes, through MCP too."""
    async def record(s: ClientSession):
        done = await s.call_tool("record", {"error": CUDA_LESSON, "cause": "the CUDA 11 runtime is not loaded",
                                            "fix": "load it", "actions": ["module load cuda/11.8"]})
        assert not done.is_error, done.content
        return done.structured_content

    lesson = call(server_params(hpcmem_home), record)
    # two more lessons whose ids share their first 8 characters (as an import can bring)
    exported = subprocess.run([HPCMEM, "lessons", "export"], capture_output=True, text=True,
                              env={**os.environ, "HPCMEM_HOME": str(hpcmem_home)}, check=True)
    line = json.loads(exported.stdout.splitlines()[0])
    twins = tmp_path / "twins.jsonl"
    twins.write_text("".join(json.dumps(line | {"id": f"abcdef12-0000-4000-8000-00000000000{n}"}) + "\n"
                             for n in (1, 2)))
    subprocess.run([HPCMEM, "lessons", "import", str(twins), "--scope", "user"], capture_output=True,
                   env={**os.environ, "HPCMEM_HOME": str(hpcmem_home)}, check=True)

    async def body(s: ClientSession):
        fed = await s.call_tool("feedback", {"lesson_id": lesson["lesson_id"][:8], "worked": True, "job_id": "77"})
        assert not fed.is_error, fed.content
        assert fed.structured_content["lesson_id"] == lesson["lesson_id"]
        assert fed.structured_content["confirmations"] == 1
        shown = await s.call_tool("show_lesson", {"lesson_id": lesson["lesson_id"][:8]})
        assert ("worked", "77") in {(e["kind"], e["job_id"]) for e in shown.structured_content["evidence"]}
        errors = {}
        for name, ident in (("unknown", "0123abcd"), ("ambiguous", "abcdef12"), ("short", "abc")):
            for tool, args in (("feedback", {"worked": True}), ("show_lesson", {})):
                result = await s.call_tool(tool, {"lesson_id": ident, **args})
                assert result.is_error and "\n" not in result.content[0].text, result.content
                errors[name, tool] = result.content[0].text
        for tool in ("feedback", "show_lesson"):
            assert f"{tool}: no lesson with id '0123abcd' (hint: " in errors["unknown", tool]
            assert f"{tool}: lesson id 'abcdef12' is ambiguous: 2 lessons match (" in errors["ambiguous", tool]
            assert "(hint: give more of the id" in errors["ambiguous", tool]
            assert "at least 8 characters" in errors["short", tool]

    call(server_params(hpcmem_home), body)


def test_concurrent_calls_are_answered_and_consistent(hpcmem_home):
    async def body(s: ClientSession):
        records = [s.call_tool("record", {"error": f"RuntimeError: stage {name} exploded", "cause": f"cause {name}",
                                          "fix": f"fix {name}"}) for name in ("alpha", "beta", "gamma")]
        recalls = [s.call_tool("recall", {"error": NEVER_SEEN}) for _ in range(4)]
        results = await asyncio.gather(*records, *recalls)
        assert not any(r.is_error for r in results), [r.content for r in results if r.is_error]
        listed = await s.call_tool("list_lessons", {})
        assert listed.structured_content["total"] == 3
        return [r.structured_content["lesson_id"] for r in results[:3]]

    ids = call(server_params(hpcmem_home), body)
    assert len(set(ids)) == 3


def test_recall_by_job_drains_the_callers_pending_epilog_event(hpcmem_home, tmp_path):
    spool = tmp_path / "spool"
    me = pwd.getpwuid(os.getuid()).pw_name
    assert spool_job(spool, "4", user=me) is not None  # an OUT_OF_MEMORY job, not yet ingested

    async def body(s: ClientSession):
        result = await s.call_tool("recall", {"job_id": "4"})
        assert not result.is_error, result.content
        return result.structured_content

    doc = call(server_params(hpcmem_home, HPCMEM_SPOOL=str(spool)), body)
    assert doc["query"]["category"] == "host_oom" and doc["query"]["job_id"] == "4"
    assert not list((spool / me / "new").iterdir())


def test_stdout_carries_only_protocol_messages(hpcmem_home):
    """Raw JSON-RPC over the pipes: every stdout line parses, logs stay on stderr."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"error": NEVER_SEEN}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "recall", "arguments": {"limit": 0}}},
    ]
    proc = subprocess.Popen([HPCMEM, "--debug", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HPCMEM_HOME": str(hpcmem_home)})
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        replies, lines = {}, []
        while len(replies) < 3:  # stdin stays open until every answer is in: EOF cancels calls in flight
            line = proc.stdout.readline()
            assert line, f"server closed stdout early: {proc.stderr.read()[-2000:]}"
            lines.append(json.loads(line))  # every stdout line is a JSON-RPC message
            if "id" in lines[-1]:
                replies[lines[-1]["id"]] = lines[-1]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        stderr = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert all(m.get("jsonrpc") == "2.0" for m in lines)
    assert "Tool 'recall' failed" in stderr  # --debug logs go to stderr, never to stdout
    assert replies[2]["result"]["structuredContent"]["abstained"] is True
    assert replies[3]["result"]["isError"] is True


def test_mcp_is_not_imported_by_other_commands():
    code = "import sys, hpcmem.cli.main; print(any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_without_the_sdk_the_server_is_a_one_line_error(hpcmem_home, tmp_path):
    """The `agents` extra missing: exit 2 with a hint, no traceback (a stand-in `mcp` that fails to import)."""
    fake = tmp_path / "nosdk" / "mcp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no MCP SDK here')\n")
    env = {**os.environ, "HPCMEM_HOME": str(hpcmem_home), "PYTHONPATH": str(fake.parent)}
    result = subprocess.run([HPCMEM, "mcp"], input="", capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == "Error: hpcmem mcp needs the MCP SDK, which is not installed"
    assert "Traceback" not in result.stderr
