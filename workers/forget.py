"""Forgetting: `forget(ids)` and the one deletion path under it.

Everything memoryd removes on request goes through :func:`forget_rows` with a set of row
references: the database rows (and their edges, derived goals, orphaned entities) and then the
derived search indexes, under the index writer's lock. Forgetting whole sessions, projects or
paths (the privacy work) resolves them to row references and calls the same function; both
then call :func:`erase_traces` for the copies outside the tables (the queue, the backups).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from arq import ArqRedis
from arq.constants import result_key_prefix
from redis.exceptions import ResponseError

from memoryd import agent_shared as agent
from memoryd import queue
from memoryd.database.export import BACKUPS, drop_from_backups
from memoryd.errors import InvalidRequest, NotFound
from memoryd.jobs import JOBS_QUEUE, QUERY_QUEUE
from memoryd.store import Ref
from workers.context import JobContext

# What an agent may forget: the memories and goals memoryd recorded. Code chunks mirror the
# working tree and come back at the next index; delete the file instead.
FORGETTABLE = ("memory", "goal")
# How long a forget waits for Redis to rewrite its append-only file, and how often it looks.
REWRITE_SECONDS = 60
REWRITE_POLL = 0.05

log = logging.getLogger(__name__)


async def forget(ctx: JobContext, ids: list[str]) -> dict[str, Any]:
    started = datetime.now(UTC)
    if not ids:
        raise InvalidRequest("no ids given")
    refs: list[Ref] = []
    for given in ids:
        table, key = agent.parse_id(given)
        if table is not None and table not in FORGETTABLE:
            raise InvalidRequest(
                f"{given!r}: only memories and goals can be forgotten (code follows the files)"
            )
        refs.extend(Ref(t, key) for t in ([table] if table else FORGETTABLE))
    gone = await forget_rows(ctx, refs)
    if not any(ref.table in FORGETTABLE for ref in gone):
        raise NotFound(f"no memory or goal {', '.join(repr(i) for i in ids)}")
    await erase_traces(ctx, gone, started)
    return {"ids": ids, "removed": per_table(gone)}


async def forget_rows(ctx: JobContext, refs: Sequence[Ref]) -> list[Ref]:
    """THE deletion path (see the module's docstring): the rows leave the database and the
    derived search indexes together (memoryd.searchindex.indexsync). Returns the rows removed."""
    gone = await ctx["search"].forget(refs)
    await ctx["store"].remember_forgotten_rows(r for r in gone if r.table in FORGETTABLE)
    return gone


def per_table(refs: Iterable[Ref]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for ref in refs:
        counts[ref.table] = counts.get(ref.table, 0) + 1
    return counts


async def erase_traces(ctx: JobContext, gone: Sequence[Ref], started: datetime) -> None:
    """Copies of the forgotten rows' text outside the database's tables, removed once a
    forget has deleted them (`started`: when it began):
    - the results the queue keeps of finished jobs (a remember's text, a search's snippets,
      an export's pages). Those finished before this forget go (but the scheduled upkeep's,
      which hold counts); a client that had not yet read one gets an error, never an answer
      built from what is now forgotten;
    - the private Redis's append-only file, which logs every write ever made: rewritten from
      what Redis holds now (waited for, within REWRITE_SECONDS);
    - the backups taken before migrations, written again without the rows and their edges.
    The database's own files are the engine's: see `memoryd compact`."""
    redis, settings = ctx["redis"], ctx["settings"]
    finished = [
        r.job_id
        for r in await queue.job_results(redis)
        # Only memoryd's queues: an external Redis may serve other arq applications too. A
        # scheduled run's result (counts, no text) is what stops a second run of its slot.
        if r.queue_name in (JOBS_QUEUE, QUERY_QUEUE)
        and r.finish_time < started
        and not r.function.startswith("cron:")
    ]
    if finished:
        await redis.delete(*(result_key_prefix + job for job in finished))
    if settings.embedded_redis:
        await _rewrite_append_only_file(redis)
    keys = {f"{ref.table}:{ref.key}" for ref in gone}

    def doomed(table: str, row: dict[str, Any]) -> bool:
        return f"{table}:{row['id']}" in keys or row.get("in") in keys or row.get("out") in keys

    dropped = await asyncio.to_thread(drop_from_backups, settings.data_dir / BACKUPS, doomed)
    if dropped:
        log.info("forget: %d rows dropped from the migration backups", dropped)


async def _rewrite_append_only_file(redis: ArqRedis) -> None:
    """Redis writes its append-only file again from what it holds now. A rewrite already
    running started from a copy taken before the deletions: it is waited for, then another
    asked for."""
    deadline = time.monotonic() + REWRITE_SECONDS

    async def idle() -> bool:
        while time.monotonic() < deadline:
            info = await redis.info("persistence")
            if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                return True
            await asyncio.sleep(REWRITE_POLL)
        return False

    while await idle():
        try:
            await redis.bgrewriteaof()
        except ResponseError:  # one started meanwhile (Redis's own, by the file's growth)
            continue
        if await idle():
            return
    log.warning("the queue's append-only file was not rewritten in %ds", REWRITE_SECONDS)
