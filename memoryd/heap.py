"""The process's own heap: how much memory it holds, and handing freed pages back.

glibc keeps the pages that native code (the database engine, the model runtime) freed, so the
resident size stays at its high-water mark unless they are handed back explicitly.

Linux reads /proc and calls glibc's `malloc_trim`; macOS has neither: the resident size comes
from the kernel's task info, and its allocator gives freed pages back by itself. Elsewhere
(Windows runs memoryd in WSL, which is Linux) memory is not measured.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

_STATUS = Path("/proc/self/status")
LINUX = sys.platform.startswith("linux")
MACOS = sys.platform == "darwin"


def anon_rss_bytes() -> int | None:
    """The process's anonymous resident memory (the heap, without mapped files) on Linux; its
    whole resident size on macOS; None where neither can be read."""
    if LINUX:
        try:
            with _STATUS.open() as status:
                for line in status:
                    if line.startswith("RssAnon:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None
    if MACOS:
        return _mach_resident_bytes()
    return None


class _MachTaskBasicInfo(ctypes.Structure):
    _fields_ = (
        ("virtual_size", ctypes.c_uint64),
        ("resident_size", ctypes.c_uint64),
        ("resident_size_max", ctypes.c_uint64),
        ("user_time", ctypes.c_int32 * 2),
        ("system_time", ctypes.c_int32 * 2),
        ("policy", ctypes.c_int32),
        ("suspend_count", ctypes.c_int32),
    )


_MACH_TASK_BASIC_INFO = 20  # the flavor, from <mach/task_info.h>


T = TypeVar("T")


def told_what_it_took(load: Callable[[], T], told: Callable[[int], None] | None) -> T:
    """`load()`, and `told` the anonymous memory it took (not told where that is unknown)."""
    before = anon_rss_bytes() if told is not None else None
    loaded = load()
    if told is not None and before is not None:
        told(max(0, (anon_rss_bytes() or before) - before))
    return loaded


def _mach_resident_bytes() -> int | None:
    libc = _libc()
    if libc is None:
        return None
    try:
        task = ctypes.c_uint32.in_dll(libc, "mach_task_self_")
        info = _MachTaskBasicInfo()
        count = ctypes.c_uint32(ctypes.sizeof(info) // 4)
        status = libc.task_info(
            task, _MACH_TASK_BASIC_INFO, ctypes.byref(info), ctypes.byref(count)
        )
    except (AttributeError, ValueError, OSError):
        return None
    return int(info.resident_size) if status == 0 else None


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not (LINUX or MACOS):
        return None
    name = ctypes.util.find_library("c")  # runs ldconfig: once is enough
    return ctypes.CDLL(name) if name else None


_M_ARENA_MAX = -8  # glibc's mallopt parameter (<malloc.h>)
# Heap arenas of the whole process. glibc gives each new thread (the engine's, the model's,
# the workers') an arena of its own, up to 8 per core, and each keeps what was freed in it.
# The 1 GiB transcript bench peaked at 802 MiB with that, 701 MiB with 2 (bench/transcripts.py).
ARENAS = 2


def tune() -> None:
    """Cap the heap arenas (glibc only): called before the process starts its threads, since
    an arena a thread already has stays."""
    if not LINUX:
        return
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):  # musl has none
        libc.mallopt(_M_ARENA_MAX, ARENAS)


def freeze_startup() -> None:
    """Take what the process holds once it has started (modules, the database's client, the
    model's Python side: some 160,000 objects in the daemon) out of the garbage collector's
    full passes, once per process. A full pass walks every object the process holds; one
    came every other edit of a large file (its code graph leaves tens of thousands of new
    objects) and cost that edit's job about 100 ms of CPU, 10 ms once frozen. Cyclic garbage
    is collected first: only what is alive now stays out of later collections."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


def trim() -> None:
    """Hand the heap pages that were freed back to the OS: glibc's malloc_trim on Linux (musl
    has none), nothing to do on macOS."""
    if not LINUX:
        return
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
