"""`hpcmem mcp` answers every request, whatever arrives (issue 33, defects 1 and 15): a lone
surrogate, undecodable bytes, a line that is not JSON, JSON that is not a message, a tool
that fails unexpectedly. A real server process on real stores; raw bytes on its stdin and the
official SDK client, each waited on with a deadline, since the failure is silence."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

from mcp import ClientSession

from tests.cli.helpers import HPCMEM
from tests.cli.test_mcp import CUDA_LESSON, server_params, session_run

DEADLINE_S = 90  # first call loads the stores and the encoder
SEGV = "srun: error: cn042: task 3: Segmentation fault (core dumped)"
OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=52004.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")


def call_line(qid: int, tool: str, arguments: str) -> bytes:
    """A tools/call whose arguments are given as raw JSON text (json.dumps cannot write a lone surrogate)."""
    return (b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": '
            % (qid, tool.encode()) + arguments.encode("utf-8") + b"}}")


class RawServer:
    """`hpcmem mcp` with bytes written to its stdin and each stdout line read with a deadline."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen([HPCMEM, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, "HPCMEM_HOME": str(home)})
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.proc.stdout], daemon=True).start()
        self.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}).encode())
        assert self.replies(1)[0]["id"] == 0
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def send(self, *lines: bytes) -> None:
        for line in lines:
            self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def replies(self, count: int) -> list[dict]:
        """The next ``count`` messages; every stdout line must be one JSON-RPC message."""
        got, end = [], time.monotonic() + DEADLINE_S
        while len(got) < count:
            try:
                line = self.lines.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no answer within {DEADLINE_S} s; got {got}") from None
            got.append(json.loads(line.decode("utf-8")))
            assert got[-1]["jsonrpc"] == "2.0"
        return got

    def close(self) -> str:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            self.proc.kill()
        return self.proc.stderr.read().decode(errors="replace")


def test_every_raw_line_gets_an_answer(hpcmem_home: Path):
    server = RawServer(hpcmem_home)
    try:
        server.send(call_line(1, "record", '{"error": "Bus error \\ud800 at 0x0 (core dumped)",'
                                           ' "cause": "lone \\udc00 cause", "fix": "f\\ud800"}'))
        recorded = server.replies(1)[0]
        assert recorded["id"] == 1 and not recorded["result"]["isError"], recorded
        server.send(
            call_line(2, "recall", '{"error": "Bus error \\ud800 at 0x0 (core dumped)"}'),
            b'this line is not JSON',
            b'{"jsonrpc": "2.0", "id": 3, "method": 7}',   # JSON, not a message: answered with its id
            b'[1, 2]',
            b'',                                           # blank: no message, nothing to answer
            call_line(4, "recall", json.dumps({"error": SEGV})).replace(b"cn042", b"cn\xff\xfe42"),  # not UTF-8
            b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "recall", "arguments": {"error": "x\\',
            call_line(6, "recall", '{"error": "Segmentation fault", "modules": "cuda/11.8"}'),
        )
        replies = server.replies(7)
        by_id = {r["id"]: r for r in replies if r["id"] is not None}
        anonymous = [r["error"]["code"] for r in replies if r["id"] is None]
        assert sorted(by_id) == [2, 3, 4, 6]
        assert sorted(anonymous) == [-32700, -32700, -32600]  # not JSON, a truncated line; [1, 2]
        assert by_id[3]["error"]["code"] == -32600

        recalled = by_id[2]["result"]["structuredContent"]
        assert recalled["matches"][0]["lesson_id"] == recorded["result"]["structuredContent"]["lesson_id"]
        assert recalled["matches"][0]["cause"] == "lone \ufffd cause"
        assert by_id[4]["result"]["structuredContent"]["query"]["category"] == "segfault"
        assert by_id[6]["result"]["isError"] and "modules" in by_id[6]["result"]["content"][0]["text"]

        server.send(b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}')  # still serving
        assert "tools" in server.replies(1)[0]["result"]
    finally:
        stderr = server.close()
    assert "Traceback" not in stderr, stderr


def test_a_tool_that_fails_unexpectedly_is_a_one_line_tool_error(hpcmem_home: Path):
    """A lesson row damaged outside hpcmem makes the tools that read it fail: each call gets
    a one-line error result in time, and calls that do not touch that row still work."""
    async def record_two(s: ClientSession) -> list[str]:
        ids = []
        for error in (CUDA_LESSON, OOM):
            done = await s.call_tool("record", {"error": error, "cause": "c", "fix": "f"})
            assert not done.is_error, done.content
            ids.append(done.structured_content["lesson_id"])
        return ids

    intact, damaged = asyncio.run(session_run(server_params(hpcmem_home), record_two))
    with sqlite3.connect(next(hpcmem_home.rglob("*.db"))) as conn:
        conn.execute("UPDATE lessons SET actions = '{not json' WHERE id = ?", (damaged,))

    async def body(s: ClientSession) -> None:
        async def call(tool: str, arguments: dict):
            return await asyncio.wait_for(s.call_tool(tool, arguments), DEADLINE_S)

        for result in (await call("recall", {"error": OOM}), await call("list_lessons", {}),
                       await call("show_lesson", {"lesson_id": damaged})):
            assert result.is_error
            text = result.content[0].text
            assert "internal error" in text and "\n" not in text and "Traceback" not in text, text
        found = await call("recall", {"error": CUDA_LESSON})
        assert not found.is_error and found.structured_content["matches"][0]["lesson_id"] == intact
        shown = await call("show_lesson", {"lesson_id": intact})
        assert not shown.is_error, shown.content

    asyncio.run(session_run(server_params(hpcmem_home), body))
