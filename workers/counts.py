"""The status counts a job context keeps between calls (workers/queries.py's `status`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


class Counted:
    """The slow part of `status`: rows per table, rows waiting for a vector, transcript lag,
    database size. SurrealDB keeps no row counts, so each is a scan (at 100k rows, seconds with
    a WHERE on 2 cores). A small database is counted at every call; once a count took longer
    than FRESH_BELOW, `status` answers from the last one and counts again in the background
    when it is older than `max_age`, saying how old it is."""

    FRESH_BELOW = 0.05

    def __init__(self, max_age: float = 10.0) -> None:
        self.max_age = max_age
        self.values: dict[str, Any] | None = None
        self.at = 0.0
        self.cost = 0.0
        self._refresh: asyncio.Task[None] | None = None

    async def get(self, count: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        if self._refresh is not None and not self._refresh.done() and self.values is None:
            await self._refresh
        elif self.values is None or self.cost < self.FRESH_BELOW:
            await self._count(count)
        elif time.monotonic() - self.at > self.max_age and (
            self._refresh is None or self._refresh.done()
        ):
            self._refresh = asyncio.create_task(self._count(count))
        assert self.values is not None
        return {**self.values, "counted_seconds_ago": round(time.monotonic() - self.at, 1)}

    async def _count(self, count: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        started = time.monotonic()
        self.values = await count()
        self.at = time.monotonic()
        self.cost = self.at - started
