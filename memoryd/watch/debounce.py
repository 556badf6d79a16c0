"""Coalesce bursts of file-system events into one flush per group."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from memoryd.watch import Outage

log = logging.getLogger(__name__)

_TICK = 0.05


@dataclass(slots=True)
class Burst:
    keys: set[str] = field(default_factory=set)
    full: bool = False
    first: float = 0.0
    last: float = 0.0


Flush = Callable[[str, Burst], Awaitable[None]]


class Debouncer:
    """A group's burst is flushed once `quiet` seconds pass without events, or `max_wait` after
    its first event (so a long stream of writes still makes progress). A failed flush is kept
    and retried with whatever arrives next: events are never dropped."""

    def __init__(self, quiet: float, max_wait: float, flush: Flush) -> None:
        self.quiet = quiet
        self.max_wait = max_wait
        self._flush = flush
        self._bursts: dict[str, Burst] = {}
        self.outage = Outage(log)

    def note(self, group: str, keys: set[str], full: bool = False) -> None:
        """Record events; call on the event loop (from threads: loop.call_soon_threadsafe)."""
        burst = self._bursts.get(group)
        now = time.monotonic()
        if burst is None:
            burst = self._bursts[group] = Burst(first=now)
        burst.last = now
        burst.keys |= keys
        burst.full |= full

    async def run(self) -> None:
        while True:
            await asyncio.sleep(_TICK)
            now = time.monotonic()
            for group, burst in list(self._bursts.items()):
                if now - burst.last < self.quiet and now - burst.first < self.max_wait:
                    continue
                del self._bursts[group]
                try:
                    await self._flush(group, burst)
                    self.outage.ended()
                except Exception as exc:
                    self.outage.failed(f"flush of {group} failed", exc)
                    self.note(group, burst.keys, burst.full)
