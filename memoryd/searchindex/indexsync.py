"""Keep the derived search indexes in step with the records: every write that changes a
searchable row goes through here, to the database first and then to the indexes, in one job.

No transaction spans the two. Each database write bumps the search generation in its own
transaction and the indexes are committed with it. Writes take two locks in turn: the
database's for their record write, then the indexes' (taken before the database's is let go,
so the indexes apply the writes in the database's order, while the next record write runs).
So the index's generation is the database's exactly when every write reached both. While other
writes are under way, a write leaves its index commit to the last of them (group commit, for
at most `GROUP_SECONDS`): a tantivy commit per write was a fifth of a cold index's time.
At start, a missing index or a different generation (a crash between the two writes, a
restored database) means a rebuild from the database.

Server mode (`follow`): several workers write one database, each with its own indexes. Each
write then also records the rows it changed under its generation (schema 022), and a copy
catches up before it answers a search or makes its own write: it reads those rows again, and
drops those gone. Its stamp moves over the generations it holds without a gap. A generation
recorded nowhere for `MISSING_SECONDS` (a writer died between its two writes), or no longer
kept, means a rebuild.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from memoryd import static_embedding
from memoryd.searchindex import Doc, SearchIndex, chunk_kind, micros
from memoryd.store import Ref, Store
from memoryd.store.code import FileIndexWrite
from memoryd.vocabulary import SEARCHED_TABLES

log = logging.getLogger(__name__)

SEARCH_DIR = "search"
# Characters of a memory or goal kept with its hit, to show it.
SNIPPET_CHARS = 160
# Rows read from the database per page of a rebuild.
REBUILD_BATCH = 2000
# Server mode: the generations of changes kept for copies that fell behind, and how long a
# generation may go unrecorded before a copy stops waiting for it and rebuilds.
CHANGES_KEPT = 10_000
MISSING_SECONDS = 60.0
# Rows a forget deletes per database transaction (each commits on its own).
FORGET_BATCH = 1000
# The longest a write's index commit waits for the writes queued behind it (group commit).
GROUP_SECONDS = 1.0


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


class _Turn:
    """Which of the two locks a write holds: the database's, then the indexes'."""

    __slots__ = ("database", "indexes")

    def __init__(self) -> None:
        self.database = False
        self.indexes = False


class IndexSync:
    """The one writer of the search indexes in the serving process."""

    def __init__(self, store: Store, index: SearchIndex, model: str, follow: bool = False) -> None:
        self.store = store
        self.index = index
        self.model = model
        self.follow = follow
        # The indexes' lock, and the database's for the record part of a write.
        self._lock = asyncio.Lock()
        self._db_lock = asyncio.Lock()
        # Server mode: generations past the stamp already applied, and when each generation
        # still unrecorded was first missed.
        self._applied: set[int] = set()
        self._missed: dict[int, float] = {}
        # Group commit: the writes waiting for or holding the lock, and the generation written
        # to the indexes but not committed yet (since when).
        self._queued = 0
        self._owed: int | None = None
        self._owed_since = 0.0

    @classmethod
    async def open(
        cls,
        store: Store,
        data_dir: Path,
        model: str,
        follow: bool = False,
        first_pass_when_used: bool = False,
    ) -> IndexSync:
        """Open the indexes in the data dir; rebuild them when missing or stale (in server
        mode: catch up when the changes since are kept). `first_pass_when_used`: its table
        loads at the first text (a one-shot command), not now."""
        # Code chunks not yet embedded by the full model get a first-pass vector as they are
        # indexed.
        first_pass: static_embedding.StaticEmbedder | static_embedding.WhenUsed
        if first_pass_when_used:
            first_pass = static_embedding.WhenUsed(store.discount_memory)
        else:
            first_pass = await asyncio.to_thread(static_embedding.load)
        index = await asyncio.to_thread(SearchIndex, data_dir / SEARCH_DIR, first_pass=first_pass)
        sync = cls(store, index, model, follow)
        generation = await store.search_generation()
        # Vectors of another model (the configured one changed; `reembed` replaces them): a
        # rebuild gives their rows first-pass vectors, so they stay found by meaning meanwhile.
        other_model = index.model not in (None, model)
        if follow and not index.fresh:
            await sync.catch_up()
        elif index.fresh or index.generation != generation or other_model:
            log.info(
                "search indexes %s (generation %s, records %d): rebuilding",
                "missing" if index.fresh else f"of model {index.model}" if other_model else "stale",
                index.generation,
                generation,
            )
            await sync.rebuild()
        return sync

    async def close(self) -> None:
        async with self._db_lock, self._lock:
            await self._commit_owed(force=True)
            await asyncio.to_thread(self.index.close)

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[_Turn]:
        """A write: its record part under the database's lock, then (`_to_indexes`) its index
        part under the indexes'. On the way out it commits what the indexes owe, unless
        another write is under way (that one commits for both)."""
        turn = _Turn()
        self._queued += 1
        try:
            await self._db_lock.acquire()
            turn.database = True
            yield turn
            await self._to_indexes(turn)
            await self._commit_owed()
        finally:
            if turn.database:
                self._db_lock.release()
            if turn.indexes:
                self._lock.release()
            self._queued -= 1
            if self._owed is not None and not self._queued:
                # The writes it was left to went away (an error, a cancelled job): commit now.
                async with self._lock:
                    await self._commit_owed()

    async def _to_indexes(self, turn: _Turn) -> None:
        """Take the indexes' lock, then let the next write at the database (in server mode
        the write keeps both: its catch-up reads what the database holds)."""
        if not turn.indexes:
            await self._lock.acquire()
            turn.indexes = True
        if turn.database and not self.follow:
            self._db_lock.release()
            turn.database = False

    async def _commit_owed(self, force: bool = False) -> None:
        if self._owed is None:
            return
        if not force and self._queued > 1 and time.monotonic() - self._owed_since < GROUP_SECONDS:
            return
        generation, self._owed = self._owed, None
        try:
            await asyncio.to_thread(self.index.commit, generation)
        except Exception as exc:
            await self._failed(exc)

    async def rebuild(self) -> dict[str, int]:
        """Empty the indexes and fill them from the database; returns rows per table."""
        async with self._db_lock, self._lock:
            return await self._rebuild()

    async def _rebuild(self) -> dict[str, int]:
        started = time.perf_counter()
        generation = await self.store.search_generation()
        self._applied.clear()
        self._missed.clear()
        self._owed = None
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

    async def _follow(
        self,
        turn: _Turn,
        generation: int | None,
        update: Callable[[], Awaitable[None]],
        changes: Sequence[tuple[str, Sequence[str]]],
        forget: bool = False,
    ) -> None:
        """Bring the indexes to the database's `generation` with `update`, which applies the
        write's `changes` (table, keys). A failure half-way leaves them holding part of a
        write: they are rebuilt now, or, when the job is cancelled, stamped stale so the next
        start rebuilds them."""
        if generation is None:
            return
        await self._to_indexes(turn)
        try:
            await update()
            if self.follow:
                recorded = [
                    {"tb": table, "keys": list(keys), "forget": forget}
                    for table, keys in changes
                    if keys
                ]
                await self.store.record_search_changes(generation, recorded, CHANGES_KEPT)
                self._applied.add(generation)
                await self._catch_up(generation)
            else:
                if self._owed is None:
                    self._owed_since = time.monotonic()
                self._owed = generation  # committed as the write leaves (`_writing`)
        except Exception as exc:
            await self._failed(exc)
        except BaseException:
            try:
                self.index.invalidate()
            except OSError as exc:
                # The disk refuses the stamp too (full, read-only, as a stop finds it): the one
                # on disk still names the last commit, which the next start brings up to date.
                # The cancellation goes on, not this as a failure of the job.
                log.warning("search indexes not stamped stale: %s", exc)
            raise

    async def _failed(self, exc: Exception) -> None:
        # A fault of the disk (full, read-only) is one line; anything else, a traceback.
        log.error(
            "search index update failed (%s); rebuilding from the database",
            exc,
            exc_info=not isinstance(exc, OSError),
        )
        try:
            await self._rebuild()
        except OSError as again:  # the disk refuses the rebuild too: the records are stored
            log.error("search indexes not rebuilt (%s); the next start rebuilds them", again)
            with contextlib.suppress(OSError):  # stale in memory even if the stamp can't say so
                self.index.invalidate()

    async def catch_up(self) -> None:
        """Server mode: apply what other workers wrote since the stamp (before a search)."""
        if self.follow:
            async with self._lock:
                await self._catch_up(await self.store.search_generation())

    async def _catch_up(self, upto: int) -> None:
        mine = self.index.generation
        if mine is None or upto < mine or upto - mine > CHANGES_KEPT:
            await self._rebuild()  # never stamped, a database restored, or too far behind
            return
        waiting = [g for g in range(mine + 1, upto + 1) if g not in self._applied]
        recorded = await self.store.search_changes(mine, upto) if waiting else {}
        now = time.monotonic()
        for g in waiting:
            if g in recorded:
                await self._apply(recorded[g])
                self._applied.add(g)
                self._missed.pop(g, None)
            elif now - self._missed.setdefault(g, now) > MISSING_SECONDS:
                log.warning("search generation %d was never recorded; rebuilding", g)
                await self._rebuild()
                return
        held = mine
        while held + 1 in self._applied:
            held += 1
            self._applied.discard(held)
        await asyncio.to_thread(self.index.commit, held)

    async def _apply(self, changes: list[dict[str, Any]]) -> None:
        """Another worker's write: its rows as the database holds them now (a later write of
        the same rows is read the same, so the order does not matter), those gone dropped."""
        for change in changes:
            table, keys = change["tb"], change["keys"]
            if change["forget"]:
                await asyncio.to_thread(self.index.forget, [(table, k) for k in keys])
                continue
            for lo in range(0, len(keys), REBUILD_BATCH):
                part = keys[lo : lo + REBUILD_BATCH]
                rows = await self.store.search_rows_by_key(table, part)
                await self._upsert(table, rows)
                gone = sorted(set(part) - {row["key"] for row in rows})
                if gone:
                    await asyncio.to_thread(self.index.delete, table, gone)

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
        graph: Sequence[Any] = (),
        since: Mapping[str, datetime] | None = None,
    ) -> FileIndexWrite:
        async with self._writing() as turn:
            done = await self.store.write_file_index(
                project_id, chunks, file_states, files, retire_paths, symbols, graph, since
            )

            async def update() -> None:
                # The rows as written (not read back: decoding them again cost as much as
                # the write), with the valid_from the database kept.
                rows = [
                    {
                        **c,
                        "key": c["id"],
                        "project": project_id,
                        "valid_from": done.valid_from[c["id"]],
                        "valid_until": None,
                    }
                    for c in chunks
                ]
                await self._upsert("code_chunk", rows)
                by_time: dict[datetime, list[str]] = {}
                for key, until in done.retired.items():
                    by_time.setdefault(until, []).append(key)
                for until, keys in by_time.items():
                    await asyncio.to_thread(self.index.retire, "code_chunk", keys, micros(until))

            keys = [c["id"] for c in chunks] + list(done.retired)
            await self._follow(turn, done.generation, update, [("code_chunk", keys)])
            return done

    async def write_transcript_batch(
        self, batch: dict[str, list[dict[str, Any]]], cursor: dict[str, Any]
    ) -> None:
        async with self._writing() as turn:
            generation = await self.store.write_transcript_batch(batch, cursor)

            # Parsed rows name themselves with a Ref (memoryd.store.Ref).
            changes = [
                (table, [row["id"].key for row in batch.get(name, [])])
                for table, name in (("memory", "memories"), ("goal", "goals"))
            ]

            async def update() -> None:
                for table, keys in changes:
                    await self._reread(table, keys)

            await self._follow(turn, generation, update, changes)

    async def delete_rows(self, table: str, keys: list[str]) -> None:
        async with self._writing() as turn:
            generation = await self.store.delete_rows(table, keys)

            async def update() -> None:
                await asyncio.to_thread(self.index.delete, table, keys)

            await self._follow(turn, generation, update, [(table, keys)])

    async def write_note(
        self,
        session: dict[str, Any],
        memory: dict[str, Any],
        entities: list[dict[str, Any]],
        mentions: list[dict[str, Any]],
    ) -> int:
        """An agent's note (memoryd.store.notes); returns its seq."""
        async with self._writing() as turn:
            seq, generation = await self.store.write_note(session, memory, entities, mentions)

            async def update() -> None:
                await self._reread("memory", [memory["id"].key])

            await self._follow(turn, generation, update, [("memory", [memory["id"].key])])
            return seq

    async def forget(self, refs: Sequence[Ref]) -> list[Ref]:
        """Forgotten rows leave the database (memoryd.store.forget, FORGET_BATCH rows per
        transaction) and then the indexes, all at once: rewriting the index segments that
        held them costs about the same for one row as for thousands. Returns the rows deleted
        (derived goals and orphaned entities included)."""
        async with self._writing() as turn:
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

            rows = [(ref.table, ref.key) for ref in gone if ref.table in SEARCHED_TABLES]

            async def update() -> None:
                await asyncio.to_thread(self.index.forget, rows)

            changes = [(t, [key for table, key in rows if table == t]) for t in SEARCHED_TABLES]
            await self._follow(turn, generation, update, changes, forget=True)
            return gone

    async def set_vectors(self, table: str, vectors: dict[str, list[float]], model: str) -> None:
        async with self._writing() as turn:
            generation, kept = await self.store.set_vectors(table, vectors, model)

            async def update() -> None:
                if kept:  # rows deleted meanwhile get no vector in the index either
                    found = {key: vectors[key] for key in kept}
                    await asyncio.to_thread(self.index.set_vectors, table, found, model)

            await self._follow(turn, generation, update, [(table, list(vectors))])
