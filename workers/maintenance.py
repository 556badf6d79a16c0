"""Scheduled upkeep: decay importance, prune what is long invalid or forgotten, re-embed.

Each task works in bounded batches (so it never holds the database for long), is safe to stop
at any point (every batch is complete on its own) and takes `now` as a parameter, so tests drive
the clock. One run of a task at a time across all workers: each holds a Redis lock while it runs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from memoryd import jobs
from memoryd.agent import hooks
from memoryd.config import Settings
from memoryd.embedding import embed_off_loop
from memoryd.searchindex.indexsync import IndexSync
from memoryd.store import VECTOR_TABLES, Store
from memoryd.store.maintenance import Decay, PruneRules
from workers.context import JobContext
from workers.ingest import EMBED_CHARS
from workers.locks import held

log = logging.getLogger(__name__)

Task = Callable[..., Awaitable[dict[str, Any]]]


def one_at_a_time(task: Task) -> Task:
    """Run `task` under a lock named after it, so two runs never overlap: a slow run that
    outlasts its schedule, or `memoryd maintenance run` during a scheduled run. `wait=False`
    skips a run that finds the lock taken instead of waiting for it."""
    name = task.__name__

    @functools.wraps(task)
    async def run(ctx: JobContext, *args: Any, wait: bool = True, **kwargs: Any) -> dict[str, Any]:
        async with held(ctx["redis"], name, wait) as holding:
            if not holding:
                log.info("%s: the previous run is still going; this one is skipped", name)
                return {"skipped": f"another {name} run was still going"}
            return await task(ctx, *args, **kwargs)

    return run


def scheduled(task: Task) -> Task:
    """A task as its cron job runs it: skipped while the previous run still goes, rather than
    queued behind it (holding a job slot, with the next scheduled run soon due anyway)."""

    @functools.wraps(task)
    async def run(ctx: JobContext) -> dict[str, Any]:
        return await task(ctx, wait=False)

    return run


def _now(at: str | None) -> datetime:
    return datetime.fromisoformat(at) if at else datetime.now(UTC)


def _decay(settings: Settings) -> Decay:
    return Decay(settings.half_life_days, settings.default_half_life_days, settings.access_boost)


@one_at_a_time
async def decay(ctx: JobContext, at: str | None = None) -> dict[str, Any]:
    store, settings = ctx["store"], ctx["settings"]
    now = _now(at)
    started = datetime.now(UTC)
    after, total, rewritten = "", 0, 0
    while True:
        seen, moved, last = await store.decay_memories(
            now, _decay(settings), after, settings.maintenance_batch
        )
        total, rewritten = total + seen, rewritten + moved
        if last is None or seen < settings.maintenance_batch:
            break
        after = last
    result = {"memories": total, "rewritten": rewritten, "at": now.isoformat()}
    await store.record_maintenance(jobs.DECAY.name, started, result, False, ctx.get("job_id"))
    log.info("decay: importance of %d memories worked out, %d rewritten", total, rewritten)
    return result


# Ids a prune result lists per table (the counts are whole).
_SHOWN_IDS = 50


@one_at_a_time
async def prune(
    ctx: JobContext, at: str | None = None, dry_run: bool = False, max_batches: int = 1000
) -> dict[str, Any]:
    store, settings = ctx["store"], ctx["settings"]
    now = _now(at)
    started = datetime.now(UTC)
    rules = PruneRules(
        now,
        settings.retention_days,
        settings.importance_floor,
        settings.prune_idle_days,
        _decay(settings),
    )
    if dry_run:
        # Counted whole, not batch by batch: nothing is deleted between batches to move on.
        preview = await store.prune_preview(rules, _SHOWN_IDS)
        counts = {table: n for table, (n, _) in preview.items()}
        shown = {table: keys for table, (_, keys) in preview.items()}
    else:
        deleted = await _prune_batches(
            store, ctx["search"], rules, settings.maintenance_batch, max_batches
        )
        counts = {table: len(keys) for table, keys in deleted.items()}
        shown = {table: keys[:_SHOWN_IDS] for table, keys in deleted.items()}
    records = hooks.expire_states(settings, now.timestamp(), dry_run)
    result = {
        "dry_run": dry_run,
        "at": now.isoformat(),
        "deleted": counts,
        "ids": shown,
        "hook_records": records,
    }
    await store.record_maintenance(jobs.PRUNE.name, started, result, dry_run, ctx.get("job_id"))
    log.info("prune%s: %s", " (dry run)" if dry_run else "", counts)
    return result


async def _prune_batches(
    store: Store,
    search: IndexSync,
    rules: PruneRules,
    batch: int,
    max_batches: int,
) -> dict[str, list[str]]:
    """Delete in batches that commit on their own (records and search indexes), then the
    entities left with no edge."""
    deleted: dict[str, list[str]] = {"code_chunk": [], "memory": [], "entity": []}
    for _ in range(max_batches):
        found = await store.prune_candidates(rules, batch)
        if not any(found.values()):
            break
        for table, keys in found.items():
            await search.delete_rows(table, keys)
            deleted[table].extend(keys)
    for _ in range(max_batches):
        orphans = await store.orphan_entities(batch)
        if not orphans:
            break
        await store.delete_rows("entity", orphans)
        deleted["entity"].extend(orphans)
    return deleted


@one_at_a_time
async def reembed(ctx: JobContext, batches: int = 5) -> dict[str, Any]:
    """Move vectors of another model to the configured one, a bounded number of batches per
    run. Each batch commits on its own, so a killed run resumes where it stopped."""
    store, embedder, settings = ctx["store"], ctx["embedder"], ctx["settings"]
    started = datetime.now(UTC)
    done: dict[str, int] = {}
    for table, text_field in VECTOR_TABLES.items():
        done[table] = 0
        for _ in range(batches):
            rows = await store.stale_vectors(
                table, text_field, embedder.model, settings.maintenance_batch
            )
            if not rows:
                break
            vectors = await embed_off_loop(
                embedder, [(row["text"] or "")[:EMBED_CHARS] for row in rows]
            )
            # Per batch, as embed_chunks says per part: a killed run's work is counted too.
            log.info("reembed: %d %s texts embedded", len(rows), table)
            await ctx["search"].set_vectors(
                table,
                {row["key"]: v for row, v in zip(rows, vectors, strict=True)},
                embedder.model,
            )
            done[table] += len(rows)
    remaining = await store.count_stale_vectors(embedder.model)
    result = {"model": embedder.model, "reembedded": done, "remaining": remaining}
    await store.record_maintenance(jobs.REEMBED.name, started, result, False, ctx.get("job_id"))
    log.info("reembed: %s, remaining %s", done, remaining)
    return result


async def reindex(ctx: JobContext) -> dict[str, Any]:
    """Rebuild the search indexes from the records."""
    rows = await ctx["search"].rebuild()
    return {"rows": rows, "generation": ctx["search"].index.generation}
