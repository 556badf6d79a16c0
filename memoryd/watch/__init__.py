"""File watching: the watcher turns file-system events into queued jobs; it never parses."""

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
