"""Export and import jobs: the client streams an export page by page and an import batch by
batch, so neither side ever holds a whole table.

Both pass every row through the redactor that ingestion uses: a database written by an earlier
memoryd (or a row of an older export) may still hold a secret, and none may leave the daemon
in an export or enter its database from an import."""

from __future__ import annotations

from typing import Any

from memoryd.database.export import DERIVED_FIELDS, cleaned_row
from memoryd.searchindex.search import resolve_project
from memoryd.store.transfer import NOT_EXPORTED
from memoryd.vocabulary import RETIRED_EDGE_TABLES
from workers.context import JobContext
from workers.stages.redact import redact


async def export_tables(ctx: JobContext, project: str | None) -> dict[str, Any]:
    """The tables an export writes, and the project id `project` (an id, name or root) is."""
    store = ctx["store"]
    project_id = await resolve_project(store, project) if project is not None else None
    return {"tables": await store.export_tables(project_id), "project": project_id}


async def export_page(
    ctx: JobContext, table: str, after: str | None, batch: int, project: str | None
) -> list[dict[str, Any]]:
    """One page of rows as an export writes them: redacted, vectors left out (an export has
    none, and the job's result, which the queue keeps a while, need not carry them)."""
    store = ctx["store"]
    if project is None:
        rows = await store.rows_after(table, after, batch)
    else:
        rows = await store.project_rows_after(table, after, batch, project)
    return [
        cleaned_row({k: v for k, v in row.items() if k not in DERIVED_FIELDS}, redact)
        for row in rows
    ]


async def import_rows(ctx: JobContext, table: str, rows: list[dict[str, Any]]) -> int:
    # The migration record of another database; edges an earlier memoryd wrote (vocabulary.py).
    if table in NOT_EXPORTED or table in RETIRED_EDGE_TABLES:
        return 0
    return await ctx["store"].import_rows(table, [cleaned_row(row, redact) for row in rows])
