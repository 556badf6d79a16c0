"""The connection under the Store: opening it, and giving the embedded engine's memory back.

The embedded engine (surrealdb-embedded 3.0.0b10, SurrealKV) keeps in memory about as many
bytes as were written through it since it was opened (overwrites included) and returns them
only when it is closed; its cache and write-buffer sizes cannot be set from here (the URL's
query parameters and SURREAL_* variables are not read by this build). A daemon that runs for
days would grow without bound, so a file-backed embedded connection is closed and opened again,
between queries, once the process's anonymous memory grew by `recycle_bytes` since it was
opened. A server connection (ws://) holds nothing of the kind and is never reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from surrealdb import AsyncSurreal

from memoryd.errors import MemorydError

log = logging.getLogger(__name__)

# URLs whose data lives in files of this process: the ones worth reopening (mem:// would lose
# everything).
_FILE_BACKED = ("surrealkv://", "file://", "rocksdb://")
# How often (seconds) the memory is looked at: reading /proc costs ~30 µs.
_CHECK_EVERY = 1.0
_STATUS = Path("/proc/self/status")
_REOPEN_ATTEMPTS = 5


def anon_rss_bytes() -> int | None:
    """The process's anonymous resident memory (what the engine's buffers take), or None where
    /proc is not there (macOS): then the connection is never reopened."""
    try:
        with _STATUS.open() as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")  # runs ldconfig: once is enough
    return ctypes.CDLL(name) if name else None


def _trim_heap() -> None:
    """Hand the heap pages freed by the closed engine back to the OS (glibc keeps them)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def _lock_message(url: str) -> str:
    return (
        f"the database {url} is locked by another memoryd process. The embedded database "
        "allows one process: stop the other memoryd (or send it your command: it runs "
        "`memoryd search`/`index`/`status` for you while it is up), or use the server mode "
        "(a SurrealDB server via MEMORYD_SURREAL_URL=ws://…) to run several processes."
    )


async def _connect(
    url: str, namespace: str, database: str, user: str | None, password: str | None
) -> Any:
    try:
        # The embedded engine opens (and locks) the files when constructed.
        db = AsyncSurreal(url)
        await db.connect()
        if user is not None:
            await db.signin({"username": user, "password": password or ""})
        await db.use(namespace, database)
    except Exception as exc:
        text = str(exc)
        if "already locked" in text or "LOCK" in text:
            raise MemorydError(_lock_message(url)) from None
        raise MemorydError(f"cannot open the database {url}: {text}") from None
    return db


class Connection:
    """One database connection, shared by concurrent queries; reopened when it grew."""

    def __init__(
        self,
        db: Any,
        url: str,
        login: tuple[str, str, str | None, str | None],
        recycle_bytes: int | None,
    ) -> None:
        self._db = db
        self.url = url
        self._login = login  # namespace, database, user, password
        self._recycle = recycle_bytes if url.startswith(_FILE_BACKED) else None
        self._baseline = anon_rss_bytes() or 0
        self._checked = time.monotonic()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()
        self._open.set()
        self.reopened = 0

    @classmethod
    async def open(
        cls,
        url: str,
        namespace: str,
        database: str,
        user: str | None = None,
        password: str | None = None,
        recycle_bytes: int | None = None,
    ) -> Connection:
        login = (namespace, database, user, password)
        return cls(await _connect(url, *login), url, login, recycle_bytes)

    async def close(self) -> None:
        await self._db.close()

    async def query_raw(self, sql: str, params: dict[str, Any]) -> dict[str, Any]:
        async with self._in_use():
            response: dict[str, Any] = await self._db.query_raw(sql, params)
        await self._reopen_if_grown()
        return response

    @contextlib.asynccontextmanager
    async def _in_use(self) -> AsyncIterator[None]:
        while not self._open.is_set():  # a reopen is under way: queries wait for it
            await self._open.wait()
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _reopen_if_grown(self) -> None:
        if self._recycle is None or not self._open.is_set():
            return
        now = time.monotonic()
        if now - self._checked < _CHECK_EVERY:
            return
        self._checked = now
        rss = anon_rss_bytes()
        if rss is not None and rss - self._baseline >= self._recycle:
            await self.reopen()

    async def reopen(self) -> None:
        """Close and open again once the queries under way finished; new ones wait."""
        if not self._open.is_set():  # someone else is at it
            await self._open.wait()
            return
        self._open.clear()
        before = anon_rss_bytes() or 0
        try:
            await self._idle.wait()
            started = time.perf_counter()
            await self._db.close()
            await asyncio.to_thread(_trim_heap)
            for attempt in range(_REOPEN_ATTEMPTS):
                try:
                    self._db = await _connect(self.url, *self._login)
                    break
                except MemorydError:  # the files' lock may outlive close() for a moment
                    if attempt + 1 == _REOPEN_ATTEMPTS:
                        raise
                    await asyncio.sleep(0.2 * 2**attempt)
            self.reopened += 1
            log.info(
                "database reopened to give back its memory: %d MiB -> %d MiB in %.2fs",
                before >> 20,
                (anon_rss_bytes() or 0) >> 20,
                time.perf_counter() - started,
            )
        finally:
            self._baseline = anon_rss_bytes() or 0
            self._open.set()
