"""Counts for `memoryd status` and the whole-graph dump for diagnostics."""

from __future__ import annotations

from typing import Any

from memoryd.store.base import StoreBase, key_of, plain, rid
from memoryd.store.blobs import BODY, whole_texts

# Tables `memoryd status` counts.
COUNTED_TABLES = (
    "project",
    "file_state",
    "code_chunk",
    "session",
    "memory",
    "goal",
    "entity",
    "defined_in",
)


class StatusQueries(StoreBase):
    async def counts(self) -> dict[str, int]:
        sql = "; ".join(f"SELECT count() AS n FROM {t} GROUP ALL" for t in COUNTED_TABLES)
        results = await self.query(sql)
        return {
            table: (rows[0]["n"] if rows else 0)
            for table, rows in zip(COUNTED_TABLES, results, strict=True)
        }

    async def valid_chunk_count(self) -> int:
        rows = (
            await self.query(
                "SELECT count() AS n FROM code_chunk WHERE valid_until IS NONE GROUP ALL"
            )
        )[0]
        return rows[0]["n"] if rows else 0

    async def table_names(self) -> list[str]:
        info = (await self.query("INFO FOR DB"))[0]
        return sorted(info.get("tables") or {})

    async def table_counts(self) -> dict[str, int]:
        """Rows in every table (for the before/after check of a migration step)."""
        tables = await self.table_names()
        if not tables:
            return {}
        results = await self.query(
            "; ".join(f"SELECT count() AS n FROM {t} GROUP ALL" for t in tables)
        )
        return {t: (rows[0]["n"] if rows else 0) for t, rows in zip(tables, results, strict=True)}

    async def rows_after(
        self,
        table: str,
        after: str | None,
        batch: int,
        scope: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """One page of a table in id order, as plain data (record ids as `table:key`): for
        exports, which read a table of any size in bounded pages. `scope`: a condition on
        the rows (with its `params`)."""
        conditions = [c for c in (after is not None and "id > $after", scope) if c]
        where = f"WHERE {' AND '.join(f'({c})' for c in conditions)} " if conditions else ""
        body = f", {BODY}" if table == "memory" else ""  # a memory's whole text, not its head
        rows = (
            await self.query(
                f"SELECT *{body} FROM {table} {where}ORDER BY id LIMIT $batch",
                {
                    **(params or {}),
                    "after": rid(table, after) if after is not None else None,
                    "batch": batch,
                },
            )
        )[0] or []
        rows = whole_texts(rows) if body else rows
        return [{**plain(row, qualified=True), "id": key_of(row["id"])} for row in rows]

    async def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every table: for diagnostics and for tests that check the whole graph."""
        info = (await self.query("INFO FOR DB"))[0]
        tables = sorted(info.get("tables") or {})
        results = await self.query("; ".join(f"SELECT * FROM {t}" for t in tables))
        return dict(zip(tables, (rows or [] for rows in results), strict=True))
