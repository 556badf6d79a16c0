"""Long memory texts stored compressed, and once however often they come: a tool's output
read again, the same file read in another session.

A memory whose text has `BODY_CHARS` or more keeps its first `HEAD_CHARS` in `content` (what a
replay shows, what SurrealQL sees) and names a `blob` holding the whole text, zstd-compressed,
under the hash of the text. Every read of a memory's text goes through `with_bodies`, so
callers see the whole text as before. A blob goes when the last memory naming it goes
(`DROP_ORPHAN_BODIES`)."""

from __future__ import annotations

import hashlib
from typing import Any

import zstandard

from memoryd.store.base import StoreBase, rid

BODY_CHARS = 1024
HEAD_CHARS = 400
# Not part of an export: the memories it holds the texts of are exported whole.
BLOB_TABLE = "blob"
_LEVEL = 3

# What a read of memories selects besides `content`, for `whole_texts`.
BODY = "body.data AS body_data"
# In a write of memories: the blobs ($blobs) they name; one written before stays as it was.
INSERT_BLOBS = "INSERT IGNORE INTO blob $blobs RETURN NONE;"
# In a transaction that deletes $doomed (record ids): before it, the blobs they name...
BODIES_OF_DOOMED = (
    "LET $bodies = array::distinct((SELECT VALUE body FROM $doomed WHERE body IS NOT NONE));"
)
# ...and after it, those that no memory names any more.
DROP_ORPHAN_BODIES = (
    "FOR $b IN $bodies { IF !(SELECT VALUE id FROM memory WHERE body = $b LIMIT 1) "
    "{ DELETE $b; }; };"
)


def body_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def split_body(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A memory row to write, with a long text cut to its head, and the blob of the whole
    (None for a short text)."""
    text = row.get("content")
    if not isinstance(text, str) or len(text) < BODY_CHARS:
        return {**row, "body": None}, None
    blob = rid(BLOB_TABLE, body_key(text))
    data = zstandard.ZstdCompressor(level=_LEVEL).compress(text.encode())
    return {**row, "content": text[:HEAD_CHARS], "body": blob}, {"id": blob, "data": data}


def split_bodies(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Memory rows to write and the distinct blobs they name."""
    kept, blobs = [], {}
    for row in rows:
        done, blob = split_body(row)
        kept.append(done)
        if blob is not None:
            blobs[blob["id"]] = blob
    return kept, list(blobs.values())


def whole_texts(rows: list[dict[str, Any]], field: str = "content") -> list[dict[str, Any]]:
    """Memory rows read with `BODY` (and maybe `body`) with their whole text in `field`."""
    for row in rows:
        row.pop("body", None)
        data = row.pop("body_data", None)
        if data is not None:
            row[field] = zstandard.ZstdDecompressor().decompress(data).decode()
    return rows


class BlobQueries(StoreBase):
    async def store_bodies_after(self, after: str | None, batch: int) -> str | None:
        """Cut the long texts of one page of memories (in key order after `after`) to their
        head and a blob; returns the page's last key, None when every memory is done. A
        memory that names a blob already is left as it is."""
        rows = (
            await self.query(
                "SELECT id, record::id(id) AS key, content FROM memory WHERE body IS NONE "
                f"{'AND id > $after ' if after is not None else ''}ORDER BY id LIMIT $batch",
                {"after": rid("memory", after) if after is not None else None, "batch": batch},
            )
        )[0] or []
        long = [row for row in rows if len(row["content"]) >= BODY_CHARS]
        kept, blobs = split_bodies([{"id": r["id"], "content": r["content"]} for r in long])
        if kept:
            await self.query(
                f"BEGIN; {INSERT_BLOBS} FOR $r IN $rows {{ UPDATE $r.id SET content = "
                "$r.content, body = $r.body; }; COMMIT;",
                {"rows": kept, "blobs": blobs},
            )
        return str(rows[-1]["key"]) if rows else None
