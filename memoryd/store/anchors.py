"""Anchors of memories in the code (memoryd/anchors.py): the chunks the indexer keeps for a
file or a symbol, now and at a past time, and the anchors stored on memories."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memoryd.ids import entity_id, split_file_key
from memoryd.store.base import StoreBase, key_of, rid
from memoryd.store.code import BY_PATH
from memoryd.vocabulary import AGENT_MEMORY_KINDS, FILE, MENTIONS, MODIFIES, READS, SYMBOL

_CHUNK_FIELDS = "content, content_hash, file_hash, start_line, valid_from, valid_until"
_ANCHORED_TABLES = (MODIFIES.table, READS.table)


class AnchorQueries(StoreBase):
    async def anchor_chunks(
        self, targets: Sequence[tuple[str, str, datetime | None]]
    ) -> list[list[dict[str, Any]]]:
        """For each (entity kind, entity key, time): the chunks of that file or symbol valid at
        the time or since (None: now only), in line order; for a symbol, then the file's valid
        chunk count as one row `{file_chunks: n}` (is the file still there?). Every version
        since, not only then and now: an edit's anchor is the first version after it."""
        if not targets:
            return []
        statements, params = [], {}
        for i, (kind, key, at) in enumerate(targets):
            when = f"valid_until IS NONE OR valid_until > $at{i}"
            params[f"at{i}"] = at
            if kind == SYMBOL:
                file = key.partition("#")[0]
                project, path = split_file_key(file)
                params |= {f"e{i}": rid("entity", entity_id(SYMBOL, key))}
                params |= {f"p{i}": rid("project", project), f"path{i}": path}
                statements.append(
                    f"SELECT {_CHUNK_FIELDS} FROM array::distinct($e{i}<-defined_in<-code_chunk) "
                    f"WHERE {when} ORDER BY start_line"
                )
                statements.append(
                    f"SELECT count() AS file_chunks FROM code_chunk {BY_PATH} WHERE project = "
                    f"$p{i} AND path = $path{i} AND valid_until IS NONE GROUP ALL"
                )
            else:
                project, path = split_file_key(key)
                params |= {f"p{i}": rid("project", project), f"path{i}": path}
                statements.append(
                    f"SELECT {_CHUNK_FIELDS} FROM code_chunk {BY_PATH} WHERE project = $p{i} "
                    f"AND path = $path{i} AND ({when}) ORDER BY start_line"
                )
        results = iter(await self.query("; ".join(statements), params))
        out = []
        for kind, _, _ in targets:
            rows = next(results) or []
            if kind == SYMBOL:
                rows = [*rows, (next(results) or [{"file_chunks": 0}])[0]]
            out.append(rows)
        return out

    async def memory_anchors(self, keys: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The anchors stored on these memories (those with none left out)."""
        if not keys:
            return {}
        rows = await self.query(
            "SELECT id, anchors FROM $ids WHERE anchors",
            {"ids": [rid("memory", k) for k in keys]},
        )
        return {key_of(row["id"]): row["anchors"] for row in rows[0] or []}

    async def unanchored_notes_after(self, after: str | None, batch: int) -> list[dict[str, Any]]:
        """A page of agent-written memories with no anchors yet, by key after `after`, each
        with the files and symbols its MENTIONS edges name (migration step 028)."""
        where = "AND id > $after " if after is not None else ""
        rows = await self.query(
            f"SELECT id, event_time, ->{MENTIONS.table}->entity[WHERE kind INSIDE $kinds]"
            ".{kind, key} AS named FROM memory WHERE kind INSIDE $notes AND anchors IS NONE "
            f"{where}ORDER BY id LIMIT $batch",
            {
                "after": rid("memory", after) if after is not None else None,
                "batch": batch,
                "kinds": [FILE, SYMBOL],
                "notes": list(AGENT_MEMORY_KINDS),
            },
        )
        return rows[0] or []

    async def anchored_notes_after(self, after: str | None, batch: int) -> list[dict[str, Any]]:
        """A page of agent-written memories that anchor at least one file, by key after
        `after`, with their anchors (migration step 032)."""
        where = "AND id > $after " if after is not None else ""
        rows = await self.query(
            "SELECT id, anchors FROM memory WHERE kind INSIDE $notes "
            f"AND anchors[WHERE kind = $file] {where}ORDER BY id LIMIT $batch",
            {
                "after": rid("memory", after) if after is not None else None,
                "batch": batch,
                "file": FILE,
                "notes": list(AGENT_MEMORY_KINDS),
            },
        )
        return rows[0] or []

    async def set_anchors(self, anchors: dict[str, list[dict[str, Any]]]) -> None:
        """Store anchors on memories (an empty list: looked at, nothing in the code)."""
        if anchors:
            await self.query(
                "FOR $m IN $rows { UPDATE $m.id SET anchors = $m.anchors RETURN NONE; };",
                {"rows": [{"id": rid("memory", k), "anchors": a} for k, a in anchors.items()]},
            )

    async def unanchored_actions(
        self, session_keys: Sequence[str], read_keys: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Successful reads and edits of files of a project, at a known time, with no
        `code_hash` yet (memoryd/anchors.py:anchor_actions): these sessions' edits (by the
        session each edge carries, schema 024 indexes it), and their reads, or (`read_keys`)
        only these READS edges: a read's version is known when it is stored or never, while an
        edit's comes with the indexer's next write, so only edits are looked for again."""
        where = (
            "outcome = 'ok' AND code_hash IS NONE AND event_time IS NOT NONE "
            "AND out.kind = $file AND out.project IS NOT NONE"
        )
        fields = "id, string::uppercase(meta::tb(id)) AS verb, out.key AS target, event_time"
        tables = (MODIFIES.table,) if read_keys is not None else _ANCHORED_TABLES
        statements = [
            f"SELECT {fields} FROM {table} WHERE session = $s{i} AND {where}"
            for i in range(len(session_keys))
            for table in tables
        ]
        if read_keys:
            statements.append(f"SELECT {fields} FROM $reads WHERE {where}")
        if not statements:
            return []
        rows = await self.query(
            "; ".join(statements),
            {
                "file": FILE,
                "reads": [rid(READS.table, k) for k in read_keys or []],
                **{f"s{i}": rid("session", s) for i, s in enumerate(session_keys)},
            },
        )
        return [row for result in rows for row in result or []]

    async def set_code_hashes(self, rows: Sequence[dict[str, Any]]) -> None:
        """Store each action edge's `code_hash` (`{id, hash}` rows, the id a record id)."""
        if rows:
            await self.query(
                "FOR $r IN $rows { UPDATE $r.id SET code_hash = $r.hash RETURN NONE; };",
                {"rows": list(rows)},
            )
