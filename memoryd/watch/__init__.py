"""File watching: the watcher turns file-system events into queued jobs; it never parses."""

import logging
import time

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
)

from memoryd import queue

# The events that say something changed; never a read. Asked of the kernel this way, the
# indexer's own reads of a watched tree (an open and a close per file) raise no events, which
# watchdog's threads would otherwise decode by the thousand during a first index.
CHANGES: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
]


class Outage:
    """A watcher's failed enqueues, said once: while Redis restarts (or refuses writes) every
    round fails the same way, and what failed is kept for the next round. One line when it
    starts, one when an enqueue gets through again; a failure of another kind (a bug) is
    logged with its traceback every time."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._since: float | None = None

    def failed(self, what: str, exc: Exception) -> None:
        if not queue.server_lost(exc):
            self._log.error("%s; retrying", what, exc_info=exc)
        elif self._since is None:
            self._since = time.monotonic()
            self._log.warning("%s (%s); retrying", what, queue.redis_reason(exc))

    def ended(self) -> None:
        if self._since is not None:
            self._log.info("enqueued again after %.1fs", time.monotonic() - self._since)
            self._since = None
