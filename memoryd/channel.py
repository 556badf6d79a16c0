"""The query channel: the daemon answers queries on a unix socket in its data dir.

A query through the queue waits for two polls (the worker's for the job, the client's for the
result) and three Redis round trips; on this socket it is one request and one answer, and the
asking process needs neither arq nor the Redis client. The hook that agents run for every
prompt uses it from a process that loads nothing else (memoryd/agent/hook_client.py).

One request per connection: a frame holding (query name, arguments), answered by a frame
holding ("ok", value) or ("failed", message). A stream (the MCP session of `memoryd mcp`,
memoryd/agent/mcp_service.py) opens the same way; its ("ok", None) answer turns the connection
into a byte stream its handler owns until either side closes it. A frame is a 4-byte length and
a pickle, as arq pickles its jobs: the socket is 0600 in the 0700 data dir, so only its owner
can connect, and the answers are the same typed results the queue carries. The daemon serves
it; with an external Redis, workers elsewhere serve the queue and clients use that
(memoryd/client.py).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import struct
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.errors import DaemonUnavailable, JobFailed, MemorydError, value_of

if TYPE_CHECKING:
    import asyncio


_LENGTH = struct.Struct(">I")
# A request is a query's arguments, an answer at most a page of rows: anything larger is not
# a frame of ours.
MAX_FRAME = 256 << 20

Answer = Callable[[str, tuple[Any, ...]], Awaitable[Any]]
# A stream's handler: its arguments and the connection, after the ("ok", None) frame.
Stream = Callable[
    [tuple[Any, ...], "asyncio.StreamReader", "asyncio.StreamWriter"], Awaitable[None]
]
# The longest line a stream's reader takes (an MCP message is one JSON line).
STREAM_LINE = 16 << 20


def _frame(value: Any) -> bytes:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def _length(head: bytes) -> int:
    (length,) = _LENGTH.unpack(head)
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes")
    return length


def _result(reply: tuple[str, Any]) -> Any:
    """The value of an answer; a user error raised again as its own class."""
    status, value = reply
    if status == "failed":
        raise JobFailed(value)
    return value_of(value)


def listening(path: Path) -> bool:
    """Something accepts connections on this unix socket (a file left by a killed daemon
    refuses at once)."""
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(1)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class Channel:
    """The daemon's listening socket and the streams open on it."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.streams: set[asyncio.StreamWriter] = set()

    def close(self) -> None:
        """No new connection; open streams end (their peers see the daemon stop), while the
        queries under way finish."""
        if self.server is not None:
            self.server.close()
        for writer in self.streams:
            writer.close()


async def serve(path: Path, answer: Answer, streams: Mapping[str, Stream] | None = None) -> Channel:
    """Answer queries on `path` until the channel is closed, and hand the connections that
    open one of `streams` to its handler. The caller holds the daemon lock, so a socket file
    already there was left by a daemon that is gone."""
    import asyncio  # here and in `ask`: the hook's process never runs an event loop

    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    served = Channel()

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            length = _length(await reader.readexactly(4))
            name, args = pickle.loads(await reader.readexactly(length))
            if streams and name in streams:
                served.streams.add(writer)
                try:
                    writer.write(_frame(("ok", None)))
                    await writer.drain()
                    await streams[name](tuple(args), reader, writer)
                finally:
                    served.streams.discard(writer)
                return
            try:
                reply: tuple[str, Any] = ("ok", await answer(name, tuple(args)))
            except MemorydError as exc:  # the answer's own errors cross as they do on the queue
                reply = ("failed", str(exc))
            writer.write(_frame(reply))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the asker gave up (a hook past its budget): nobody to answer
        except (ValueError, pickle.UnpicklingError, TypeError) as exc:
            # Imported here: the hook's process, which only asks, never loads logging.
            import logging

            logging.getLogger(__name__).warning(
                "query channel: a malformed request was refused (%s)", exc
            )
        finally:
            writer.close()

    old = os.umask(0o177)  # the socket is created 0600, never briefly wider
    try:
        served.server = await asyncio.start_unix_server(one, path=str(path), limit=STREAM_LINE)
    finally:
        os.umask(old)
    return served


async def ask(path: Path, name: str, args: tuple[Any, ...], timeout: float) -> Any:
    """Ask the daemon listening on `path`; DaemonUnavailable when none does."""
    import asyncio

    try:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_FRAME)
    except OSError as exc:
        raise DaemonUnavailable(f"no memoryd answers on {path} ({exc.strerror})") from None
    try:
        writer.write(_frame((name, args)))
        await writer.drain()
        async with asyncio.timeout(timeout):
            head = await reader.readexactly(4)
            reply = pickle.loads(await reader.readexactly(_length(head)))
    except TimeoutError:
        raise DaemonUnavailable(f"memoryd did not answer {name} within {timeout:.0f}s") from None
    except (asyncio.IncompleteReadError, ConnectionError):
        raise DaemonUnavailable(f"memoryd closed the channel during {name}") from None
    finally:
        writer.close()
    return _result(reply)


def ask_blocking(path: Path, name: str, args: tuple[Any, ...], timeout: float) -> Any:
    """`ask` for a process that runs no event loop (the hook: asyncio alone costs it 30 ms of
    imports). `timeout` bounds the whole exchange."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            sock.sendall(_frame((name, args)))
            with sock.makefile("rb") as stream:
                head = stream.read(4)
                body = stream.read(_length(head)) if len(head) == 4 else b""
        except TimeoutError:
            raise DaemonUnavailable(f"memoryd did not answer {name} within {timeout}s") from None
        except OSError as exc:
            raise DaemonUnavailable(f"no memoryd answers on {path} ({exc})") from None
    if len(head) < 4 or len(body) < _length(head):
        raise DaemonUnavailable(f"memoryd closed the channel during {name}")
    return _result(pickle.loads(body))


def open_stream(path: Path, name: str, args: tuple[Any, ...], timeout: float) -> socket.socket:
    """A stream opened on the daemon listening on `path` (blocking, for a process that runs
    no event loop): the connected socket, in blocking mode, once the daemon said yes.
    DaemonUnavailable when none listens or it refuses (a daemon too old to know `name`)."""
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(_frame((name, args)))
        head = _read_exactly(sock, 4)
        status, value = pickle.loads(_read_exactly(sock, _length(head)))
        if status != "ok":
            raise DaemonUnavailable(f"memoryd refused the {name} stream ({value})")
        sock.settimeout(None)
        return sock
    except (OSError, EOFError) as exc:
        sock.close()
        raise DaemonUnavailable(f"no memoryd answers on {path} ({exc})") from None
    except BaseException:
        sock.close()
        raise


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        if not (part := sock.recv(size - len(data))):
            raise EOFError("the channel closed")
        data += part
    return data
