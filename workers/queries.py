"""Query jobs: run on the process that holds the database, answer the CLI through the queue."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd import metrics, views
from memoryd import search as search_module
from memoryd.errors import InvalidRequest, NotFound
from memoryd.ids import split_file_key
from memoryd.results import SearchResult
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
    settings = ctx["settings"]
    narrowed = bool(settings.exclude or settings.include)
    results = await search_module.search(
        ctx["store"],
        ctx["embedder"],
        query,
        limit=limit * 2 if narrowed else limit,  # room for what the config leaves out
        project=project,
        kind=kind,
        as_of=datetime.fromisoformat(as_of) if as_of else None,
    )
    if narrowed:
        results = await _remembered(ctx, results)
    return [r.as_dict() for r in results[:limit]]


async def _remembered(ctx: JobContext, results: list[SearchResult]) -> list[SearchResult]:
    """Hits the config keeps out (`exclude`, `include`) left out: code by its file, memories
    and goals by the folder their session ran in (rows stored before the rule was set)."""
    store, settings = ctx["store"], ctx["settings"]
    roots = {p["id"]: p["root"] for p in await store.projects()}
    sessions = {r.session for r in results if r.session}
    cwd = {plain(row["id"]): row.get("cwd") for row in await store.session_rows(sorted(sessions))}
    return [
        r
        for r in results
        if settings.remembers(
            f"{roots.get(r.project or '', '')}/{r.path}" if r.path else cwd.get(r.session or "")
        )
    ]


async def status(ctx: JobContext) -> dict[str, Any]:
    store = ctx["store"]
    return {
        "counts": await store.counts(),
        "valid_chunks": await store.valid_chunk_count(),
        "projects": [
            {"id": p["id"], "name": p["name"], "root": p["root"]} for p in await store.projects()
        ],
        "schema_version": await store.schema_version(),
        "maintenance": {task: plain(run) for task, run in (await store.last_maintenance()).items()},
        "model": ctx["embedder"].model,
        "transcript_lag": {
            root: {"bytes": behind, "files": files}
            for root, (behind, files) in (
                await metrics.ingest_lag(store, ctx["settings"].transcript_roots)
            ).items()
        },
        "database_bytes": _tree_size(ctx["settings"].data_dir / "db")
        if ctx["settings"].embedded_db
        else None,
        "waiting_for_reembed": await store.count_stale_vectors(ctx["embedder"].model),
        "database": store.url,
    }


async def register_project(ctx: JobContext, project_id: str, fields: dict[str, Any]) -> str:
    if not ctx["settings"].remembers(fields["root"]):
        raise InvalidRequest(f"{fields['root']} is excluded by the config (`exclude`/`include`)")
    await ctx["store"].upsert_project(project_id, fields)
    return project_id


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
