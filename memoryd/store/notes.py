"""Agent-written memories (`remember`): a memory in a notes session, MENTIONS edges to the
files it names, one transaction; and those edges given the ids of today's recipe (step 033)."""

from __future__ import annotations

from typing import Any

from memoryd.store.base import (
    StoreBase,
    key_of,
    rid,
    to_record,
    to_records,
    with_packed_vector,
)
from memoryd.store.blobs import INSERT_BLOBS, split_body
from memoryd.store.entities import UPSERT_ENTITIES
from memoryd.store.search import BUMP_GENERATION, returned
from memoryd.vocabulary import MENTIONS


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

    async def note_mentions_after(self, after: str | None, batch: int) -> list[dict[str, str]]:
        """A page of notes' MENTIONS edges in id order: each edge's key, its memory's key and
        the kind and key of the entity it names."""
        rows = (
            await self.query(
                "SELECT record::id(id) AS id, record::id(in) AS memory, out.kind AS kind, "
                f"out.key AS key FROM {MENTIONS.table} WHERE tool = 'remember' "
                f"{'AND id > $after ' if after else ''}ORDER BY id LIMIT $batch",
                {"after": rid(MENTIONS.table, after) if after else None, "batch": batch},
            )
        )[0] or []
        return list(rows)

    async def rekey_mentions(self, new_keys: dict[str, str]) -> None:
        """Each MENTIONS edge (old key -> new key) written again, fields and ends the same,
        under its new key, in one transaction: an edge row's id cannot change in place."""
        if not new_keys:
            return
        old = [rid(MENTIONS.table, key) for key in new_keys]
        rows = (await self.query("SELECT * FROM $old", {"old": old}))[0] or []
        moved = [row | {"id": rid(MENTIONS.table, new_keys[key_of(row["id"])])} for row in rows]
        await self.query(
            f"BEGIN; DELETE $old; INSERT RELATION INTO {MENTIONS.table} $new RETURN NONE; COMMIT;",
            {"old": old, "new": moved},
        )
