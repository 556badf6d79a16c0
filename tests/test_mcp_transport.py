"""`memoryd mcp`'s transport: a standard-library shim that answers the handshake and lists the
tools itself, and passes calls to the MCP session the daemon serves with the official SDK
(memoryd/agent/mcp_shim.py, memoryd/agent/mcp_service.py). With the real SDK client, a real daemon
(in process: private Redis, embedded SurrealDB, the real model) and the real Claude Code in its
default environment with a CPU hog running.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memoryd.agent import mcp_server, mcp_service, mcp_shim
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.errors import NOT_RUNNING
from tests.clients import ClaudeHome, ScriptedAnthropic, install_clients, text, tool_names
from tests.conftest import MEMORYD, _serving, external_redis_worker, settings_for
from tests.hog import cpu_hog
from tests.test_agents import call, clean_env, mcp_stdio


async def sdk_tool_names(data_dir: Path) -> list[str]:
    """The tool table as the SDK server lists it."""
    tools = await mcp_server.build_server(settings_for(data_dir)).list_tools()
    return [tool.name for tool in tools]


async def test_the_shims_declaration_is_what_the_sdk_server_answers(data_dir: Path) -> None:
    answers = await mcp_service.declaration(settings_for(data_dir))
    assert mcp_service.declaration_text(answers) == Path(mcp_shim.DECLARATION).read_text(), (
        "the tool table changed: run `.venv/bin/python -m memoryd.agent.mcp_service`"
    )


def test_the_mcp_process_answers_on_the_standard_library_alone(data_dir: Path) -> None:
    """No SDK, pydantic, typer, rich, Redis client or asyncio: what agents wait for at start."""
    probe = (
        "import sys; sys.argv = ['memoryd', 'mcp']; "
        "import memoryd.entry; memoryd.entry.main(); "
        "print(sorted(m for m in ('mcp', 'mcp_types', 'anyio', 'pydantic', 'typer', 'rich', "
        "'arq', 'redis', 'asyncio', 'memoryd.config', 'memoryd.client') if m in sys.modules), "
        "file=sys.stderr)"
    )
    requests = [
        {"jsonrpc": "2.0", "id": "probe", "method": "server/discover", "params": {}},
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get"}},
    ]
    out = subprocess.run(
        [sys.executable, "-c", probe],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(data_dir),
    )
    assert out.stderr == "[]\n"
    declared = json.loads(Path(mcp_shim.DECLARATION).read_text())["2025-06-18"]
    not_running = f"Error executing tool get: {NOT_RUNNING}"
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {
            "jsonrpc": "2.0",
            "id": "probe",
            "error": {"code": -32601, "message": "Method not found"},
        },
        {
            "jsonrpc": "2.0",
            "id": 0,
            "result": {"protocolVersion": "2025-06-18", **declared["initialize"]},
        },
        {"jsonrpc": "2.0", "id": 1, "result": declared["tools/list"]},
        {"jsonrpc": "2.0", "id": 2, "result": {}},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "result": {"content": [{"type": "text", "text": not_running}], "isError": True},
        },
    ]


@pytest.mark.e2e
async def test_a_daemon_started_or_restarted_during_the_session_serves_its_calls(
    data_dir: Path, embedder: Embedder
) -> None:
    not_running = f"Error executing tool status: {NOT_RUNNING}"
    async with mcp_stdio(data_dir, data_dir) as mcp:
        listed = await mcp.list_tools()
        assert [tool.name for tool in listed.tools] == await sdk_tool_names(data_dir)
        assert await call(mcp, "status") == (True, not_running)
        for _ in range(2):  # started, stopped, started again: no new MCP session
            rt: Runtime
            async with _serving(data_dir, embedder, scheduled=False) as rt:
                assert rt.settings.channel_socket.exists()
                error, status = await call(mcp, "status", max_chars=8000)
                assert not error
                assert f"data dir: {data_dir}" in status
                # The session runs in the daemon: its tools are answered there.
                error, remembered = await call(
                    mcp, "remember", text="Decision: the shim passes calls through.", kind="note"
                )
                assert not error and remembered.startswith("remembered memory:"), remembered
            assert await call(mcp, "status") == (True, not_running)


@pytest.mark.e2e
async def test_with_an_external_redis_and_no_daemon_here_a_child_serves_calls_over_the_queue(
    data_dir: Path, short_tmp: Path, embedder: Embedder
) -> None:
    """Workers elsewhere serve the queue and no daemon holds this data dir's channel: the shim
    still lists the tools itself, and a call starts `memoryd mcp --in-process`, whose tools
    reach the workers through the queue."""
    async with external_redis_worker(data_dir, short_tmp, embedder) as (redis, worker):
        assert not worker.settings.channel_socket.exists()
        env = clean_env(data_dir, MEMORYD_REDIS_URL=redis.url)
        params = StdioServerParameters(command=MEMORYD, args=["mcp"], cwd=data_dir, env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            listed = await mcp.list_tools()
            assert [tool.name for tool in listed.tools] == await sdk_tool_names(data_dir)
            error, status = await call(mcp, "status")
        assert not error
        assert status.splitlines()[:2] == ["daemon running: True", f"data dir: {data_dir}"]


@pytest.mark.e2e
@pytest.mark.alone
async def test_claude_code_in_its_default_environment_lists_memoryds_tools_under_a_cpu_hog(
    stack: Runtime, tmp_path: Path
) -> None:
    """Claude Code's own MCP timeouts (no MCP_TIMEOUT, no MCP_CONNECTION_NONBLOCKING), with
    both cores saturated: it gives the server's version probe 3 s and waits 5 s in all; the
    shim answers within the first. (Tool search off, as in every client test: the tools are
    in the request's tool list, which is built when the request is; docs/clients.md.)"""
    data_dir = stack.settings.data_dir
    home = ClaudeHome(install_clients(), tmp_path)
    command = [MEMORYD, "mcp", "--data-dir", str(data_dir)]
    added = home.run("mcp", "add", "--scope", "user", "memoryd", "--", *command)
    assert added.returncode == 0, added.stderr
    with cpu_hog(), ScriptedAnthropic([text("Done.")]) as server:
        run = await asyncio.to_thread(
            home.prompt, "what do you remember?", server, cwd=tmp_path, patient_mcp=False
        )
    assert run.result.returncode == 0, run.result.stderr
    assert run.output()["result"] == "Done."
    [first] = server.main_requests
    listed = [name for name in tool_names(first) if name.startswith("mcp__memoryd__")]
    assert listed == [f"mcp__memoryd__{name}" for name in sorted(await sdk_tool_names(data_dir))]
