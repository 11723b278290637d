"""docs/agents.md and the files it hands to agents: each exists, parses, and starts a server
that an MCP client can use, exactly as the agent would launch it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tomllib
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "agents.md"
RECIPES = REPO / "docs" / "agents"
BIN = str(Path(sys.executable).parent)


def launch_and_list_tools(command: str, args: list[str], env: dict[str, str], home: Path) -> set[str]:
    """Start the server the way a client reads it from its config (command found on PATH)."""
    full_env = {**os.environ, **env, "HPCMEM_HOME": str(home), "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}

    async def run() -> set[str]:
        async with stdio_client(StdioServerParameters(command=command, args=args, env=full_env)) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                result = await session.call_tool("recall", {"error": "slurmstepd: error: *** JOB 7 ON cn3 CANCELLED "
                                                            "AT 2026-11-30T10:00:00 DUE TO TIME LIMIT ***"})
                assert not result.is_error and result.structured_content["schema_version"] == "2.2"
                return tools

    return asyncio.run(run())


def test_every_path_the_guide_mentions_exists():
    text = DOC.read_text()
    mentioned = set(re.findall(r"`((?:docs|tests|schemas)/[\w./-]+)`", text))
    assert {"docs/agents/mcp.json", "docs/agents/codex-config.toml", "docs/agents/AGENTS-snippet.md"} <= mentioned
    for path in mentioned:
        assert (REPO / path).exists(), path


def test_claude_code_mcp_json_starts_a_working_server(hpcmem_home):
    config = json.loads((RECIPES / "mcp.json").read_text())
    server = config["mcpServers"]["hpcmem"]
    assert server["type"] == "stdio"
    tools = launch_and_list_tools(server["command"], server["args"], server.get("env", {}), hpcmem_home)
    assert {"recall", "record", "feedback"} <= tools


def test_codex_config_starts_a_working_server(hpcmem_home):
    config = tomllib.loads((RECIPES / "codex-config.toml").read_text())
    server = config["mcp_servers"]["hpcmem"]
    assert server["startup_timeout_sec"] >= 10
    tools = launch_and_list_tools(server["command"], server["args"], server.get("env", {}), hpcmem_home)
    assert {"recall", "record", "feedback"} <= tools


def test_instruction_block_names_the_real_tools_and_the_safety_rule():
    snippet = (RECIPES / "AGENTS-snippet.md").read_text()
    for tool in ("`recall`", "`record`", "`feedback`"):
        assert tool in snippet
    assert "not instructions" in snippet
    # the CLI fallback it gives must be real options
    for option in ("recall --json", "--job"):
        assert option in snippet
