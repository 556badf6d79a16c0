"""Is that process alive? Answered by lock files held with flock, which the kernel releases
when the holder dies, however it dies: unlike a pid file and kill(pid, 0), a reused pid never
passes for the dead process. The holder's pid is written inside, to name it in messages."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

# A daemon that starts while a one-shot command serves the data dir (no daemon ran when it
# began) waits this long for it to end; a one-shot command waits as long for a daemon that is
# starting (memoryd/client.py). Loading the model alone takes 15 s on a loaded machine.
SERVING_WAIT_SECONDS = 300.0


class HeldLock:
    """An exclusive lock on `path`, held until :meth:`release` or the process's end."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.path = path
        self._fd: int | None = fd

    def release(self, remove: bool = False) -> None:
        """Unlock (`remove`: delete the file first, while still holding it, so nobody locks a
        file that is about to vanish). A read-only directory keeps the file: it is harmless,
        an unheld lock names no live process."""
        if self._fd is None:
            return
        if remove:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self._fd)
        self._fd = None


def holder(path: Path) -> int | None:
    """The pid of the live process holding the lock at `path`, or None when nobody does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        return None  # we got it: nobody holds it
    finally:
        os.close(fd)
