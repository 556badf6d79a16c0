"""Query jobs: run on the process that holds the database, answer the CLI through the queue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd import metrics, views
from memoryd import search as search_module
from memoryd.errors import InvalidRequest, NotFound
from memoryd.ids import split_file_key
from memoryd.store import plain
from workers.context import JobContext
from workers.entities import canonical_file


async def search(
    ctx: JobContext,
    query: str,
    limit: int,
    project: str | None,
    kind: str,
    as_of: str | None = None,
) -> list[dict[str, Any]]:
    results = await search_module.search(
        ctx["store"],
        ctx["embedder"],
        query,
        limit=limit,
        project=project,
        kind=kind,
        as_of=datetime.fromisoformat(as_of) if as_of else None,
    )
    return [r.as_dict() for r in results]


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


async def status(ctx: JobContext) -> dict[str, Any]:
    store = ctx["store"]
    settings, model = ctx["settings"], ctx["embedder"].model

    async def count() -> dict[str, Any]:
        return {
            "counts": await store.counts(),
            "valid_chunks": await store.valid_chunk_count(),
            "transcript_lag": {
                root: {"bytes": behind, "files": files}
                for root, (behind, files) in (
                    await metrics.ingest_lag(store, settings.transcript_roots)
                ).items()
            },
            "database_bytes": await asyncio.to_thread(_tree_size, settings.data_dir / "db")
            if settings.embedded_db
            else None,
            "waiting_for_reembed": await store.count_stale_vectors(model),
        }

    counted = ctx.get("status_counts") or Counted()
    return {
        **await counted.get(count),
        "projects": await project_progress(store),
        "schema_version": await store.schema_version(),
        "maintenance": {task: plain(run) for task, run in (await store.last_maintenance()).items()},
        "model": model,
        "database": store.url,
    }


async def register_project(
    ctx: JobContext,
    project_id: str,
    fields: dict[str, Any],
    run: str | None = None,
    files_total: int = 0,
) -> str:
    """Record a project; `run`: a whole-project sync of `files_total` files starts."""
    await ctx["store"].upsert_project(project_id, fields)
    if run is not None:
        await ctx["store"].start_progress(project_id, run, files_total)
    return project_id


async def index_progress(ctx: JobContext) -> list[dict[str, Any]]:
    """Each project with the progress of its last whole-project sync."""
    return await project_progress(ctx["store"])


async def project_progress(store: Any) -> list[dict[str, Any]]:
    progress = await store.index_progress()
    return [
        {
            "id": p["id"],
            "name": p["name"],
            "root": p["root"],
            "index": plain(progress[p["id"]]) if p["id"] in progress else None,
        }
        for p in await store.projects()
    ]


async def stored_paths(ctx: JobContext, project_id: str) -> list[str]:
    """Paths the index knows for a project, so a sync can retire the ones gone from disk."""
    return await ctx["store"].indexed_paths(project_id)


async def history(ctx: JobContext, path: str) -> dict[str, Any]:
    """A file's history; `path` is absolute (the client resolved it against its own cwd)."""
    store = ctx["store"]
    projects = [(p["id"], p["root"]) for p in await store.projects()]
    entity = canonical_file(path, None, projects)
    if entity is None:
        raise InvalidRequest(f"not a file path: {path!r}")
    rel = split_file_key(entity.key)[1] if entity.project_id else None
    return await views.history(store, entity.kind, entity.key, entity.project_id, rel)


async def session(ctx: JobContext, session_id: str) -> dict[str, Any]:
    return await views.session(ctx["store"], session_id)


async def pin(ctx: JobContext, memory_id: str, pinned: bool) -> dict[str, Any]:
    """Pinned memories keep importance 1 and are never pruned."""
    if not await ctx["store"].set_pinned("memory", memory_id, pinned):
        raise NotFound(f"no memory {memory_id!r}")
    return {"memory": memory_id, "pinned": pinned}


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
