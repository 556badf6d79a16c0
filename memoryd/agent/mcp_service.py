"""The MCP sessions of `memoryd mcp`, served inside the daemon.

An agent's stdio MCP process must answer at once, but importing the `mcp` SDK takes a second on
an idle machine and many on a loaded one. So `memoryd mcp` is a standard-library shim
(memoryd/agent/mcp_shim.py) that opens an `mcp` stream on the daemon's query channel and passes the
session's JSON lines through; here the official SDK serves that session over the stream, its
tools answered by the daemon's own queries (no second connection, no queue).

The shim answers the handshake and the static listings itself, from DECLARATION: what this SDK
server answers to them at every protocol version it speaks, generated from the one tool table
(memoryd/agent/mcp_server.py) by `python -m memoryd.agent.mcp_service`, and checked against it by
the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from memoryd import channel, client
from memoryd.agent import mcp_server
from memoryd.agent.mcp_shim import DECLARATION, STATIC, STREAM
from memoryd.config import Settings


def streams(ctx: Mapping[str, Any]) -> dict[str, channel.Stream]:
    """The handler of `mcp` streams: one SDK session per connection, in the shim's working
    directory (the project its calls are about by default). `ctx`: the daemon's job context,
    read at each call as the hook's query does (a private Redis restarted is a new one)."""
    settings: Settings = ctx["settings"]

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[client.Client]:
        yield client.Client.answering(ctx["redis"], settings, ctx["queries"])

    async def session(
        args: tuple[Any, ...], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        (cwd,) = args
        await serve(mcp_server.build_server(settings, Path(cwd), connect), reader, writer)

    return {STREAM: session}


async def serve(
    server: MCPServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Serve one MCP session over a stream of JSON lines, as the SDK's stdio transport does
    over stdin and stdout, until the peer closes it."""
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)

    async def lines_in() -> None:
        async with read_writer:
            while line := await reader.readline():
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # the SDK answers a malformed line itself
                    await read_writer.send(exc)
                    continue
                await read_writer.send(SessionMessage(message))

    async def lines_out() -> None:
        async with write_reader:
            async for sent in write_reader:
                data = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                writer.write(data.encode() + b"\n")
                await writer.drain()

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async serves too
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lines_in)
            tasks.start_soon(lines_out)
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            tasks.cancel_scope.cancel()
    except* ConnectionError:
        pass  # the shim went away (its agent ended): nobody to answer


async def declaration(settings: Settings) -> dict[str, Any]:
    """What the SDK server answers to each STATIC request at each protocol version it speaks:
    {version: {method: result}}, the initialize results without their (negotiated) version."""
    server = mcp_server.build_server(settings, Path("/"))
    answers: dict[str, Any] = {}
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        peer_reader, peer_writer = await asyncio.open_unix_connection(sock=theirs)
        session = asyncio.create_task(serve(server, reader, writer))
        params = {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "memoryd-declaration", "version": "0"},
        }
        results: dict[str, Any] = {}
        for number, method in enumerate(STATIC):
            request = {"jsonrpc": "2.0", "id": number, "method": method}
            request |= {"params": params} if method == "initialize" else {}
            peer_writer.write(json.dumps(request).encode() + b"\n")
            reply = json.loads(await peer_reader.readline())
            results[method] = reply["result"]
            if method == "initialize":
                assert results[method].pop("protocolVersion") == version
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                peer_writer.write(json.dumps(initialized).encode() + b"\n")
        peer_writer.close()
        await session
        writer.close()
        answers[version] = results
    return answers


def declaration_text(answers: dict[str, Any]) -> str:
    return json.dumps(answers, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    # Regenerate DECLARATION after a change to the tool table (the tests say when).
    from memoryd.config import load_settings

    text = declaration_text(asyncio.run(declaration(load_settings())))
    Path(DECLARATION).write_text(text)
    sys.stdout.write(f"wrote {DECLARATION}\n")
