"""A fault of the disk (full, read-only) under the index libraries, raised as the OSError by
which memoryd tells a disk fault (one log line) from a bug (a traceback). tantivy raises
ValueError, and usearch's save RuntimeError("Failed to serialize into stream"), whatever the
disk said."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

# tantivy's words for an I/O error, and for a writer killed by one in its thread ("io::Error
# most likely", it says: a panic reads the same, and the writer is as dead).
TANTIVY_IO = ("An IO error occurred", "An error occurred in a thread")


@contextlib.contextmanager
def disk_faults(
    raised: type[Exception], says: str | tuple[str, ...] = "", where: str = ""
) -> Iterator[None]:
    """`raised` whose message starts with `says` becomes OSError("`where`message")."""
    try:
        yield
    except raised as exc:
        if not str(exc).startswith(says):
            raise
        raise OSError(f"{where}{exc}") from exc


def tantivy_io() -> contextlib.AbstractContextManager[None]:
    return disk_faults(ValueError, TANTIVY_IO)
