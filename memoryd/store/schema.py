"""The schema's state in the database: applied migration steps, and vector indexes fitted to
the model's dimension. The sequence itself is memoryd/migrate.py."""

from __future__ import annotations

import importlib.resources
import logging
import re
from pathlib import Path

from memoryd.store.base import StoreBase, rid

log = logging.getLogger(__name__)

SCHEMA_DIR = Path(str(importlib.resources.files("memoryd.schema")))
# Tables holding vectors (each with an HNSW index in schema/001_core.surql), by the field whose
# text is embedded.
VECTOR_TABLES = {"code_chunk": "content", "memory": "content", "goal": "intent"}
_HNSW_DIMENSION = re.compile(r"\bHNSW\s+DIMENSION\s+(\d+)")


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

    async def _vector_indexes(self) -> dict[str, tuple[str, int]]:
        """Per vector table that has one: its HNSW index's name and dimension."""
        tables = [t for t in VECTOR_TABLES if await self._has_table(t)]
        infos = await self.query("; ".join(f"INFO FOR TABLE {t}" for t in tables)) if tables else []
        found: dict[str, tuple[str, int]] = {}
        for table, info in zip(tables, infos, strict=True):
            for name, definition in (info.get("indexes") or {}).items():
                if hnsw := _HNSW_DIMENSION.search(definition):
                    found[table] = (name, int(hnsw[1]))
        return found

    async def vector_dimensions(self) -> dict[str, int]:
        """The dimension each vector table's HNSW index is built for."""
        return {table: dim for table, (_, dim) in (await self._vector_indexes()).items()}

    async def fit_vector_indexes(self, dim: int) -> None:
        """A model of another dimension: an HNSW index takes vectors of one dimension only, so
        drop the vectors of the old one (reembed gives each row a new one; meanwhile BM25 and
        the graph find it), then the index; the schema files define it again for `dim`. In this
        order a start killed half-way is finished by the next: the old index is still there
        to say what to do."""
        for table, (index, old) in (await self._vector_indexes()).items():
            if old == dim:
                continue
            await self.query(
                f"UPDATE {table} SET embedding = NONE WHERE embedding IS NOT NONE RETURN NONE; "
                f"REMOVE INDEX {index} ON {table};"
            )
            log.warning(
                "the model's dimension changed from %d to %d: the %s vectors were dropped and "
                "index %s is rebuilt; reembed embeds them again",
                old,
                dim,
                table,
                index,
            )

    async def _has_table(self, name: str) -> bool:
        info = (await self.query("INFO FOR DB"))[0]
        return name in (info.get("tables") or {})

    async def schema_version(self) -> str | None:
        rows = (await self.query("SELECT file FROM schema_version ORDER BY file DESC LIMIT 1"))[0]
        return rows[0]["file"] if rows else None
