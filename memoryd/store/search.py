"""What the derived search indexes read from the database: the generation of the searchable
records, and the rows themselves (all of them for a rebuild, or some by key after a write)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memoryd.store.base import StoreBase, rid, unpack_vector
from memoryd.store.blobs import BODY, whole_texts

# In a write transaction that changes searchable rows: one more generation, kept in $generation.
BUMP_GENERATION = (
    "LET $generation = (UPSERT search_state:records SET generation = (generation ?? 0) + 1 "
    "RETURN VALUE generation)[0];"
)
# What the indexes hold of each searchable table (record key as `key`, links as plain keys).
SEARCH_FIELDS = {
    "code_chunk": "record::id(project) AS project, path, language, chunk_type, name, "
    "parent_name, start_line, end_line, content",
    "memory": f"record::id(session) AS session, seq, kind, tool, content, {BODY}",
    "goal": "record::id(session) AS session, intent AS content",
}


def returned(result: list[Any]) -> dict[str, Any]:
    """The object a write transaction RETURNs with its generation (whether BEGIN and COMMIT
    get result entries of their own differs between engine versions)."""
    return next(r for r in reversed(result) if isinstance(r, dict) and "generation" in r)


# `id` too: a page is ordered by it.
_COMMON = "id, record::id(id) AS key, embedding, embedding_model"
_VALIDITY = "valid_from, valid_until"


def _fields(table: str) -> str:
    timed = f", {_VALIDITY}" if table != "goal" else ""
    return f"{_COMMON}, {SEARCH_FIELDS[table]}{timed}"


def _unpacked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Vectors as numbers, memories' whole texts."""
    for row in rows:
        row["embedding"] = unpack_vector(row.get("embedding"))
    return whole_texts(rows)


class SearchQueries(StoreBase):
    async def search_generation(self) -> int:
        rows = await self.query("SELECT VALUE generation FROM search_state:records")
        return rows[0][0] if rows[0] else 0

    async def search_rows(self, table: str, after: str, batch: int) -> list[dict[str, Any]]:
        """A page of a table's rows for the search indexes, by key after `after`."""
        rows = await self.query(
            f"SELECT {_fields(table)} FROM {table} WHERE id > $after ORDER BY id LIMIT $batch",
            {"after": rid(table, after), "batch": batch},
        )
        return _unpacked(rows[0] or [])

    async def search_rows_by_key(self, table: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        if not keys:
            return []
        rows = await self.query(
            f"SELECT {_fields(table)} FROM $ids", {"ids": [rid(table, k) for k in keys]}
        )
        return _unpacked(rows[0] or [])

    async def record_search_changes(
        self, generation: int, changes: list[dict[str, Any]], keep: int
    ) -> None:
        """The rows a write changed (`{tb, keys, forget}` per table), under its generation;
        changes `keep` generations older go."""
        await self.query(
            "UPSERT type::record('search_change', $generation) SET changes = $changes; "
            "DELETE search_change WHERE id < type::record('search_change', $oldest);",
            {"generation": generation, "changes": changes, "oldest": generation - keep},
        )

    async def search_changes(self, after: int, upto: int) -> dict[int, list[dict[str, Any]]]:
        """The changes recorded for generations after `after` up to `upto`, by generation."""
        rows = await self.query(
            "SELECT record::id(id) AS generation, changes FROM search_change "
            "WHERE id > type::record('search_change', $after) "
            "AND id <= type::record('search_change', $upto)",
            {"after": after, "upto": upto},
        )
        return {row["generation"]: row["changes"] for row in rows[0] or []}
