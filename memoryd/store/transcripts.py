"""Transcript writes: a parsed stretch of a transcript and its cursor, in one transaction."""

from __future__ import annotations

from typing import Any

from memoryd.store.base import StoreBase, now, path_key, rid, to_records, with_packed_vector
from memoryd.store.blobs import INSERT_BLOBS, split_bodies
from memoryd.store.entities import UPSERT_ENTITIES
from memoryd.store.search import BUMP_GENERATION, returned
from memoryd.vocabulary import TRANSCRIPT_EDGE_TABLES


class TranscriptQueries(StoreBase):
    async def transcript_cursor(self, path: str) -> dict[str, Any] | None:
        found = await self.query(
            "SELECT * FROM $id", {"id": rid("transcript_cursor", path_key(path))}
        )
        return found[0][0] if found[0] else None

    async def skip_transcript_file(self, path: str, inode: int, reason: str) -> None:
        """A transcript's skip record: its cursor with the reason as its note (what `status`
        lists, as it lists a repository's skipped files). A cursor it had keeps its offset:
        the file read again once it is a regular one goes on from there."""
        await self.query(
            "UPSERT $id SET path = $path, note = $note, inode = inode ?? $inode, "
            "offset = offset ?? 0, size = size ?? 0, lines_skipped = lines_skipped ?? 0, "
            "updated_at = time::now()",
            {
                "id": rid("transcript_cursor", path_key(path)),
                "path": path,
                "inode": inode,
                "note": reason,
            },
        )

    async def write_transcript_batch(
        self, batch: dict[str, list[dict[str, Any]]], cursor: dict[str, Any]
    ) -> int | None:
        """One transaction: the records parsed from a stretch of a transcript and the cursor
        that says how far it was read, so a crash can never leave one without the other.
        Returns the search generation after it, when it wrote memories or goals."""
        params: dict[str, Any] = {
            name: to_records([with_packed_vector(row) for row in rows])
            for name, rows in batch.items()
        }
        params["memories"], params["blobs"] = split_bodies(params.get("memories", []))
        cursor_id = rid("transcript_cursor", path_key(cursor["path"]))
        params["cursor"] = {**cursor, "id": cursor_id, "updated_at": now()}
        edges = "\n".join(
            f"INSERT RELATION INTO {table} $edge_{table} ON DUPLICATE KEY UPDATE out = $input.out "
            "RETURN NONE;"
            for table in TRANSCRIPT_EDGE_TABLES
        )
        for table in TRANSCRIPT_EDGE_TABLES:
            params[f"edge_{table}"] = to_records(batch.get(f"edge_{table}", []))
        searchable = bool(batch.get("memories") or batch.get("goals"))
        result = await self.query(
            f"""
            BEGIN;
            FOR $s IN $sessions {{ UPSERT $s.id MERGE $s.data; }};
            {UPSERT_ENTITIES}
            {INSERT_BLOBS}
            INSERT INTO memory $memories ON DUPLICATE KEY UPDATE
                content = $input.content, body = $input.body, kind = $input.kind, seq = $input.seq,
                event_time = $input.event_time, source = $input.source,
                embedding = $input.embedding, embedding_model = $input.embedding_model
                RETURN NONE;
            INSERT INTO goal $goals ON DUPLICATE KEY UPDATE
                intent = $input.intent, embedding = $input.embedding,
                embedding_model = $input.embedding_model RETURN NONE;
            INSERT INTO summary $summaries ON DUPLICATE KEY UPDATE text = $input.text RETURN NONE;
            {edges}
            UPSERT $cursor.id CONTENT $cursor RETURN NONE;
            {BUMP_GENERATION if searchable else "LET $generation = NONE;"}
            RETURN {{ generation: $generation }};
            COMMIT;
            """,
            {
                "sessions": params.get("sessions", []),
                "entities": params.get("entities", []),
                "memories": params.get("memories", []),
                "goals": params.get("goals", []),
                "summaries": params.get("summaries", []),
                **params,
            },
        )
        return returned(result)["generation"]
