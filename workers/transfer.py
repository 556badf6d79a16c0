"""Export and import jobs: the client streams an export page by page and an import batch by
batch, so neither side ever holds a whole table."""

from __future__ import annotations

from typing import Any

from memoryd.search import resolve_project
from workers.context import JobContext


async def export_tables(ctx: JobContext, project: str | None) -> dict[str, Any]:
    """The tables an export writes, and the project id `project` (an id, name or root) is."""
    store = ctx["store"]
    project_id = await resolve_project(store, project) if project is not None else None
    return {"tables": await store.export_tables(project_id), "project": project_id}


async def export_page(
    ctx: JobContext, table: str, after: str | None, batch: int, project: str | None
) -> list[dict[str, Any]]:
    store = ctx["store"]
    if project is None:
        return await store.rows_after(table, after, batch)
    return await store.project_rows_after(table, after, batch, project)


async def import_rows(ctx: JobContext, table: str, rows: list[dict[str, Any]]) -> int:
    return await ctx["store"].import_rows(table, rows)
