"""The schema's state in the database: applied migration steps, and vector indexes fitted to
the model's dimension. The sequence itself is memoryd/database/migrate.py."""

from __future__ import annotations

import importlib.resources
import logging
from pathlib import Path

from memoryd.store.base import StoreBase, rid
from memoryd.vocabulary import SEARCHED_TABLES

log = logging.getLogger(__name__)

SCHEMA_DIR = Path(str(importlib.resources.files("memoryd.schema")))
# Tables holding vectors, by the field whose text is embedded.
VECTOR_TABLES = SEARCHED_TABLES


class SchemaQueries(StoreBase):
    async def applied_steps(self) -> dict[str, str]:
        """Migration steps recorded as done: step name (file stem) -> checksum."""
        if not await self._has_table("schema_version"):
            return {}
        rows = (await self.query("SELECT record::id(id) AS step, checksum FROM schema_version"))[0]
        return {row["step"]: row["checksum"] for row in rows or []}

    async def apply_schema_text(self, text: str) -> None:
        await self.query(text)

    async def record_step(
        self,
        step: str,
        label: str,
        checksum: str,
        counts: dict[str, dict[str, int]] | None = None,
    ) -> None:
        await self.query(
            "UPSERT $id CONTENT {file: $label, checksum: $sum, applied_at: time::now(), "
            "counts: $counts}",
            {"id": rid("schema_version", step), "label": label, "sum": checksum, "counts": counts},
        )

    async def drop_indexes(self, indexes: dict[str, tuple[str, ...]]) -> None:
        """Remove these indexes (per table) where they exist."""
        statements = [
            f"REMOVE INDEX IF EXISTS {name} ON {table};"
            for table, names in indexes.items()
            if await self._has_table(table)
            for name in names
        ]
        if statements:
            await self.query("\n".join(statements))

    async def _has_table(self, name: str) -> bool:
        info = (await self.query("INFO FOR DB"))[0]
        return name in (info.get("tables") or {})

    async def schema_version(self) -> str | None:
        rows = (await self.query("SELECT file FROM schema_version ORDER BY file DESC LIMIT 1"))[0]
        return rows[0]["file"] if rows else None
