"""Files read and cut in a process of their own, for jobs of many files.

Redaction and chunking were half the Python time of a first index, under the serving
process's one GIL with the event loop, the database client's encoding and the search index's
writes. In a second process they run beside all that. A job of a few files (an edit) reads
them in a thread: no process start-up in its way. The process goes when idle for
`IDLE_SECONDS`, and with the runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from memoryd import heap

log = logging.getLogger(__name__)

T = TypeVar("T")

# Jobs with at least this many files to read use the process (`index_files`).
MANY_FILES = 16
IDLE_SECONDS = 60.0
# prctl(2): a signal for this process when its parent dies (Linux).
PR_SET_PDEATHSIG = 1
# How often the reader process looks whether its parent is still there (every platform).
PARENT_CHECK_SECONDS = 1.0


def _die_with(parent: int) -> None:
    """The reader process's start: it ends with the process that started it, however that one
    ends. After a kill -9 of memoryd it was left waiting on its job pipe forever (it holds
    that pipe's write end itself, so no end of file ever comes), and multiprocessing's resource
    tracker with it (whose pipe it holds). Linux kills it at once; elsewhere, and should the
    parent have died before this ran, a thread sees the new parent pid."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(1)


def _call(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in the reader process. Its start-up ends with the first call, whose `fn`
    came with the imports of the job that runs it: frozen then, out of the collector's full
    passes (heap.freeze_startup)."""
    heap.freeze_startup()
    return fn(*args)


class Reader:
    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._busy = 0
        self._last = 0.0
        self._reaper: asyncio.Task[None] | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the process. One that died (killed for its memory) is replaced at
        the next call, and this call runs in a thread."""
        if self._pool is None:
            # A new interpreter, not a fork of this process: its threads (the database's, the
            # model's) hold locks a fork would copy held. Nothing stays when the pool goes.
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                1, mp_context=context, initializer=_die_with, initargs=(os.getpid(),)
            )
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())
        pool = self._pool
        self._busy += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(
                pool, functools.partial(_call, fn, *args)
            )
        except BrokenProcessPool:
            log.warning("the file reader process died; this file is read here, the next there")
            if self._pool is pool:
                self._pool = None
            return await asyncio.to_thread(fn, *args)
        finally:
            self._busy -= 1
            self._last = time.monotonic()

    async def _reap(self) -> None:
        while self._pool is not None:
            await asyncio.sleep(IDLE_SECONDS / 4)
            if not self._busy and time.monotonic() - self._last > IDLE_SECONDS:
                self._stop()

    def _stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # A file being cut is not waited for (a stop within seconds); its job runs again.
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()

    async def close(self) -> None:
        self._stop()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
