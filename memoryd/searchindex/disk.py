"""A fault of the disk (full, read-only) under the index libraries, raised as the OSError by
which memoryd tells a disk fault (one log line) from a bug (a traceback). tantivy raises
ValueError, and usearch's save RuntimeError("Failed to serialize into stream"), whatever the
disk said."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator

# tantivy's words for an I/O error, and for a writer killed by one in its thread ("io::Error
# most likely", it says: a panic reads the same, and the writer is as dead).
TANTIVY_IO = ("An IO error occurred", "An error occurred in a thread")
# Other tantivy errors carry the OS error inside: "Internal error: 'No space left on device
# (os error 28)'" (a commit's segment updater), "Failed to open file for write: 'IoError {
# … Os { code: 28, kind: StorageFull … }'" (a new segment's file). Matched by the OS error they
# name (io::Error's Display and Debug forms), not by their changing first words.
_OS_ERROR = re.compile(r"\(os error \d+\)|\bOs \{ code: \d+")


def _any(_: str) -> bool:
    return True


@contextlib.contextmanager
def disk_faults(
    raised: type[Exception], is_fault: Callable[[str], bool] = _any, where: str = ""
) -> Iterator[None]:
    """`raised` whose message `is_fault` becomes OSError("`where`message")."""
    try:
        yield
    except raised as exc:
        if not is_fault(str(exc)):
            raise
        raise OSError(f"{where}{exc}") from exc


def _tantivy_fault(message: str) -> bool:
    return message.startswith(TANTIVY_IO) or _OS_ERROR.search(message) is not None


def tantivy_io() -> contextlib.AbstractContextManager[None]:
    return disk_faults(ValueError, _tantivy_fault)
