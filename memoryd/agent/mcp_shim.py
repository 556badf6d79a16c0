"""`memoryd mcp`: the stdio MCP process an agent starts, on the standard library alone.

Agents give an MCP server a few seconds to start (Claude Code: a 3 s version probe, then 5 s in
all), and importing the `mcp` SDK takes one on an idle machine and many on a loaded one. So this
process imports only the standard library, memoryd/paths.py and memoryd/channel.py (those only
at the first call: the handshake needs json alone), and:

- answers the handshake and the static listings (`initialize`, `tools/list`, ...) itself, from
  the SDK server's own answers generated into memoryd/agent/mcp_declaration.json
  (memoryd/agent/mcp_service.py): the tools are listed at once, whether or not the daemon runs;
- answers the modern era's `server/discover` probe as a server without it does, so clients
  take the handshake at once instead of waiting out the probe;
- at the first other request (a tool call), opens an SDK session and passes the session's JSON
  lines both ways from then on, after replaying the client's `initialize` to it. The session
  runs inside the daemon, over an `mcp` stream of its query channel. With an external Redis
  and no daemon in this data dir, it runs in a child process (`memoryd mcp --in-process`,
  which imports the SDK and reaches the daemon through the queue), started only then;
- with no daemon, answers each call at once with how to start one, and tries again at the
  next call, so a daemon started (or restarted) during the agent's session is used then.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, TYPE_CHECKING, Any

# Imported where a call needs them: under load every module costs the handshake (the memoryd
# ones bring dataclasses, logging, pickle, tomllib).
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

DECLARATION = os.path.join(os.path.dirname(__file__), "mcp_declaration.json")
STREAM = "mcp"  # memoryd/agent/mcp_service.py serves it
# Requests answered from the declaration (they depend on nothing but the tool table).
STATIC = ("initialize", "tools/list", "resources/list", "resources/templates/list", "prompts/list")
# The 2026 era's probe: "method not found" sends clients to the handshake at once.
PROBES = ("server/discover",)
METHOD_NOT_FOUND, INTERNAL_ERROR = -32601, -32603
# The id of the replayed `initialize`: no client's (their ids are theirs to choose, but a
# session's first request is theirs, and this one is never answered to them).
ATTACH_ID = "memoryd-shim-attach"
# How long opening the daemon's stream may take (it answers at once when it runs).
OPEN_SECONDS = 10.0

Json = dict[str, Any]


def parse(argv: list[str]) -> tuple[str | None] | None:
    """(--data-dir,) of `mcp [--data-dir DIR]`, or None for anything else (`--http`, help),
    which the full command line answers."""
    if argv == ["mcp"]:
        return (None,)
    if len(argv) == 3 and argv[:2] == ["mcp", "--data-dir"]:
        return (argv[2],)
    return None


class Upstream:
    """A byte stream to an SDK session (the daemon's or a child's), with the requests sent on
    it that wait for an answer."""

    def __init__(
        self, send: Callable[[bytes], None], lines: IO[bytes], close: Callable[[], None]
    ) -> None:
        self.send = send
        self.lines = lines
        self.close = close
        self.pending: dict[str, Json] = {}


def _key(request_id: object) -> str:
    return json.dumps(request_id)


def _line(message: Json) -> bytes:
    """One JSON-RPC message as the wire has it (compact, as the SDK writes)."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class Shim:
    def __init__(self, data_dir: str | None, out: IO[bytes]) -> None:
        self.data_dir = data_dir  # --data-dir, if given
        self.out = out
        with open(DECLARATION, "rb") as f:
            self.declaration: dict[str, dict[str, Json]] = json.load(f)
        self.version = list(self.declaration)[-1]  # the newest, until the client asks
        self.init_params: Json | None = None
        self.upstream: Upstream | None = None
        # Made with the first session: no thread runs before it.
        self.lock: threading.Lock | None = None  # upstream and its pending requests
        self.out_lock: threading.Lock | None = None  # whole lines on stdout

    # -- to the client ---------------------------------------------------------------------

    def write(self, line: bytes) -> None:
        if self.out_lock is None:
            self._write(line)
        else:
            with self.out_lock:
                self._write(line)

    def _write(self, line: bytes) -> None:
        self.out.write(line.rstrip(b"\n") + b"\n")
        self.out.flush()

    def reply(self, request_id: object, result: Json) -> None:
        self.write(_line({"jsonrpc": "2.0", "id": request_id, "result": result}))

    def error(self, request_id: object, code: int, message: str) -> None:
        error = {"code": code, "message": message}
        self.write(_line({"jsonrpc": "2.0", "id": request_id, "error": error}))

    def unanswered(self, request: Json, why: str | None = None) -> None:
        """A request no session can answer: a tool call's error result, as the SDK gives one
        (the agent reads it), or a JSON-RPC error."""
        from memoryd.errors import NOT_RUNNING

        why = why or NOT_RUNNING
        if request.get("method") == "tools/call":
            name = (request.get("params") or {}).get("name")
            text = f"Error executing tool {name}: {why}"
            content = [{"type": "text", "text": text}]
            self.reply(request["id"], {"content": content, "isError": True})
        else:
            self.error(request["id"], INTERNAL_ERROR, why)

    # -- from the client -------------------------------------------------------------------

    def handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self.error(None, -32700, "Parse error")
            return
        method, request_id = message.get("method"), message.get("id")
        if method is None or request_id is None:
            # An answer to the session's own request, or a notification: the session's, if
            # there is one (`initialized` is replayed when one opens).
            if method != "notifications/initialized":
                self.forward(message, line, answer=False)
        elif method == "initialize":
            params = message.get("params") or {}
            asked = params.get("protocolVersion")
            self.version = asked if asked in self.declaration else self.version
            self.init_params = params
            static = self.declaration[self.version]["initialize"]
            self.reply(request_id, {"protocolVersion": self.version, **static})
        elif method in STATIC:
            self.reply(request_id, self.declaration[self.version][method])
        elif method == "ping":
            self.reply(request_id, {})
        elif method in PROBES:
            self.error(request_id, METHOD_NOT_FOUND, "Method not found")
        else:
            self.forward(message, line, answer=True)

    def forward(self, message: Json, line: bytes, answer: bool) -> None:
        """Send `message` to the session, opening one if needed; a request that cannot be
        sent (no daemon) is answered here. A session that broke is opened again once."""
        if self.lock is None:
            import threading

            self.lock, self.out_lock = threading.Lock(), threading.Lock()
        for _ in range(2):
            with self.lock:
                upstream = self.upstream
                if upstream is None and answer:
                    upstream = self.upstream = self.attach()
                if upstream is None:
                    break
                if answer:
                    upstream.pending[_key(message["id"])] = message
                try:
                    upstream.send(line.rstrip(b"\n") + b"\n")
                    return
                except OSError:
                    upstream.pending.pop(_key(message.get("id")), None)
                    self.upstream = None  # its reader answers what it still owed
                    upstream.close()
        if answer:
            self.unanswered(message)

    # -- the session -----------------------------------------------------------------------

    def attach(self) -> Upstream | None:
        """A session opened and initialized as the client asked, its reader started; None
        when nothing can serve one (no daemon)."""
        import threading

        from memoryd.errors import DaemonUnavailable

        try:
            upstream = self.open()
        except (DaemonUnavailable, OSError):
            return None
        params = self.init_params or {
            "protocolVersion": self.version,
            "capabilities": {},
            "clientInfo": {"name": "memoryd-mcp", "version": "0"},
        }
        replay = {"jsonrpc": "2.0", "id": ATTACH_ID, "method": "initialize", "params": params}
        try:
            upstream.send(_line(replay))
            for line in upstream.lines:
                answer = json.loads(line)
                if answer.get("id") == ATTACH_ID and "method" not in answer:
                    break
            else:
                raise EOFError("the session closed during its handshake")
            if "result" not in answer:
                raise EOFError(f"the session refused its handshake: {answer.get('error')}")
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            upstream.send(_line(initialized))
        except (OSError, ValueError, EOFError) as exc:
            sys.stderr.write(f"memoryd mcp: {exc}\n")
            upstream.close()
            return None
        threading.Thread(target=self.read, args=(upstream,), daemon=True).start()
        return upstream

    def open(self) -> Upstream:
        """The daemon's session when it runs in this data dir; with an external Redis, a child
        serving one through the queue (the daemon may be elsewhere)."""
        import contextlib
        import socket
        import subprocess

        from memoryd import channel, paths

        # Read for each session opened: a config changed during the agent's session counts.
        given = paths.plain_settings("redis_url", "data_dir")
        data_dir = paths.plain_data_dir(self.data_dir or given.get("data_dir"))
        socket_path = paths.channel_socket(data_dir)
        if channel.listening(socket_path) or not given.get("redis_url"):
            sock = channel.open_stream(socket_path, STREAM, (os.getcwd(),), OPEN_SECONDS)

            def hang_up() -> None:
                # Shut down, not only closed: the reader's file keeps the socket open.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

            return Upstream(sock.sendall, sock.makefile("rb"), hang_up)
        command = [sys.executable, "-c", "from memoryd.entry import main; main()", "mcp"]
        child = subprocess.Popen(
            [*command, "--in-process", "--data-dir", str(data_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert child.stdin is not None and child.stdout is not None
        stdin = child.stdin

        def send(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        def close() -> None:
            stdin.close()  # the SDK ends its session at the end of its input
            try:
                child.wait(OPEN_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()

        return Upstream(send, child.stdout, close)

    def read(self, upstream: Upstream) -> None:
        """Pass the session's lines to the client until it ends; then answer what it still
        owed, and let the next request open a new one."""
        try:
            for line in upstream.lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    message = {}
                if isinstance(message, dict) and "method" not in message:
                    assert self.lock is not None
                    with self.lock:
                        upstream.pending.pop(_key(message.get("id")), None)
                self.write(line)
        except OSError:
            pass  # a connection reset: the same end as a close
        assert self.lock is not None  # made before the first session
        with self.lock:
            if self.upstream is upstream:
                self.upstream = None
            owed, upstream.pending = list(upstream.pending.values()), {}
        for request in owed:
            self.unanswered(request, "memoryd stopped during the call; call again once it runs")

    def close(self) -> None:
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None


def run(data_dir: str | None) -> None:
    shim = Shim(data_dir, sys.stdout.buffer)
    try:
        for line in sys.stdin.buffer:
            if line.strip():
                shim.handle(line)
    finally:
        shim.close()
