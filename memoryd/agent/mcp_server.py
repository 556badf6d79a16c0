"""memoryd's tools for agents over the Model Context Protocol (official SDK).

The daemon serves them to `memoryd mcp` (a standard-library shim, memoryd/agent/mcp_shim.py) over
its query channel (memoryd/agent/mcp_service.py), calling its queries directly. `memoryd mcp --http`
and `memoryd mcp --in-process` serve them from their own process as a thin client of the daemon:
every tool is a call of the typed client API (memoryd/client.py); that process loads no model and no
database SDK, and never starts a daemon (one in an agent's process tree would die with the session
and fight the service for the database). When none runs, each tool answers at once with how to start
one.

Token economy: `search` returns compact hits with ids, `get` the full records on demand; every
tool's answer is cut to `max_chars` characters (default 8000) the same way every time.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from memoryd import client
from memoryd.agent import present, present_graph
from memoryd.agent_shared import DEFAULT_BUDGET, check_budget
from memoryd.config import Settings
from memoryd.errors import MemorydError
from memoryd.results import SearchRequest
from memoryd.vocabulary import AGENT_MEMORY_KINDS, SEARCH_KINDS_BY_NAME

INSTRUCTIONS = """memoryd remembers what coding agents did on this machine (sessions, goals, the
files they read and edited, commands and their errors) joined to the code as it is now.
Start with search or recent_activity (short answers with ids), then get the ids you need.
Use file_history before changing a file someone worked on; remember decisions worth keeping."""

# `search`'s kinds: each search kind of the vocabulary, or all of them.
ALL_KINDS = "all"
SearchKindName = Literal[(ALL_KINDS, *SEARCH_KINDS_BY_NAME)]  # type: ignore[valid-type]
MAX_LIMIT = 100
TOKEN_FILE = "mcp-token"


# A client for one call: by default a fresh connection to the daemon (a unix socket: cheap), so
# the server starts and lists its tools whether or not the daemon runs.
Connect = Callable[[], AbstractAsyncContextManager[client.Client]]


class Tools:
    """The tools' work, each call on a client from `connect`."""

    def __init__(self, settings: Settings, cwd: Path, connect: Connect | None = None) -> None:
        self.cwd = cwd
        self._connect = connect or (lambda: client.connect(settings))

    async def _with(
        self, work: Callable[[client.Client], Awaitable[str]], max_chars: int | None = None
    ) -> str:
        try:
            if max_chars is not None:
                check_budget(max_chars)
            async with self._connect() as memoryd:
                return await work(memoryd)
        except MemorydError as exc:
            raise ToolError(str(exc)) from None

    async def search(
        self,
        query: str,
        kind: SearchKindName,
        project: str | None,
        path: str | None,
        language: str | None,
        limit: int,
        max_chars: int,
    ) -> str:
        request = SearchRequest(
            query,
            tuple(SEARCH_KINDS_BY_NAME) if kind == ALL_KINDS else (kind,),
            limit=max(1, min(limit, MAX_LIMIT)),
            project=project,
            cwd=str(self.cwd),
            # They narrow files: a search of every kind keeps to code and docs with them.
            path=path,
            language=language,
        )

        async def work(memoryd: client.Client) -> str:
            answer = await memoryd.search(request)
            return present.search_text(query, answer, max_chars)

        return await self._with(work, max_chars)

    async def get(self, ids: list[str], max_chars: int) -> str:
        async def work(memoryd: client.Client) -> str:
            records = await memoryd.get(ids, present.text_budget(max_chars, len(ids)))
            return present.get_text(records, max_chars)

        return await self._with(work, max_chars)

    async def file_history(self, path: str, max_chars: int) -> str:
        target = Path(path).expanduser()
        target = target if target.is_absolute() else self.cwd / target

        async def work(memoryd: client.Client) -> str:
            return present.history_text(await memoryd.history(str(target)), max_chars)

        return await self._with(work, max_chars)

    async def related(self, target: str, max_chars: int) -> str:
        async def work(memoryd: client.Client) -> str:
            doc = await memoryd.related(target, cwd=str(self.cwd))
            return present_graph.related_text(doc, max_chars)

        return await self._with(work, max_chars)

    async def impact(self, paths: list[str], depth: int, max_chars: int) -> str:
        async def work(memoryd: client.Client) -> str:
            doc = await memoryd.impact(paths, depth=depth, cwd=str(self.cwd))
            return present_graph.impact_text(doc, max_chars)

        return await self._with(work, max_chars)

    async def session(self, session_id: str, max_chars: int) -> str:

        async def work(memoryd: client.Client) -> str:
            return present.session_text(await memoryd.session(session_id), max_chars)

        return await self._with(work, max_chars)

    async def timeline(self, anchor: str, before: int, after: int, max_chars: int) -> str:
        async def work(memoryd: client.Client) -> str:
            found = await memoryd.timeline(anchor, before, after, max_chars)
            return present.timeline_text(found, max_chars)

        return await self._with(work, max_chars)

    async def recent_activity(self, project: str | None, days: float, max_chars: int) -> str:

        async def work(memoryd: client.Client) -> str:
            scope = await memoryd.scope(self.cwd, project)
            since = datetime.now(UTC) - timedelta(days=days)
            activity = await memoryd.recent_activity(scope.project, since)
            return present.activity_text(activity, scope, max_chars)

        return await self._with(work, max_chars)

    async def remember(
        self, text: str, kind: str, files: list[str] | None, project: str | None
    ) -> str:
        async def work(memoryd: client.Client) -> str:
            scope = await memoryd.scope(self.cwd, project)
            done = await memoryd.remember(text, kind, files, cwd=self.cwd, project=scope.project)
            linked = ", ".join(done["files"]) or "no files"
            note = f"\nnote: {scope.note}" if scope.note else ""
            return (
                f"remembered {done['id']} ({done['kind']}, pinned) in session "
                f"{done['session']}#{done['seq']}; linked to {linked}{note}"
            )

        return await self._with(work)

    async def forget(self, memory_id: str) -> str:
        async def work(memoryd: client.Client) -> str:
            done = await memoryd.forget([memory_id])
            removed = ", ".join(f"{n} {t}" for t, n in sorted(done["removed"].items()))
            return f"forgot {memory_id}: removed {removed}"

        return await self._with(work)

    async def status(self, max_chars: int) -> str:

        async def work(memoryd: client.Client) -> str:
            return present.status_text(await memoryd.status(), max_chars)

        return await self._with(work, max_chars)


def build_server(
    settings: Settings, cwd: Path | None = None, connect: Connect | None = None
) -> MCPServer:
    tools = Tools(settings, (cwd or Path.cwd()).resolve(), connect)
    # Tools answer in plain text: with structured output the clients hand the model a JSON
    # string with its newlines escaped (docs/clients.md).
    server = MCPServer("memoryd", instructions=INSTRUCTIONS)
    budget = f"Answer cut to max_chars characters (default {DEFAULT_BUDGET})."
    scope = (
        "project: by default the watched repository containing the working directory; "
        "a project id, name or root for another, 'all' for every project."
    )

    @server.tool(
        structured_output=False,
        description="Search memoryd: code chunks of the watched repositories (kind=code), their "
        "prose files (kind=docs: docs, readmes, changelogs), what happened in past agent "
        "sessions (kind=memory: prompts, messages, tool calls, errors, notes), what users asked "
        "for (kind=goal), or all of them. Use it first, before reading files or asking the user "
        "about past work: it returns one line per hit with an id, the project, path:lines or "
        f"session#seq. Then call get with the ids. {scope} path: a glob over paths in the "
        "project (src/**/*.py; without a /, a file name anywhere); language: python, "
        f"typescript, markdown...; both keep to code and docs. limit: hits per kind. {budget}",
    )
    async def search(
        query: str,
        kind: SearchKindName = ALL_KINDS,
        project: str | None = None,
        path: str | None = None,
        language: str | None = None,
        limit: int = 10,
        max_chars: int = DEFAULT_BUDGET,
    ) -> str:
        return await tools.search(query, kind, project, path, language, limit, max_chars)

    @server.tool(
        structured_output=False,
        description="The full records behind ids from search, timeline or recent_activity: a "
        "code chunk's text with its path and lines, a memory's whole text with its session and "
        f"seq. Ask only for the ids you need; the budget is shared among them. {budget}",
    )
    async def get(ids: list[str], max_chars: int = DEFAULT_BUDGET) -> str:
        return await tools.get(ids, max_chars)

    @server.tool(
        structured_output=False,
        description="The history of one file: every session that touched it (read, modified or "
        "ran commands on it; newest first, with their goal, outcomes and errors, and whether "
        "the code they saw is still current), the notes agents left on it, plus the file's "
        "current code chunks. Use it before editing a "
        f"file others worked on, or to learn why it is the way it is. {budget}",
    )
    async def file_history(path: str, max_chars: int = DEFAULT_BUDGET) -> str:
        return await tools.file_history(path, max_chars)

    @server.tool(
        structured_output=False,
        description="How code hangs together around a file path, `path#Name`, a symbol name "
        "(`Worker.run_job`) or a chunk id: what it defines, its callers and callees (a guess "
        "by name is marked with its confidence), importers and imports, bases and subclasses, "
        "files that usually change with it, and the sessions that read or modified each file. "
        f"Use it before changing a function or a module. {budget}",
    )
    async def related(target: str, max_chars: int = DEFAULT_BUDGET) -> str:
        return await tools.related(target, max_chars)

    @server.tool(
        structured_output=False,
        description="What could break if these files change: the files that import them or "
        "call into them (up to `depth` steps back), the tests among them, and the errors "
        f"sessions met after editing these files before. {budget}",
    )
    async def impact(paths: list[str], depth: int = 2, max_chars: int = DEFAULT_BUDGET) -> str:
        return await tools.impact(paths, depth, max_chars)

    @server.tool(
        structured_output=False,
        description="Replay one agent session in order: its goal and each event (prompt, "
        "message, tool call, result, error) as one line with its memory id. The id may be a "
        f"unique prefix. For a few events around one point use timeline instead. {budget}",
    )
    async def session(session_id: str, max_chars: int = DEFAULT_BUDGET) -> str:
        return await tools.session(session_id, max_chars)

    @server.tool(
        structured_output=False,
        description="The events just before and after one memory (or a goal's prompt) in its "
        "session: what led to an error, what came of a decision. anchor: a memory or goal id "
        f"from search. {budget}",
    )
    async def timeline(
        anchor: str, before: int = 5, after: int = 5, max_chars: int = DEFAULT_BUDGET
    ) -> str:
        return await tools.timeline(anchor, before, after, max_chars)

    @server.tool(
        structured_output=False,
        description="What happened lately in this repository: recent sessions and their goals, "
        "files modified (is the code the last edit left still current), agents' notes, and "
        "failures not followed by a success (still open). Use it at the "
        f"start of a task to pick up where others left off. days: how far back. {scope} "
        f"{budget}",
    )
    async def recent_activity(
        project: str | None = None, days: float = 7.0, max_chars: int = DEFAULT_BUDGET
    ) -> str:
        return await tools.recent_activity(project, days, max_chars)

    @server.tool(
        structured_output=False,
        description="Record a decision, note or todo for later sessions (kind: "
        f"{', '.join(AGENT_MEMORY_KINDS)}). It is searchable, pinned (never pruned), kept with "
        "the project's notes and linked to the files it names (files: paths, relative to the "
        "working directory, also found in the text; `path#Class.method` names a function). "
        "When shown later it says whether that code is still current. Record why, not what "
        "the diff shows.",
    )
    async def remember(
        text: str, kind: str = "note", files: list[str] | None = None, project: str | None = None
    ) -> str:
        return await tools.remember(text, kind, files, project)

    @server.tool(
        structured_output=False,
        description="Delete a memory (or goal) by id, with its links, from memoryd for good: "
        "a wrong note, or something that should never have been recorded.",
    )
    async def forget(id: str) -> str:
        return await tools.forget(id)

    @server.tool(
        structured_output=False,
        description="Whether the memoryd daemon runs, what it holds (rows per table), the "
        f"watched projects and the queue. {budget}",
    )
    async def status(max_chars: int = DEFAULT_BUDGET) -> str:
        return await tools.status(max_chars)

    return server


# -- streamable HTTP ------------------------------------------------------------------------


def token_path(settings: Settings) -> Path:
    return settings.data_dir / TOKEN_FILE


def load_token(settings: Settings) -> str:
    """The bearer token of `memoryd mcp --http`: read from <data dir>/mcp-token, created
    (0600, random) when missing. A file of another mode is refused: others could read it."""
    path = token_path(settings)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise MemorydError(f"{path} is readable by others (mode {mode:o}); chmod 600 it")
    token = path.read_text().strip()
    if not token:
        raise MemorydError(f"{path} is empty; delete it to get a new token")
    return token


class BearerAuth:
    """ASGI middleware: a request without `Authorization: Bearer <token>` gets 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b'Bearer realm="memoryd"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"missing or wrong token\n"})
                return
        await self.app(scope, receive, send)


def transport_security(
    host: str, allowed_hosts: list[str], port: str = "*"
) -> TransportSecuritySettings:
    """The SDK's Host/Origin checks (DNS rebinding) for the address served (`port`: one, or
    any) and any extra names allowed; also the checks of the web page (memoryd/ui)."""
    names = [host, *allowed_hosts]
    if host in ("127.0.0.1", "localhost", "::1"):
        names += ["127.0.0.1", "localhost", "[::1]"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted({f"{n}:{port}" for n in names}),
        allowed_origins=sorted({f"http://{n}:{port}" for n in names}),
    )


def http_app(server: MCPServer, token: str, host: str, allowed_hosts: list[str]) -> Any:
    """The streamable HTTP app behind the token, with the SDK's Host/Origin checks."""
    security = transport_security(host, allowed_hosts)
    app = server.streamable_http_app(transport_security=security, host=host)
    return BearerAuth(app, token)


async def serve_http(settings: Settings, host: str, port: int, allowed_hosts: list[str]) -> None:
    import uvicorn

    server = build_server(settings)
    guarded = http_app(server, load_token(settings), host, allowed_hosts)
    config = uvicorn.Config(guarded, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


def serve_stdio(settings: Settings) -> None:
    build_server(settings).run("stdio")
