"""Agent-written memories (`remember`): a memory in a notes session, MENTIONS edges to the
files it names, one transaction."""

from __future__ import annotations

from typing import Any

from memoryd.store.base import StoreBase, to_record, to_records, with_packed_vector
from memoryd.store.blobs import INSERT_BLOBS, split_body
from memoryd.store.entities import UPSERT_ENTITIES
from memoryd.store.search import BUMP_GENERATION, returned


class NoteQueries(StoreBase):
    async def write_note(
        self,
        session: dict[str, Any],
        memory: dict[str, Any],
        entities: list[dict[str, Any]],
        mentions: list[dict[str, Any]],
    ) -> tuple[int, int]:
        """Upsert the notes session and the memory (the next seq of that session; the same
        note remembered again keeps its seq and is written afresh), its entities and MENTIONS
        edges. Returns the memory's seq and the search generation after it."""
        row, blob = split_body(to_record(with_packed_vector(memory)))
        result = await self.query(
            f"""
            BEGIN;
            UPSERT $notes.id MERGE $notes.data;
            {INSERT_BLOBS}
            LET $seq = (SELECT VALUE seq FROM $memory.id)[0] ?? (((SELECT VALUE seq FROM memory
                WHERE session = $notes.id ORDER BY seq DESC LIMIT 1)[0] ?? -1) + 1);
            UPSERT $memory.id CONTENT $memory;
            UPDATE $memory.id SET seq = $seq;
            {UPSERT_ENTITIES}
            INSERT RELATION INTO mentions $mentions ON DUPLICATE KEY UPDATE out = $input.out
                RETURN NONE;
            {BUMP_GENERATION}
            RETURN {{ generation: $generation, seq: $seq }};
            COMMIT;
            """,
            {
                "notes": to_record(session),
                "memory": row,
                "blobs": [blob] if blob else [],
                "entities": to_records(entities),
                "mentions": to_records(mentions),
            },
        )
        done = returned(result)
        return int(done["seq"]), int(done["generation"])
