"""Keep the derived search indexes in step with the records: every write that changes a
searchable row goes through here, to the database first and then to the indexes, in one job.

No transaction spans the two. Each database write bumps the search generation in its own
transaction and the indexes are committed with it; writes are serialised by one lock, so the
index's generation is the database's exactly when every write reached both. At start, a
missing index or a different generation (a crash between the two writes, a restored database)
means a rebuild from the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd.searchindex import Doc, SearchIndex, chunk_kind, micros
from memoryd.store import Ref, Store
from memoryd.store.code import FileIndexWrite

log = logging.getLogger(__name__)

SEARCH_DIR = "search"
# Characters of a memory or goal kept with its hit, to show it.
SNIPPET_CHARS = 160
# Rows read from the database per page of a rebuild.
REBUILD_BATCH = 2000
SEARCHED_TABLES = ("code_chunk", "memory", "goal")
# Rows a forget deletes per database transaction (each commits on its own).
FORGET_BATCH = 1000


def _micros(value: datetime | None) -> int | None:
    return None if value is None else micros(value)


def doc_of(table: str, row: dict[str, Any], model: str) -> Doc:
    """A database row (as `Store.search_rows` reads it) as the index takes it. Its vector goes
    along only when it is of the configured `model`."""
    vector = row.get("embedding") if row.get("embedding_model") == model else None
    content = row.get("content") or ""
    if table == "code_chunk":
        return Doc(
            table=table,
            id=row["key"],
            kind=chunk_kind(row["path"], row.get("language")),
            content=content,
            project=row.get("project"),
            path=row["path"],
            language=row.get("language"),
            name=row.get("name"),
            parent_name=row.get("parent_name"),
            valid_from=micros(row["valid_from"]),
            valid_until=_micros(row.get("valid_until")),
            vector=vector,
            fields={
                "start_line": row["start_line"],
                "end_line": row["end_line"],
                "chunk_type": row.get("chunk_type"),
            },
        )
    snippet = " ".join(content.split())[:SNIPPET_CHARS]
    fields: dict[str, Any] = {"session": row.get("session"), "snippet": snippet}
    if table == "memory":
        fields |= {"seq": row.get("seq"), "kind": row.get("kind"), "tool": row.get("tool")}
    return Doc(
        table=table,
        id=row["key"],
        kind=table,
        content=content,
        name=row.get("tool"),
        valid_from=_micros(row.get("valid_from")) or 0,
        valid_until=_micros(row.get("valid_until")),
        vector=vector,
        fields=fields,
    )


class IndexSync:
    """The one writer of the search indexes in the serving process."""

    def __init__(self, store: Store, index: SearchIndex, model: str) -> None:
        self.store = store
        self.index = index
        self.model = model
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, store: Store, data_dir: Path, model: str) -> IndexSync:
        """Open the indexes in the data dir; rebuild them when missing or stale."""
        index = await asyncio.to_thread(SearchIndex, data_dir / SEARCH_DIR)
        sync = cls(store, index, model)
        generation = await store.search_generation()
        if index.fresh or index.generation != generation:
            log.info(
                "search indexes %s (generation %s, records %d): rebuilding",
                "missing" if index.fresh else "stale",
                index.generation,
                generation,
            )
            await sync.rebuild()
        return sync

    async def close(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self.index.close)

    async def rebuild(self) -> dict[str, int]:
        """Empty the indexes and fill them from the database; returns rows per table."""
        async with self._lock:
            return await self._rebuild()

    async def _rebuild(self) -> dict[str, int]:
        started = time.perf_counter()
        generation = await self.store.search_generation()
        await asyncio.to_thread(self.index.clear)
        counts = {}
        for table in SEARCHED_TABLES:
            counts[table] = 0
            after = ""
            while True:
                rows = await self.store.search_rows(table, after, REBUILD_BATCH)
                if not rows:
                    break
                await self._upsert(table, rows)
                counts[table] += len(rows)
                after = rows[-1]["key"]
        await asyncio.to_thread(self.index.commit, generation)
        log.info("search indexes rebuilt in %.1fs: %s", time.perf_counter() - started, counts)
        return counts

    async def _follow(self, generation: int | None, update: Callable[[], Awaitable[None]]) -> None:
        """Bring the indexes to the database's `generation` with `update`. A failure half-way
        leaves them holding part of a write: they are rebuilt now, or, when the job is
        cancelled, stamped stale so the next start rebuilds them."""
        if generation is None:
            return
        try:
            await update()
            await asyncio.to_thread(self.index.commit, generation)
        except Exception:
            log.exception("search index update failed; rebuilding from the database")
            await self._rebuild()
        except BaseException:
            self.index.invalidate()
            raise

    async def _upsert(self, table: str, rows: list[dict[str, Any]]) -> None:
        docs = [doc_of(table, row, self.model) for row in rows]
        await asyncio.to_thread(self.index.upsert, docs, self.model)

    async def _reread(self, table: str, keys: Sequence[str]) -> None:
        """Index rows as the database now holds them (its valid_from for a row that existed)."""
        for lo in range(0, len(keys), REBUILD_BATCH):
            rows = await self.store.search_rows_by_key(table, keys[lo : lo + REBUILD_BATCH])
            await self._upsert(table, rows)

    # -- the writes ------------------------------------------------------------------------

    async def write_file_index(
        self,
        project_id: str,
        chunks: list[dict[str, Any]],
        file_states: list[dict[str, Any]],
        files: list[dict[str, Any]],
        retire_paths: list[str],
        symbols: list[dict[str, Any]] | None = None,
    ) -> FileIndexWrite:
        async with self._lock:
            done = await self.store.write_file_index(
                project_id, chunks, file_states, files, retire_paths, symbols
            )

            async def update() -> None:
                await self._reread("code_chunk", [c["id"] for c in chunks])
                if done.retired:
                    at = micros(done.at)
                    await asyncio.to_thread(self.index.retire, "code_chunk", done.retired, at)

            await self._follow(done.generation, update)
            return done

    async def write_transcript_batch(
        self, batch: dict[str, list[dict[str, Any]]], cursor: dict[str, Any]
    ) -> None:
        async with self._lock:
            generation = await self.store.write_transcript_batch(batch, cursor)

            async def update() -> None:
                for table, name in (("memory", "memories"), ("goal", "goals")):
                    # Parsed rows name themselves with a Ref (memoryd.store.Ref).
                    await self._reread(table, [row["id"].key for row in batch.get(name, [])])

            await self._follow(generation, update)

    async def delete_rows(self, table: str, keys: list[str]) -> None:
        async with self._lock:
            generation = await self.store.delete_rows(table, keys)

            async def update() -> None:
                await asyncio.to_thread(self.index.delete, table, keys)

            await self._follow(generation, update)

    async def write_note(
        self,
        session: dict[str, Any],
        memory: dict[str, Any],
        entities: list[dict[str, Any]],
        mentions: list[dict[str, Any]],
    ) -> int:
        """An agent's note (memoryd.store.notes); returns its seq."""
        async with self._lock:
            seq, generation = await self.store.write_note(session, memory, entities, mentions)

            async def update() -> None:
                await self._reread("memory", [memory["id"].key])

            await self._follow(generation, update)
            return seq

    async def forget(self, refs: Sequence[Ref]) -> list[Ref]:
        """Forgotten rows leave the database (memoryd.store.forget, FORGET_BATCH rows per
        transaction) and then the indexes, all at once: rewriting the index segments that
        held them costs about the same for one row as for thousands. Returns the rows deleted
        (derived goals and orphaned entities included)."""
        async with self._lock:
            gone: list[Ref] = []
            generation: int | None = None
            try:
                for start in range(0, len(refs), FORGET_BATCH):
                    deleted, generation = await self.store.forget_records(
                        refs[start : start + FORGET_BATCH]
                    )
                    gone += deleted
            except BaseException:
                if generation is not None:  # rows gone from the database, not the indexes
                    self.index.invalidate()
                raise

            async def update() -> None:
                rows = [(ref.table, ref.key) for ref in gone if ref.table in SEARCHED_TABLES]
                await asyncio.to_thread(self.index.forget, rows)

            await self._follow(generation, update)
            return gone

    async def set_vectors(self, table: str, vectors: dict[str, list[float]], model: str) -> None:
        async with self._lock:
            generation, kept = await self.store.set_vectors(table, vectors, model)

            async def update() -> None:
                if kept:  # rows deleted meanwhile get no vector in the index either
                    found = {key: vectors[key] for key in kept}
                    await asyncio.to_thread(self.index.set_vectors, table, found, model)

            await self._follow(generation, update)
