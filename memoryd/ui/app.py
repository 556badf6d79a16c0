"""`memoryd ui`: the web page, a starlette app served on loopback by uvicorn.

Everything it shows is read through the client API (memoryd/client.py), as the CLI and MCP
read it. Who may use it:
- the URL `memoryd ui` prints carries the token of <data dir>/mcp-token (0600, the one MCP
  over HTTP uses); its first load trades it for a cookie (HttpOnly, SameSite=Strict) holding a
  secret of this server's own, and redirects to the same page without the token;
- every other request needs that cookie; every change is a POST carrying a CSRF token derived
  from the secret; Host and Origin are checked as for MCP (the SDK's checks), for this port;
- a Content-Security-Policy allows the page's own stylesheet and nothing else (no script, no
  other origin): the assets come from this package.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from memoryd.agent import mcp_server
from memoryd.client import Client
from memoryd.config import Settings
from memoryd.errors import InvalidRequest, MemorydError, NotFound
from memoryd.ids import split_file_key
from memoryd.results import FileHistory, SearchRequest
from memoryd.ui import pages

COOKIE = "memoryd_ui"
HOST = "127.0.0.1"
CSP = (
    "default-src 'none'; style-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    # Not no-referrer: with it the browser sends `Origin: null` on its own forms.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
# How far back the sessions page looks by default, and how many injections the memory page
# shows.
SESSION_DAYS = 30
INJECTIONS = 20
STATS_DAYS = 365
MAX_DAYS = 100 * 365
# A form is a few fields: anything bigger is not one of ours.
MAX_FORM_BYTES = 64 << 10

Connect = Callable[[], contextlib.AbstractAsyncContextManager[Client]]


class UiApp:
    """The page's routes and guard; `connect` opens a client of the daemon for a request."""

    def __init__(self, settings: Settings, connect: Connect, port: int) -> None:
        self.settings = settings
        self.connect = connect
        self.token = mcp_server.load_token(settings)
        # The cookie's value: this server's own, so the token itself never sits in a cookie.
        self.secret = secrets.token_urlsafe(32)
        self.csrf = hmac.new(self.secret.encode(), b"csrf", hashlib.sha256).hexdigest()
        security = mcp_server.transport_security(HOST, [], str(port))
        self.checks = TransportSecurityMiddleware(security)
        routes = [
            Route("/", self.overview),
            Route("/sessions", self.sessions),
            Route("/session/{id:path}", self.session),
            Route("/file", self.file),
            Route("/search", self.search),
            Route("/record", self.record),
            Route("/memory", self.memory),
            Route("/static/{name}", self.static),
            Route("/pin", self.pin, methods=["POST"]),
            Route("/forget-memory", self.forget_memory, methods=["POST"]),
            Route("/pause", self.pause, methods=["POST"]),
            Route("/resume", self.resume, methods=["POST"]),
            Route("/forget/preview", self.forget_preview, methods=["POST"]),
            Route("/forget", self.forget, methods=["POST"]),
        ]
        self.app = Starlette(routes=routes)

    def url(self, port: int) -> str:
        return f"http://{HOST}:{port}/?{urlencode({'token': self.token})}"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        response = await self.guard(request)
        if response is None:
            await self.app(scope, _replay(request, receive), self._headed(send))
            return
        for name, value in HEADERS.items():
            response.headers[name] = value
        await response(scope, receive, send)

    def _headed(self, send: Any) -> Any:
        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    *((k.encode(), v.encode()) for k, v in HEADERS.items()),
                ]
            await send(message)

        return with_headers

    async def guard(self, request: Request) -> Response | None:
        """None when the request may go on; else the refusal."""
        refused = await self.checks.validate_request(request)
        if refused is not None:
            return refused
        given = request.query_params.get("token")
        if given is not None and request.method == "GET":
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return PlainTextResponse("wrong token\n", status_code=401)
            # Traded for the cookie; the address bar and history keep no token.
            rest = {k: v for k, v in request.query_params.items() if k != "token"}
            target = request.url.path + ("?" + urlencode(rest) if rest else "")
            done = RedirectResponse(target, status_code=303)
            done.set_cookie(COOKIE, self.secret, httponly=True, samesite="strict", path="/")
            return done
        cookie = request.cookies.get(COOKIE, "")
        if not hmac.compare_digest(cookie.encode(), self.secret.encode()):
            return PlainTextResponse(
                "not signed in: open the address `memoryd ui` prints\n", status_code=401
            )
        if request.method == "POST":
            if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
                return PlainTextResponse("form too large\n", status_code=413)
            form = parse_qs((await request.body()).decode(errors="replace"))
            given_csrf = (form.get("csrf") or [""])[0]
            if not hmac.compare_digest(given_csrf.encode(), self.csrf.encode()):
                return PlainTextResponse("missing or wrong CSRF token\n", status_code=403)
        return None

    # -- pages ------------------------------------------------------------------------------

    async def _page(
        self,
        title: str,
        current: str,
        body: Callable[[Client], Awaitable[str]],
        later: Callable[[Client], Awaitable[str]] | None = None,
    ) -> Response:
        """A page whose body is read from the daemon; memoryd's own errors shown on it. A
        `later` part (a slower read) is sent after the body, in the same response: the browser
        paints the body meanwhile; a memoryd error of that part is shown in its place."""
        try:
            async with self.connect() as memoryd:
                html = await body(memoryd)
            status = 200
        except MemorydError as exc:
            html, later = pages.error_body(str(exc)), None
            status = 404 if isinstance(exc, NotFound) else 400
        if later is None:
            return HTMLResponse(pages.layout(title, html, current), status_code=status)
        top, bottom = pages.frame(title, current)

        async def parts() -> AsyncIterator[str]:
            yield top + html
            try:
                async with self.connect() as memoryd:
                    rest = await later(memoryd)
            except MemorydError as exc:
                rest = pages.error_body(str(exc))
            yield rest + bottom

        return StreamingResponse(parts(), media_type="text/html; charset=utf-8")

    async def overview(self, request: Request) -> Response:
        async def body(memoryd: Client) -> str:
            status = await memoryd.status()
            return pages.overview(status, await memoryd.daily_stats(STATS_DAYS))

        return await self._page("Overview", "/", body)

    async def sessions(self, request: Request) -> Response:
        chosen = dict(request.query_params)
        chosen.setdefault("days", str(SESSION_DAYS))

        async def body(memoryd: Client) -> str:
            days = _positive(chosen["days"], "days")
            since = datetime.now(UTC) - timedelta(days=days)
            found = await memoryd.recent_activity(chosen.get("project") or None, since)
            return pages.sessions(found["sessions"], await memoryd.projects(), chosen)

        return await self._page("Sessions", "/sessions", body)

    async def session(self, request: Request) -> Response:
        ident = request.path_params["id"]

        async def body(memoryd: Client) -> str:
            return pages.session(await memoryd.session(ident))

        return await self._page(f"Session {ident}", "/sessions", body)

    async def file(self, request: Request) -> Response:
        path = request.query_params.get("path", "").strip()
        read: dict[str, Any] = {}

        async def body(memoryd: Client) -> str:
            read["path"] = await _absolute(memoryd, path)
            read["history"] = await memoryd.history(read["path"])
            return pages.file(read["history"])

        async def graph(memoryd: Client) -> str:
            """The code graph around the file, then its chunks: sent after the sessions (read
            before them, the graph took the page's first paint from 128 ms to 308 ms)."""
            history: FileHistory = read["history"]
            found = None
            if history["file"].get("project"):
                # A project's file the graph has not read (prose, a file not indexed yet)
                # is not an error of the page: it says so.
                with contextlib.suppress(NotFound):
                    found = await memoryd.related(read["path"], cwd=str(Path(read["path"]).parent))
            return pages.file_graph(found, history)

        return await self._page(f"File {path}", "", body, graph)

    async def search(self, request: Request) -> Response:
        chosen = dict(request.query_params)

        async def body(memoryd: Client) -> str:
            form = pages.search_form(chosen, await memoryd.projects())
            query = chosen.get("q", "").strip()
            if not query:
                return form
            found = await memoryd.search(
                SearchRequest(
                    query,
                    (chosen.get("kind") or "code",),
                    limit=20,
                    project=chosen.get("project") or None,
                    path=chosen.get("path") or None,
                    language=chosen.get("language") or None,
                )
            )
            return form + pages.hits(found.hits)

        return await self._page("Search", "/search", body)

    async def record(self, request: Request) -> Response:
        ident = request.query_params.get("id", "")

        async def body(memoryd: Client) -> str:
            found = await memoryd.get([ident], max_chars=100_000)
            if not found:
                raise NotFound(f"no record {ident!r}")
            return pages.record(found[0], self.csrf)

        return await self._page(f"Record {ident}", "", body)

    async def memory(self, request: Request) -> Response:
        chosen = request.query_params.get("project")

        async def body(memoryd: Client) -> str:
            projects = await memoryd.projects()
            project = chosen or (projects[0]["id"] if projects else None)
            # A note is kept for good (pinned): the whole history of the project's notes.
            since = datetime.fromtimestamp(0, UTC)
            notes = (await memoryd.recent_activity(project, since))["notes"] if project else []
            return pages.memory(
                notes,
                await memoryd.injections(INJECTIONS),
                await memoryd.status(),
                projects,
                project,
                self.csrf,
            )

        return await self._page("Memory you control", "/memory", body)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        asset = resources.files("memoryd.ui") / "static" / name
        if name != "ui.css" or not asset.is_file():
            return PlainTextResponse("not found\n", status_code=404)
        return Response(asset.read_bytes(), media_type="text/css")

    # -- changes: POSTs, past the CSRF check ----------------------------------------------------

    async def _change(self, work: Callable[[Client], Awaitable[Any]], back: str) -> Response:
        try:
            async with self.connect() as memoryd:
                await work(memoryd)
        except MemorydError as exc:
            html = pages.layout("Not done", pages.error_body(str(exc)), "")
            return HTMLResponse(html, status_code=400)
        # Only our own pages: a form's `back` never sends the browser elsewhere.
        return RedirectResponse(back if back.startswith("/") else "/", status_code=303)

    async def pin(self, request: Request) -> Response:
        form = await request.form()
        ident, pinned = str(form.get("id", "")), form.get("pinned") == "1"
        return await self._change(lambda m: m.pin(ident, pinned), str(form.get("back", "/")))

    async def forget_memory(self, request: Request) -> Response:
        form = await request.form()
        ident = str(form.get("id", ""))
        return await self._change(lambda m: m.forget([ident]), str(form.get("back", "/")))

    async def pause(self, request: Request) -> Response:
        return await self._change(lambda m: m.pause(), "/memory")

    async def resume(self, request: Request) -> Response:
        return await self._change(lambda m: m.resume(), "/memory")

    async def forget_preview(self, request: Request) -> Response:
        scope, value = await _scope_of(request)

        async def body(memoryd: Client) -> str:
            preview = await memoryd.forget_scope(scope, value, dry_run=True)
            return pages.forget_preview(scope, value, preview, self.csrf)

        return await self._page("Forget: preview", "/memory", body)

    async def forget(self, request: Request) -> Response:
        scope, value = await _scope_of(request)

        async def body(memoryd: Client) -> str:
            return pages.forgotten(scope, value, await memoryd.forget_scope(scope, value))

        return await self._page("Forgotten", "/memory", body)


async def _absolute(memoryd: Client, path: str) -> str:
    """A file's absolute path; the graph names a project's file `<project id>:<path>` (a
    session's actions link to it so)."""
    if Path(path).is_absolute():
        return path
    project_id, rel_path = split_file_key(path)
    roots = {p["id"]: p["root"] for p in await memoryd.projects()}
    if not rel_path or project_id not in roots:
        raise InvalidRequest(f"give a file's absolute path (or project:path): {path!r}")
    return str(Path(roots[project_id]) / rel_path)


def _replay(request: Request, receive: Any) -> Any:
    """The app's `receive`: the body the guard read (a POST's), then the client's own."""
    body: bytes | None = getattr(request, "_body", None)
    if body is None:
        return receive

    async def replayed() -> dict[str, Any]:
        nonlocal body
        if body is None:
            message: dict[str, Any] = await receive()
            return message
        message, body = {"type": "http.request", "body": body, "more_body": False}, None
        return message

    return replayed


async def _scope_of(request: Request) -> tuple[str, str]:
    form = await request.form()
    scope = str(form.get("scope", ""))
    if scope not in pages.FORGET_SCOPES:
        scope = ""  # the worker refuses it, naming the scopes
    return scope, str(form.get("value", "")).strip()


def _positive(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidRequest(f"{what}: not a number: {text!r}") from None
    if not 0 < value <= MAX_DAYS:
        raise InvalidRequest(f"{what}: give a number of days from 1 to {MAX_DAYS}")
    return value


def loopback_socket(port: int = 0) -> socket.socket:
    """The page's listening socket, on loopback only (`port` 0: any free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(64)
    sock.setblocking(False)
    return sock


class UiServer:
    """The page served by uvicorn in this process's event loop, started once when asked."""

    def __init__(self, settings: Settings, connect: Connect) -> None:
        self.settings = settings
        self.connect = connect
        self.address: str | None = None
        self._server: Any = None
        self._task: Any = None

    async def open(self, port: int = 0) -> str:
        """The page's URL (with the token), serving from now on."""
        import asyncio

        import uvicorn

        if self.address is None:
            try:
                sock = loopback_socket(port)
            except OSError as exc:
                raise MemorydError(f"the page cannot listen on {HOST}:{port} ({exc})") from None
            bound = sock.getsockname()[1]
            app = UiApp(self.settings, self.connect, bound)
            config = uvicorn.Config(app, log_level="warning", lifespan="off")
            self._server = _quiet_server()(config)
            self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
            self.address = app.url(bound)
        return self.address

    async def wait(self) -> None:
        """Until the server stops (`memoryd ui` serving in its own process)."""
        if self._task is not None:
            await self._task

    async def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            with contextlib.suppress(Exception):
                await self._task
            self._server = self._task = self.address = None


def _quiet_server() -> type:
    import uvicorn

    class Quiet(uvicorn.Server):
        """Signals are the serving process's business: uvicorn takes none of them."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Quiet


@contextlib.asynccontextmanager
async def answering_client(ctx: Any) -> AsyncIterator[Client]:
    """A client inside the daemon: its queries go straight to the daemon's own answers."""
    yield Client.answering(ctx["redis"], ctx["settings"], ctx["queries"])
