"""A CPU hog: every core saturated, as a laptop running a build beside an agent is. Used by the
tests of what must stay fast under load and by the benches that print it (bench/mcp_start.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Each busy loop ends by itself after this long, even if whoever started it dies first.
HOG_SECONDS = 900
BUSY_LOOP = (
    f"import time\nend = time.monotonic() + {HOG_SECONDS}\n"
    "while time.monotonic() < end:\n    pass\n"
)


@contextmanager
def cpu_hog(per_core: int = 1) -> Iterator[int]:
    """`per_core` busy loops per core for the length of the block (killed at its end); yields
    how many run."""
    count = (os.cpu_count() or 1) * per_core
    loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(count)]
    try:
        yield count
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()
