"""Reading rows by the group they were written in, and patching them in place: what a data
migration step that rewrites stored text needs (memoryd/database/migrate.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memoryd.store.base import StoreBase, key_of, plain, rid


class RewriteQueries(StoreBase):
    async def session_keys(self) -> list[str]:
        rows = (await self.query("SELECT VALUE record::id(id) FROM session ORDER BY id"))[0]
        return list(rows or [])

    async def session_memories_plain(self, session_key: str) -> list[dict[str, Any]]:
        """A session's memories in file order, as plain data (the id as its key)."""
        rows = (
            await self.query(
                "SELECT * OMIT embedding FROM memory WHERE session = $s ORDER BY seq",
                {"s": rid("session", session_key)},
            )
        )[0] or []
        return [{**plain(row), "id": key_of(row["id"])} for row in rows]

    async def chunk_files(self) -> list[tuple[str, str]]:
        """Every (project key, path) that has code chunks, valid or retired."""
        rows = (
            await self.query(
                "SELECT record::id(project) AS project, path FROM code_chunk GROUP BY project, path"
            )
        )[0] or []
        return [(row["project"], row["path"]) for row in rows]

    async def file_chunks_plain(self, project_key: str, path: str) -> list[dict[str, Any]]:
        rows = (
            await self.query(
                "SELECT * OMIT embedding FROM code_chunk WHERE project = $p AND path = $path "
                "ORDER BY start_line",
                {"p": rid("project", project_key), "path": path},
            )
        )[0] or []
        return [{**plain(row), "id": key_of(row["id"])} for row in rows]

    async def patch_rows(self, table: str, patches: Iterable[dict[str, Any]]) -> int:
        """Merge each patch (its `id` a key of `table`) into its row, in one transaction."""
        rows = [
            {"id": rid(table, str(p["id"])), "patch": {k: v for k, v in p.items() if k != "id"}}
            for p in patches
        ]
        if rows:
            await self.query(
                "BEGIN; FOR $r IN $rows { UPDATE $r.id MERGE $r.patch; }; COMMIT;", {"rows": rows}
            )
        return len(rows)

    async def forget_file_states(self, files: Iterable[tuple[str, str]]) -> None:
        """The next look at these files reads and cuts them again (as if never indexed)."""
        pairs = [{"p": rid("project", p), "path": path} for p, path in files]
        if pairs:
            await self.query(
                "FOR $f IN $files { UPDATE file_state SET hash = NONE, mtime_ns = 0 "
                "WHERE project = $f.p AND path = $f.path; };",
                {"files": pairs},
            )
