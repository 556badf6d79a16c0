"""The process's own heap: how much anonymous memory it holds, and handing freed pages back.

glibc keeps the pages that native code (the database engine, the model runtime) freed, so the
resident size stays at its high-water mark unless they are handed back explicitly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from pathlib import Path

_STATUS = Path("/proc/self/status")


def anon_rss_bytes() -> int | None:
    """The process's anonymous resident memory (the heap, without mapped files), or None where
    /proc is not there (macOS)."""
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


def trim() -> None:
    """Hand the heap pages that were freed back to the OS (a no-op where glibc is not used)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
