"""The shared connection and the plain-data <-> SurrealDB record conversions every part of the
store uses. Nothing outside memoryd.store sees a SurrealDB type."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Self

import numpy as np
from surrealdb import RecordID

from memoryd.errors import MemorydError
from memoryd.ids import stable_id
from memoryd.store.connection import DEFAULT_REOPEN_BYTES, Connection

log = logging.getLogger(__name__)
# How long a close waits for bookkeeping writes still under way.
LATER_SECONDS = 5.0


class QueryFailed(Exception):
    """A statement failed; the message is the database's own, its quoted values masked."""


# The engine quotes the values it refuses ("index `u` already contains 'x'", "found `{ a: 'x' }`
# for field `f`"): a memory's text, a prompt, code. Its message is logged, kept in job results
# and shown, so they are masked where it enters memoryd; the names in backticks stay. A quote
# right after a letter is an apostrophe ("Couldn't"), never a string's start.
_QUOTED = re.compile(r"(?<!\w)(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
MASK = "'…'"


def engine_message(text: str) -> str:
    """The engine's message with every quoted string masked."""
    return _QUOTED.sub(MASK, text)


_TRANSACTION_ATTEMPTS = 6
_ROLLED_BACK = "not executed due to a failed transaction"
# How the engine says another writer won (surrealkv's and the server's words).
_RETRIABLE = re.compile(r"can be retried|retry the transaction|retry required", re.IGNORECASE)


def now() -> datetime:
    return datetime.now(UTC)


def rid(table: str, key: str) -> RecordID:
    return RecordID(table, key)


class Ref(NamedTuple):
    """A record reference in plain data; the store turns it into a SurrealDB record id."""

    table: str
    key: str


# Vectors are stored as little-endian half floats: 768 bytes for 384 dimensions, where the
# engine spends about 20 bytes per number of an array of floats (measured: 7.9 KB a row).
# The search index holds them at this precision already (memoryd/searchindex/vectors.py).
VECTOR_DTYPE = np.dtype("<f2")


def pack_vector(vector: Sequence[float] | None) -> bytes | None:
    return None if vector is None else np.asarray(vector, VECTOR_DTYPE).tobytes()


def unpack_vector(stored: bytes | None) -> list[float] | None:
    return None if stored is None else np.frombuffer(stored, VECTOR_DTYPE).astype(float).tolist()


def with_packed_vector(row: dict[str, Any]) -> dict[str, Any]:
    """A row to write, its `embedding` (when it has one) as stored."""
    return {**row, "embedding": pack_vector(row["embedding"])} if "embedding" in row else row


def to_record(value: Any) -> Any:
    if isinstance(value, Ref):
        return RecordID(value.table, value.key)
    if isinstance(value, list):
        return [to_record(v) for v in value]
    if isinstance(value, dict):
        return {k: to_record(v) for k, v in value.items()}
    return value


def to_records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [to_record(row) for row in rows]


def path_key(path: str) -> str:
    """The record key of a row kept per file path (cursors)."""
    return stable_id(path)


def key_of(record: Any) -> str:
    """The key part of a record id as a string ('code_chunk:abc' -> 'abc')."""
    return str(record.id) if isinstance(record, RecordID) else str(record).split(":", 1)[-1]


def plain(value: Any, qualified: bool = False) -> Any:
    """Record ids to their key (`qualified`: `table:key`, for exports that must say which
    table a reference points into), datetimes to ISO-8601: what JSON and people can read."""
    if isinstance(value, RecordID):
        return f"{value.table_name}:{value.id}" if qualified else key_of(value)
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: plain(v, qualified) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, qualified) for v in value]
    return value


class StoreBase:
    """A connection to the memoryd database (embedded SurrealKV or a SurrealDB server)."""

    def __init__(self, connection: Connection) -> None:
        self._db = connection
        self.url = connection.url
        self._later: set[asyncio.Task[None]] = set()
        # `later` writes go one at a time: concurrent searches bump the same memories, and the
        # engine refuses all but one of such writes at once.
        self._later_turn = asyncio.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        url: str,
        namespace: str,
        database: str,
        user: str | None = None,
        password: str | None = None,
        reopen_bytes: int = DEFAULT_REOPEN_BYTES,
    ) -> Self:
        """Connect; an embedded database is reopened once the process grew by `reopen_bytes`
        (memoryd/engine.py says why)."""
        return cls(await Connection.open(url, namespace, database, user, password, reopen_bytes))

    async def close(self) -> None:
        await self.settled()  # bookkeeping writes still under way get a moment to finish
        await self._db.close()

    async def settled(self, timeout: float = LATER_SECONDS) -> None:
        """Wait (at most `timeout`) for the writes `later` started."""
        if self._later:
            await asyncio.wait(set(self._later), timeout=timeout)

    def later(self, write: Coroutine[Any, Any, None], what: str) -> None:
        """Run a write no answer waits for (a read's bookkeeping): under a long write of the
        indexer it would hold the answer up. A failure is logged, never raised."""

        async def run() -> None:
            try:
                async with self._later_turn:
                    await write
            except Exception as exc:
                log.warning("%s not recorded: %s", what, exc)

        task = asyncio.create_task(run())
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    @property
    def broken(self) -> MemorydError | None:
        """Why the database cannot be used any more (a reopen that failed), or None."""
        return self._db.broken

    @property
    def reopened(self) -> int:
        """How often the embedded database was reopened to give its memory back."""
        return self._db.reopened

    async def reopen(self) -> None:
        """Close and reopen the connection between queries (memoryd/engine.py)."""
        await self._db.reopen()

    def rebase_memory(self) -> None:
        """Memory the process gained so far is not the database's (see Connection.rebase)."""
        self._db.rebase()

    def discount_memory(self, size: int) -> None:
        """`size` bytes the process took since are not the database's (a model loaded late);
        callable from any thread."""
        self._db.discount(size)

    @property
    def memory_growth(self) -> int | None:
        return self._db.growth

    async def query(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Run statements; one result per statement. A transaction or a single statement that
        lost to another writer (the engine says it can be retried) is run again: either wrote
        nothing. Statements run one by one are not, since those before the failure stay
        written; nor is a failure that would only fail again (a full disk, a value the schema
        refuses). It raises with the engine's own message, not the generic 'failed
        transaction' of the statements it rolled back."""
        transaction = sql.lstrip().startswith("BEGIN")
        for attempt in range(_TRANSACTION_ATTEMPTS):
            response = await self._db.query_raw(sql, params or {})
            if "error" in response:
                error = response["error"]
                raise QueryFailed(engine_message(str(error.get("message", error))))
            statements = response.get("result") or []
            failures = [r["result"] for r in statements if r.get("status") != "OK"]
            if not failures:
                return [r.get("result") for r in statements]
            cause = engine_message(
                str(next((f for f in failures if _ROLLED_BACK not in str(f)), failures[0]))
            )
            # A transaction whose every statement says only "rolled back" failed at its commit:
            # a conflict, whatever words the engine gives it.
            unsaid = all(_ROLLED_BACK in str(f) for f in failures)
            retriable = _RETRIABLE.search(cause) is not None or (transaction and unsaid)
            retried = retriable and (transaction or len(statements) == 1)
            if attempt + 1 < _TRANSACTION_ATTEMPTS and retried:
                log.info("transaction failed (%s); retrying", cause[:200])
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            raise QueryFailed(cause)
        raise AssertionError("unreachable")
