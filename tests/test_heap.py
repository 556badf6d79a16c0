"""The process heap: memoryd caps glibc's arenas before its threads start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memoryd import heap

# A fresh process starts eight threads that each allocate, then counts the heaps (arenas) glibc
# reports in malloc_info.
_ARENAS_OF_EIGHT_THREADS = """
import ctypes, sys, tempfile, threading
from memoryd import heap
if sys.argv[1] == "tuned":
    heap.tune()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
started, held = threading.Barrier(9), threading.Event()
def allocate():
    libc.malloc(1024)
    started.wait()
    held.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads:
    t.start()
started.wait()
with tempfile.NamedTemporaryFile() as out:
    f = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, f)
    libc.fclose(f)
    print(open(out.name).read().count("<heap nr="))
held.set()
"""


def _arenas(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS_OF_EIGHT_THREADS, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout)


@pytest.mark.skipif(not heap.LINUX, reason="glibc's arenas: Linux only")
def test_tune_caps_the_heap_arenas_of_a_process_with_many_threads() -> None:
    assert _arenas("plain") > heap.ARENAS  # glibc's own default: an arena per thread here
    assert _arenas("tuned") == heap.ARENAS
