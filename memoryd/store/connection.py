"""The connection under the Store: opening it, and giving the embedded engine's memory back.

What the embedded engine (surrealdb-embedded 3.0.0b10: surrealdb-core 3.2 on SurrealKV 0.21, an
LSM tree) does with memory, measured here:
- Everything written goes to an in-memory table (the memtable) and stays there until the
  datastore is closed, which writes it out as a table file. surrealdb-core sizes the memtable
  from the machine's memory (1 GiB on 16-64 GiB) and this build reads no setting for it: the
  URL's query string is dropped and no SURREAL_* variable names it.
- When the memtable fills, the frozen one is never written out and every later write waits for
  ever (no table file, no CPU). Closing is the only flush that works.
- The block cache (half the machine's memory less 1 GiB) keeps every block that was read.
- `ALTER SYSTEM COMPACT` is refused ("does not support compaction requests").
- Every fourth table file written starts a merge of all of them with the whole first level into
  one file, which allocates about as much as it merges (~1.05x) and frees it after. That peak
  grows with the database and nothing outside the engine can bound it.
So a file-backed embedded connection is closed and opened again, between queries, once the
process's anonymous memory grew by `reopen_bytes` since it was opened, heap that the engine
already freed given back first (far cheaper than a reopen). The threshold is kept under half the
memtable the engine chose, so writes never reach the stall. A server connection (ws://) holds
nothing of the kind and is never reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from surrealdb import AsyncSurreal

from memoryd import heap
from memoryd.errors import MemorydError

log = logging.getLogger(__name__)

# URLs whose data lives in files of this process: the ones worth reopening (mem:// would lose
# everything).
_FILE_BACKED = ("surrealkv://", "file://", "rocksdb://")
# How often (seconds) the memory is looked at: reading /proc costs ~30 µs.
_CHECK_EVERY = 1.0
_MEMINFO = Path("/proc/meminfo")
# Where the engine (through the sysinfo crate) looks for a container's memory limit.
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)
_REOPEN_ATTEMPTS = 5
# How long close waits for the engine's calls under way (a long write on a loaded machine).
_CLOSE_WAIT_SECONDS = 120.0
# The engine build every figure above was measured on (the memtable table below above all);
# tests/test_engine.py fails when another is installed, so that it is measured again.
MEASURED_ENGINE = "3.0.0b10"
_GIB = 1 << 30
DEFAULT_REOPEN_BYTES = 96 << 20


def memtable_bytes(total_memory: int) -> int:
    """The memtable surrealdb-core 3.2 gives SurrealKV on a machine with this much memory."""
    for below, size in ((1, 64 << 20), (4, 128 << 20), (16, 256 << 20), (64, _GIB)):
        if total_memory < below * _GIB:
            return size
    return 4 * _GIB


def _first_int(path: Path, prefix: str = "") -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(prefix):
                return int(line.removeprefix(prefix).split()[0])
    except (OSError, ValueError, IndexError):
        return None  # not there, or "max": no limit
    return None


def engine_memory_bytes() -> int | None:
    """The memory the engine sizes itself by: the machine's, or a smaller container limit
    (Linux). Without /proc (macOS) the machine's memory as sysconf gives it; None where
    neither is known."""
    kib = _first_int(_MEMINFO, "MemTotal:")
    if kib is None:
        return _physical_memory()
    limits = [n for path in _CGROUP_LIMITS if (n := _first_int(path)) is not None and n > 0]
    return min([kib * 1024, *limits])


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf, or not these names
        return None


def reopen_threshold(configured: int, total_memory: int | None) -> int:
    """Growth that triggers a reopen: as configured, but under half the engine's memtable."""
    if total_memory is None:
        return configured
    return min(configured, memtable_bytes(total_memory) // 2)


def count_growth_from(
    floor: int | None, opened: int | None, threshold: int | None, merged_before: bool
) -> tuple[int | None, bool]:
    """Where a reopened connection counts its growth from, and whether this open merged.

    `floor` is the process's anonymous memory with the datastore closed, `opened` with it open
    again. An open that merges the engine's table files keeps the merge's memory until the next
    close (measured at a 285 MiB database: 174 MiB, held five minutes until the next reopen
    gave 391 MiB back). Counting from the floor lets the next check give it back at once. Only
    once in a row: an engine whose every open is that big must not reopen in a loop."""
    if floor is None or opened is None or threshold is None:
        return opened, False
    merged = opened - floor >= threshold
    return (floor if merged and not merged_before else opened), merged


def _change(before: int, after: int) -> str:
    moved = (before >> 20) - (after >> 20)
    if moved > 0:
        return f": {moved} MiB given back ({before >> 20} MiB -> {after >> 20} MiB)"
    return f": nothing given back ({before >> 20} MiB -> {after >> 20} MiB)"


def _lock_message(url: str) -> str:
    return (
        f"the database {url} is locked by another memoryd process. The embedded database "
        "allows one process: stop the other memoryd (or send it your command: it runs "
        "`memoryd search`/`index`/`status` for you while it is up), or use the server mode "
        "(a SurrealDB server via MEMORYD_SURREAL_URL=ws://…) to run several processes."
    )


# Whether this process opened a database. The embedded engine's threads then live until the
# process ends, and one that touches the interpreter while it finalizes aborts the process
# (memoryd/entry.py ends such a process without finalizing it).
opened = False


async def _connect(
    url: str, namespace: str, database: str, user: str | None, password: str | None
) -> Any:
    global opened
    opened = True
    if (root := files_of(url)) is not None:
        await asyncio.to_thread(_replace_files, root)
    try:
        # The embedded engine opens (and locks) the files when constructed: in a thread, since
        # that reads them (a reopen under load took seconds, the event loop stopped meanwhile).
        db = await asyncio.to_thread(AsyncSurreal, url)
        await db.connect()
        if user is not None:
            await db.signin({"username": user, "password": password or ""})
        await db.use(namespace, database)
    except Exception as exc:
        text = str(exc)
        if "already locked" in text or "LOCK" in text:
            raise MemorydError(_lock_message(url)) from None
        raise MemorydError(f"cannot open the database {url}: {text}") from None
    if root is not None:
        await asyncio.to_thread(_keep_private, root)
    return db


def files_of(url: str) -> Path | None:
    """The directory of a file-backed database; None for a server or an in-memory one."""
    return Path(url.split("://", 1)[1]) if url.startswith(_FILE_BACKED) else None


def replacement_of(root: Path) -> Path:
    """Where a finished copy of the database at `root` waits to replace it."""
    return root.with_name(root.name + ".replacement")


def _replace_files(root: Path) -> None:
    """Put a finished copy in place of the database's files (closed): two renames, then the
    old files go. A crash between any two of these is finished by the next open."""
    copy, old = replacement_of(root), root.with_name(root.name + ".replaced")
    if copy.exists():
        if root.exists():
            shutil.rmtree(old, ignore_errors=True)
            root.rename(old)
        copy.rename(root)
    shutil.rmtree(old, ignore_errors=True)


def _keep_private(root: Path) -> None:
    """0700 directories and 0600 files: the engine creates some with fixed modes (its WAL
    0750) that no umask narrows, and a reopen creates them again."""
    for path in [root, *root.rglob("*")]:
        with contextlib.suppress(FileNotFoundError):  # the engine may remove a file meanwhile
            if not path.is_symlink():
                path.chmod(0o700 if path.is_dir() else 0o600)


class Connection:
    """One database connection, shared by concurrent queries; reopened when it grew."""

    def __init__(
        self,
        db: Any,
        url: str,
        login: tuple[str, str, str | None, str | None],
        reopen_bytes: int,
    ) -> None:
        self._db = db
        self.url = url
        self._login = login  # namespace, database, user, password
        self._recycle = (
            reopen_threshold(reopen_bytes, engine_memory_bytes())
            if url.startswith(_FILE_BACKED)
            else None
        )
        self._baseline = heap.anon_rss_bytes() or 0
        self._checked = time.monotonic()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()
        self._open.set()
        self.reopened = 0
        # Whether the last open took the reopen threshold or more (a merge, see count_growth_from).
        self._merged = False
        # Set when a reopen could not open the files again: every query raises it from then
        # on (never a closed connection behind an open gate), and the daemon stops on it.
        self.broken: MemorydError | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        namespace: str,
        database: str,
        user: str | None = None,
        password: str | None = None,
        reopen_bytes: int = DEFAULT_REOPEN_BYTES,
    ) -> Connection:
        login = (namespace, database, user, password)
        return cls(await _connect(url, *login), url, login, reopen_bytes)

    async def close(self) -> None:
        """Close once the engine finished every call under way (bounded): closing it under a
        running query aborts the process (a panic in a function that cannot unwind)."""
        try:
            await asyncio.wait_for(self._idle.wait(), _CLOSE_WAIT_SECONDS)
        except TimeoutError:
            log.warning(
                "%d database calls still running after %.0fs; closing the database anyway",
                self._in_flight,
                _CLOSE_WAIT_SECONDS,
            )
        await self._db.close()

    def rebase(self) -> None:
        """Count growth from now: what the process loaded since the connection opened (the
        model, at start-up) is not the database's, and a reopen would not give it back."""
        self._baseline = heap.anon_rss_bytes() or 0

    def discount(self, size: int) -> None:
        """Count growth as if the process had held `size` more bytes when counting began."""
        self._baseline += size

    @property
    def growth(self) -> int | None:
        """Anonymous memory gained since the connection opened (or `rebase`); None without
        /proc (macOS)."""
        rss = heap.anon_rss_bytes()
        return None if rss is None else rss - self._baseline

    async def query_raw(self, sql: str, params: dict[str, Any]) -> dict[str, Any]:
        while not self._open.is_set():  # a reopen is under way: queries wait for it
            await self._open.wait()
        if self.broken is not None:
            raise self.broken
        # The engine runs a call to its end even when its caller is cancelled, so the call is
        # counted until the engine is done with it (a reopen or close waits for that), not
        # until its caller stops waiting.
        call: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(
            self._db.query_raw(sql, params)
        )
        self._in_flight += 1
        self._idle.clear()
        call.add_done_callback(self._finished)
        response = await asyncio.shield(call)
        await self._reopen_if_grown()
        return response

    def _finished(self, call: asyncio.Future[dict[str, Any]]) -> None:
        if not call.cancelled():
            call.exception()  # a caller cancelled meanwhile never reads it: not an error to log
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
        rss = heap.anon_rss_bytes()
        if rss is None or rss - self._baseline < self._recycle:
            return
        await asyncio.to_thread(heap.trim)
        if (heap.anon_rss_bytes() or 0) - self._baseline >= self._recycle:
            await self.reopen()

    @property
    def login(self) -> tuple[str, str, str | None, str | None]:
        """Namespace, database, user, password."""
        return self._login

    async def reopen(self) -> None:
        """Close and open again once the queries under way finished; new ones wait. A copy
        waiting at `replacement_of(files)` takes the place of the files meanwhile. Files that
        cannot be opened again leave the connection `broken`."""
        if not self._open.is_set():  # someone else is at it
            await self._open.wait()
            return
        if self.broken is not None:
            raise self.broken
        self._open.clear()
        baseline: int | None = None
        try:
            await self._idle.wait()
            before = heap.anon_rss_bytes()  # once the queries under way are done
            started = time.perf_counter()
            await self._db.close()
            await asyncio.to_thread(heap.trim)
            floor = heap.anon_rss_bytes()  # what the process holds with no datastore open
            for attempt in range(_REOPEN_ATTEMPTS):
                try:
                    self._db = await _connect(self.url, *self._login)
                    break
                except MemorydError as exc:  # the files' lock may outlive close() for a moment
                    if attempt + 1 == _REOPEN_ATTEMPTS:
                        self.broken = MemorydError(
                            f"the database could not be opened again after closing it to give "
                            f"its memory back ({exc})"
                        )
                        log.error("%s", self.broken)
                        raise self.broken from None
                    await asyncio.sleep(0.2 * 2**attempt)
            self.reopened += 1
            after = heap.anon_rss_bytes()
            # Says what happened, gain or not: the writes went to disk, and the heap moved by
            # however much the engine's buffers had held (a fresh open allocates some again).
            memory = "" if before is None or after is None else _change(before, after)
            log.info(
                "database reopened (what it held in memory is on disk now)%s in %.2fs",
                memory,
                time.perf_counter() - started,
            )
            baseline, self._merged = count_growth_from(floor, after, self._recycle, self._merged)
        finally:
            self._baseline = baseline if baseline is not None else heap.anon_rss_bytes() or 0
            self._open.set()
