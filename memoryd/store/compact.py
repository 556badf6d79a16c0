"""Rewriting stored rows smaller (migration steps 010, 013 and 025, memoryd/database/migrate.py):
vectors from arrays of floats to packed half floats, and a copy of the whole database (less
tables no longer used) into fresh files.

The embedded engine never rewrites its value log, so the bytes of a row rewritten in place stay
on disk. Only a copy into new files gives them back: `copy_into` writes every definition and
every row into another database, which then replaces this one's files at a reopen
(memoryd/store/connection.py)."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from memoryd.store.base import StoreBase, pack_vector, rid
from memoryd.store.connection import files_of

# Definitions of a table, in the order they can be made in: a field before its sub-fields.
_TABLE_PARTS = ("fields", "indexes", "events")
_DEFINE = re.compile(r"^DEFINE (\w+) ")


class CompactQueries(StoreBase):
    @property
    def files(self) -> Path | None:
        """The database's directory when it is embedded and file-backed."""
        return files_of(self.url)

    @property
    def login(self) -> tuple[str, str, str | None, str | None]:
        return self._db.login

    async def declare_packed_vectors(self, tables: list[str]) -> None:
        """Vectors are packed bytes from now on (rows still holding arrays keep them until
        `pack_vectors_after` rewrites them)."""
        present = set(await self.table_names())
        # The array's implicit `embedding.*` (its items' type) goes too.
        statements = [
            f"DEFINE FIELD OVERWRITE embedding ON {t} TYPE option<bytes>; "
            f"REMOVE FIELD IF EXISTS embedding.* ON {t};"
            for t in tables
            if t in present
        ]
        if statements:
            await self.query("\n".join(statements))

    async def pack_vectors_after(self, table: str, after: str | None, batch: int) -> str | None:
        """Pack the array vectors of one page of `table` (in key order after `after`);
        returns the page's last key, None when the table is done."""
        rows = (
            await self.query(
                f"SELECT id, record::id(id) AS key, embedding FROM {table} "
                f"{'WHERE id > $after ' if after is not None else ''}ORDER BY id LIMIT $batch",
                {"after": rid(table, after) if after is not None else None, "batch": batch},
            )
        )[0] or []
        arrays = [
            {"id": row["id"], "embedding": pack_vector(row["embedding"])}
            for row in rows
            if isinstance(row.get("embedding"), list)
        ]
        if arrays:
            await self.query(
                "BEGIN; FOR $r IN $rows { UPDATE $r.id SET embedding = $r.embedding; }; COMMIT;",
                {"rows": arrays},
            )
        return str(rows[-1]["key"]) if rows else None

    async def definitions(self, leave_out: Collection[str] = ()) -> list[str]:
        """The statements that define this database's analyzers, tables (but `leave_out`),
        fields, indexes and events, as the engine reports them."""
        info = (await self.query("INFO FOR DB"))[0] or {}
        statements = list((info.get("analyzers") or {}).values())
        for table, define in sorted((info.get("tables") or {}).items()):
            if table in leave_out:
                continue
            statements.append(define)
            parts = (await self.query(f"INFO FOR TABLE {table}"))[0] or {}
            for part in _TABLE_PARTS:
                statements += [d for _, d in sorted((parts.get(part) or {}).items())]
        return statements

    async def copy_into(
        self, other: CompactQueries, batch: int, leave_out: Collection[str] = ()
    ) -> dict[str, int]:
        """Every definition and every row of this database (but the tables in `leave_out`)
        written into `other` (empty), a page per transaction; returns the rows copied per
        table."""
        # OVERWRITE: a relation table defines its `in` and `out` fields itself.
        defines = [
            _DEFINE.sub(r"DEFINE \1 OVERWRITE ", d, count=1)
            for d in await self.definitions(leave_out)
        ]
        await other.query("\n".join(f"{d};" for d in defines))
        info = (await self.query("INFO FOR DB"))[0] or {}
        copied: dict[str, int] = {}
        for table, define in sorted((info.get("tables") or {}).items()):
            if table in leave_out:
                continue
            insert = "INSERT RELATION INTO" if "TYPE RELATION" in define else "INSERT INTO"
            copied[table] = 0
            after: Any = None
            while rows := await self.stored_rows_after(table, after, batch):
                await other.query(f"{insert} {table} $rows RETURN NONE", {"rows": rows})
                copied[table] += len(rows)
                after = rows[-1]["id"]
        return copied

    async def stored_rows_after(self, table: str, after: Any, batch: int) -> list[dict[str, Any]]:
        """A page of rows exactly as stored (engine types, a memory's head and blob id), in id
        order after the record id `after`."""
        rows = await self.query(
            f"SELECT * FROM {table} "
            f"{'WHERE id > $after ' if after is not None else ''}ORDER BY id LIMIT $batch",
            {"after": after, "batch": batch},
        )
        return rows[0] or []
