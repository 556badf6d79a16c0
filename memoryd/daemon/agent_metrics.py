"""Count, latency and errors of the agent layer: MCP tool calls and hooks.

These run in processes of their own (an MCP server per agent session, a hook process per
event), most of them short-lived, so their numbers cannot live in their own memory. Each call
is recorded into one Redis hash next to the queue; the daemon's metrics endpoint exports it
next to the job metrics (memoryd/daemon/metrics.py), and each call logs one line. Importing this
module loads nothing heavy: the MCP server and the hooks must start fast.

    async with agent_metrics.observed(redis, "mcp", "search"):
        ...
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)

Surface = Literal["mcp", "hook"]
SURFACES: tuple[Surface, ...] = ("mcp", "hook")
KEY = "memoryd:agent_calls"
# Upper bounds (seconds) of the latency buckets: a hook must answer in tens of milliseconds,
# an MCP search in a few hundred.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SEP = "\x1f"


@dataclass
class CallStats:
    """One call name of one surface, as recorded so far: counts by outcome, seconds summed,
    and cumulative bucket counts (calls at most that long) in BUCKETS order."""

    surface: str
    name: str
    ok: int = 0
    error: int = 0
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))

    @property
    def count(self) -> int:
        return self.ok + self.error


async def record(
    redis: Any, surface: Surface, name: str, seconds: float, ok: bool, detail: str = ""
) -> None:
    """Record one call (one round trip to Redis) and log it."""
    prefix = f"{surface}{_SEP}{name}{_SEP}"
    pipe = redis.pipeline(transaction=False)
    pipe.hincrby(KEY, prefix + ("ok" if ok else "error"), 1)
    pipe.hincrbyfloat(KEY, prefix + "seconds", seconds)
    for bound in BUCKETS:
        if seconds <= bound:
            pipe.hincrby(KEY, f"{prefix}le{_SEP}{bound}", 1)
    await pipe.execute()
    outcome = "ok" if ok else f"error: {detail}" if detail else "error"
    log.info("%s %s: %s in %.0f ms", surface, name, outcome, seconds * 1000)


@contextlib.asynccontextmanager
async def observed(redis: Any, surface: Surface, name: str) -> AsyncIterator[None]:
    """Time the block and record it; an exception counts as an error and goes on up. A
    failure to record (Redis gone) is logged, never raised: it must not fail the call."""
    started = time.perf_counter()
    try:
        yield
    except Exception as exc:
        await _record_quietly(redis, surface, name, started, False, f"{type(exc).__name__}")
        raise
    await _record_quietly(redis, surface, name, started, True)


async def _record_quietly(
    redis: Any, surface: Surface, name: str, started: float, ok: bool, detail: str = ""
) -> None:
    try:
        await record(redis, surface, name, time.perf_counter() - started, ok, detail)
    except Exception as exc:
        log.warning("cannot record %s %s: %s", surface, name, exc)


async def read(redis: Any) -> list[CallStats]:
    """Everything recorded, by surface and name."""
    stats: dict[tuple[str, str], CallStats] = {}
    for raw_key, raw_value in (await redis.hgetall(KEY)).items():
        key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
        value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
        surface, name, what, *bound = key.split(_SEP)
        entry = stats.setdefault((surface, name), CallStats(surface, name))
        if what in ("ok", "error"):
            setattr(entry, what, int(value))
        elif what == "seconds":
            entry.seconds = float(value)
        elif what == "le" and bound and float(bound[0]) in BUCKETS:
            entry.buckets[BUCKETS.index(float(bound[0]))] = int(value)
    return [stats[k] for k in sorted(stats)]
