"""Named Redis locks that keep work from overlapping across jobs and worker processes: one run
of a maintenance task at a time, one embedding of owed chunks at a time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from arq import ArqRedis
from redis.asyncio.lock import Lock
from redis.exceptions import RedisError

from memoryd.queue import MAINTENANCE_LOCK_PREFIX

log = logging.getLogger(__name__)

# A lock lapses this long after its worker stops renewing it (killed, frozen): short, so the
# next holder is not locked out for long, and renewed every third of it while the work goes on.
# A daemon's start frees the locks a dead worker left at once (queue.release_orphaned_jobs).
LOCK_SECONDS = 60.0


async def _keep(lock: Lock, name: str) -> None:
    while True:
        await asyncio.sleep(LOCK_SECONDS / 3)
        try:
            await lock.reacquire()
        except (RedisError, OSError) as exc:
            # Redis gone too (its loss is said where serving ends): an error left in this
            # task, which nobody awaits, was a "Task exception was never retrieved" traceback.
            log.warning("%s: lost its lock (%s); another run may start", name, exc)
            return


@contextlib.asynccontextmanager
async def held(redis: ArqRedis, name: str, wait: bool = True) -> AsyncIterator[bool]:
    """Hold the lock `name` for the block; yields False (and holds nothing) when `wait` is
    False and another holder has it."""
    lock = redis.lock(MAINTENANCE_LOCK_PREFIX + name, timeout=LOCK_SECONDS)
    if not await lock.acquire(blocking=wait):
        yield False
        return
    keeper = asyncio.create_task(_keep(lock, name))
    try:
        yield True
    finally:
        keeper.cancel()
        # A lock not released (lost, or Redis gone) lapses by itself.
        with contextlib.suppress(RedisError, OSError):
            await lock.release()
