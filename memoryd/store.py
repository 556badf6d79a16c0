"""All SurrealDB access. The only Python module that speaks SurrealQL (schema files aside)."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.resources
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from surrealdb import RecordID

from memoryd.engine import DEFAULT_REOPEN_BYTES, Connection
from memoryd.ids import stable_id

log = logging.getLogger(__name__)

SCHEMA_DIR = Path(str(importlib.resources.files("memoryd.schema")))
# Tables `memoryd status` counts.
COUNTED_TABLES = (
    "project",
    "file_state",
    "code_chunk",
    "session",
    "memory",
    "goal",
    "entity",
    "defined_in",
)
# Relation tables a transcript batch writes, by the name its rows come under in a batch.
EDGE_TABLES = (
    "contains",
    "next",
    "has_goal",
    "reads",
    "modifies",
    "executes",
    "triggered",
    "denied",
    "spawned",
    "mentions",
)
# What a verb edge says, as the history and session views show it.
_EDGE_FIELDS = (
    "string::uppercase(meta::tb(id)) AS verb, out.kind AS target_kind, "
    "out.key ?? record::id(out) AS target, outcome, exit_code, reason, tool, detail, event_time"
)
# Entities are merged, not replaced: aliases accumulate (sorted), first_seen and last_seen are
# the earliest and latest sightings, so the result does not depend on the order of writes.
_UPSERT_ENTITIES = """
            FOR $e IN $entities {
                UPSERT $e.id SET kind = $e.kind, key = $e.key, name = $e.name,
                    project = $e.project,
                    aliases = array::sort(array::union(aliases ?? [], $e.aliases)),
                    first_seen = time::min([first_seen ?? $e.first_seen, $e.first_seen]),
                    last_seen = time::max([last_seen ?? $e.last_seen, $e.last_seen]);
            };"""
# Tables holding vectors (each with an HNSW index in schema/001_core.surql), by the field whose
# text is embedded.
VECTOR_TABLES = {"code_chunk": "content", "memory": "content", "goal": "intent"}
_HNSW_DIMENSION = re.compile(r"\bHNSW\s+DIMENSION\s+(\d+)")
# A row that should carry a vector of the configured model ($model) and does not: embedded with
# another model, or its vector dropped when the dimension changed. Rows with no model are not
# embedded at all (kinds that are not, texts too long).
_STALE_VECTOR = "embedding_model IS NOT NONE AND (embedding_model != $model OR embedding IS NONE)"


def _age(field: str) -> str:
    """Seconds from `field` to $at, negative for a time after $at (a fast clock): computed on
    unix seconds, since a negative duration fails the whole statement."""
    return f"(time::unix($at) - time::unix({field}))"


_LAST_TOUCHED = "(last_accessed ?? event_time ?? ingestion_time)"
_EXPIRED = f"valid_until IS NOT NONE AND {_age('valid_until')} > $retention"
# What prune deletes, one rule an entry: (table, condition). A memory may meet both of its rules.
PRUNE_RULES = (
    ("code_chunk", _EXPIRED),
    ("memory", f"pinned = false AND {_EXPIRED}"),
    ("memory", f"pinned = false AND importance < $floor AND {_age(_LAST_TOUCHED)} > $idle"),
)
PRUNED_TABLES = ("code_chunk", "memory")


def _prune_condition(table: str) -> str:
    return " OR ".join(f"({where})" for t, where in PRUNE_RULES if t == table)


# A row a prune deletes, whatever its table (for the entities it would leave orphaned).
_DOOMED = " OR ".join(
    f"(meta::tb(id) = '{table}' AND ({_prune_condition(table)}))" for table in PRUNED_TABLES
)
# Entities that nothing points at, or only rows a prune deletes.
_ORPHANED_BY_PRUNE = f"count(->?) = 0 AND count((<-?<-?)[WHERE !({_DOOMED})]) = 0"
# Candidates per ranked list before fusion: enough that filters still leave `limit`.
_CANDIDATE_FACTOR = 4
_HNSW_EF = 100
# The k-NN takes this many neighbours per candidate and filters them afterwards: a filter
# inside the HNSW scan loads every record it visits and costs seconds on a few thousand
# chunks. When the filters leave too few, k grows, up to _KNN_MAX; beyond that the rows are
# left to BM25 (it happens in the middle of a model migration).
_KNN_OVERSAMPLE = 4
_KNN_MAX = 4096
_RRF_K = 60


class QueryFailed(Exception):
    """A statement failed; the message is the database's own."""


_TRANSACTION_ATTEMPTS = 6
_ROLLED_BACK = "not executed due to a failed transaction"


def now() -> datetime:
    return datetime.now(UTC)


def rid(table: str, key: str) -> RecordID:
    return RecordID(table, key)


class Ref(NamedTuple):
    """A record reference in plain data; the store turns it into a SurrealDB record id."""

    table: str
    key: str


def _record(value: Any) -> Any:
    if isinstance(value, Ref):
        return RecordID(value.table, value.key)
    if isinstance(value, list):
        return [_record(v) for v in value]
    if isinstance(value, dict):
        return {k: _record(v) for k, v in value.items()}
    return value


def _records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_record(row) for row in rows]


def _key(path: str) -> str:
    return stable_id(path)


def key_of(record: Any) -> str:
    """The key part of a record id as a string ('code_chunk:abc' -> 'abc')."""
    return str(record.id) if isinstance(record, RecordID) else str(record).split(":", 1)[-1]


@dataclass(frozen=True, slots=True)
class SearchHit:
    table: str
    id: str
    score: float
    fields: dict[str, Any]


class Store:
    """A connection to the memoryd database (embedded SurrealKV or a SurrealDB server)."""

    def __init__(self, connection: Connection) -> None:
        self._db = connection
        self.url = connection.url

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
    ) -> Store:
        """Connect; an embedded database is reopened once the process grew by `reopen_bytes`
        (memoryd/engine.py says why)."""
        return cls(await Connection.open(url, namespace, database, user, password, reopen_bytes))

    async def close(self) -> None:
        await self._db.close()

    @property
    def reopened(self) -> int:
        """How often the embedded database was reopened to give its memory back."""
        return self._db.reopened

    async def reopen(self) -> None:
        """Close and reopen the connection between queries (memoryd/engine.py)."""
        await self._db.reopen()

    async def query(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Run statements; one result per statement. A failed transaction (another writer
        touched the same rows) is retried; any other failure raises with the engine's own
        message, not the generic 'failed transaction' of the statements it rolled back."""
        transaction = sql.lstrip().startswith("BEGIN")
        for attempt in range(_TRANSACTION_ATTEMPTS if transaction else 1):
            response = await self._db.query_raw(sql, params or {})
            if "error" in response:
                raise QueryFailed(str(response["error"].get("message", response["error"])))
            statements = response.get("result") or []
            failures = [r["result"] for r in statements if r.get("status") != "OK"]
            if not failures:
                return [r.get("result") for r in statements]
            cause = next((f for f in failures if _ROLLED_BACK not in str(f)), failures[0])
            if attempt + 1 < _TRANSACTION_ATTEMPTS and transaction:
                log.info("transaction failed (%s); retrying", str(cause)[:200])
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            raise QueryFailed(str(cause))
        raise AssertionError("unreachable")

    # -- schema ------------------------------------------------------------------------------

    async def apply_schema(self, dim: int, schema_dir: Path = SCHEMA_DIR) -> list[str]:
        """Apply every schema file in order; each is idempotent. Returns the newly recorded ones."""
        applied = (
            {
                row["file"]: row["checksum"]
                for row in (await self.query("SELECT file, checksum FROM schema_version"))[0] or []
            }
            if await self._has_table("schema_version")
            else {}
        )
        if applied:
            await self._fit_vector_indexes(dim)
        recorded: list[str] = []
        for path in sorted(schema_dir.glob("*.surql")):
            text = path.read_text().replace("{{dim}}", str(dim))
            checksum = hashlib.sha256(text.encode()).hexdigest()
            await self.query(text)
            if applied.get(path.name) != checksum:
                await self.query(
                    "UPSERT $id CONTENT {file: $file, checksum: $sum, applied_at: time::now()}",
                    {"id": rid("schema_version", path.stem), "file": path.name, "sum": checksum},
                )
                recorded.append(path.name)
        return recorded

    async def _vector_indexes(self) -> dict[str, tuple[str, int]]:
        """Per vector table that has one: its HNSW index's name and dimension."""
        tables = [t for t in VECTOR_TABLES if await self._has_table(t)]
        infos = await self.query("; ".join(f"INFO FOR TABLE {t}" for t in tables)) if tables else []
        found: dict[str, tuple[str, int]] = {}
        for table, info in zip(tables, infos, strict=True):
            for name, definition in (info.get("indexes") or {}).items():
                if hnsw := _HNSW_DIMENSION.search(definition):
                    found[table] = (name, int(hnsw[1]))
        return found

    async def vector_dimensions(self) -> dict[str, int]:
        """The dimension each vector table's HNSW index is built for."""
        return {table: dim for table, (_, dim) in (await self._vector_indexes()).items()}

    async def _fit_vector_indexes(self, dim: int) -> None:
        """A model of another dimension: an HNSW index takes vectors of one dimension only, so
        drop the vectors of the old one (reembed gives each row a new one; meanwhile BM25 and
        the graph find it), then the index; the schema files define it again for `dim`. In this
        order a start killed half-way is finished by the next: the old index is still there
        to say what to do."""
        for table, (index, old) in (await self._vector_indexes()).items():
            if old == dim:
                continue
            await self.query(
                f"UPDATE {table} SET embedding = NONE WHERE embedding IS NOT NONE RETURN NONE; "
                f"REMOVE INDEX {index} ON {table};"
            )
            log.warning(
                "the model's dimension changed from %d to %d: the %s vectors were dropped and "
                "index %s is rebuilt; reembed embeds them again",
                old,
                dim,
                table,
                index,
            )

    async def _has_table(self, name: str) -> bool:
        info = (await self.query("INFO FOR DB"))[0]
        return name in (info.get("tables") or {})

    async def schema_version(self) -> str | None:
        rows = (await self.query("SELECT file FROM schema_version ORDER BY file DESC LIMIT 1"))[0]
        return rows[0]["file"] if rows else None

    # -- projects and files ------------------------------------------------------------------

    async def upsert_project(self, project_id: str, fields: dict[str, Any]) -> None:
        await self.query(
            "UPSERT $id MERGE $fields",
            {"id": rid("project", project_id), "fields": {**fields, "updated_at": now()}},
        )

    async def projects(self) -> list[dict[str, Any]]:
        rows = (await self.query("SELECT * FROM project ORDER BY name"))[0] or []
        return [{**row, "id": key_of(row["id"])} for row in rows]

    async def file_states(self, project_id: str, paths: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = (
            await self.query(
                "SELECT path, size, mtime_ns, hash, status FROM file_state "
                "WHERE project = $p AND path IN $paths",
                {"p": rid("project", project_id), "paths": list(paths)},
            )
        )[0] or []
        return {row["path"]: row for row in rows}

    async def indexed_paths(self, project_id: str) -> list[str]:
        rows = (
            await self.query(
                "SELECT VALUE path FROM file_state WHERE project = $p AND status != 'deleted'",
                {"p": rid("project", project_id)},
            )
        )[0] or []
        return sorted(rows)

    async def valid_chunk_ids(self, project_id: str, paths: Sequence[str]) -> set[str]:
        rows = (
            await self.query(
                "SELECT VALUE id FROM code_chunk "
                "WHERE project = $p AND path IN $paths AND valid_until IS NONE",
                {"p": rid("project", project_id), "paths": list(paths)},
            )
        )[0] or []
        return {key_of(r) for r in rows}

    async def vectors_by_hash(self, hashes: Iterable[str], model: str) -> dict[str, list[float]]:
        """Existing vectors for chunk contents, so unchanged or moved code is not re-embedded."""
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        rows = (
            await self.query(
                "SELECT content_hash, embedding FROM code_chunk "
                "WHERE content_hash IN $hashes AND embedding_model = $model "
                "AND embedding IS NOT NONE",
                {"hashes": wanted, "model": model},
            )
        )[0] or []
        return {row["content_hash"]: row["embedding"] for row in rows}

    async def write_file_index(
        self,
        project_id: str,
        chunks: list[dict[str, Any]],
        file_states: list[dict[str, Any]],
        files: list[dict[str, Any]],
        retire_paths: list[str],
        symbols: list[dict[str, Any]] | None = None,
    ) -> int:
        """One transaction: upsert chunks, retire the chunks of `retire_paths` not in `chunks`,
        record file states, upsert file and symbol entities and DEFINED_IN edges (chunk -> its
        file; chunk -> the symbol it defines, for chunks with a `symbol_id`). Retired chunks
        keep their edges: readers filter on `valid_until`. Returns chunks retired."""
        at = now()
        project = rid("project", project_id)
        chunk_rows = [
            {
                **c,
                "id": rid("code_chunk", c["id"]),
                "project": project,
                "valid_from": at,
                "indexed_at": at,
            }
            for c in chunks
        ]
        keep = [row["id"] for row in chunk_rows]
        state_rows = [
            {**s, "id": rid("file_state", s["id"]), "project": project, "indexed_at": at}
            for s in file_states
        ]
        entity_rows = [
            {
                "id": rid("entity", f["entity_id"]),
                "kind": "file",
                "key": f["key"],
                "name": f["path"],
                "project": project,
                "aliases": [f["path"]],
                "first_seen": at,
                "last_seen": at,
            }
            for f in files
        ] + [
            {
                "id": rid("entity", sym["entity_id"]),
                "kind": "symbol",
                "key": sym["key"],
                "name": sym["name"],
                "project": project,
                "aliases": [sym["name"]],
                "first_seen": at,
                "last_seen": at,
            }
            for sym in symbols or []
        ]
        edge_rows = [
            {
                "id": rid("defined_in", c["id"]),
                "in": rid("code_chunk", c["id"]),
                "out": rid("entity", c["entity_id"]),
            }
            for c in chunks
        ] + [
            {
                "id": rid("defined_in", c["symbol_edge_id"]),
                "in": rid("code_chunk", c["id"]),
                "out": rid("entity", c["symbol_id"]),
            }
            for c in chunks
            if c.get("symbol_id")
        ]
        for row in chunk_rows:
            for extra in ("entity_id", "symbol_id", "symbol_edge_id"):
                row.pop(extra, None)
        result = await self.query(
            f"""
            BEGIN;
            INSERT INTO code_chunk $chunks ON DUPLICATE KEY UPDATE
                valid_until = NONE, start_line = $input.start_line, end_line = $input.end_line,
                name = $input.name, parent_name = $input.parent_name,
                file_hash = $input.file_hash, indexed_at = $input.indexed_at,
                embedding = $input.embedding, embedding_model = $input.embedding_model;
            LET $retired = (UPDATE code_chunk SET valid_until = $at
                WHERE project = $project AND path IN $retire AND valid_until IS NONE
                AND id NOTINSIDE $keep RETURN VALUE id);
            INSERT INTO file_state $states ON DUPLICATE KEY UPDATE
                size = $input.size, mtime_ns = $input.mtime_ns, hash = $input.hash,
                status = $input.status, reason = $input.reason, indexed_at = $input.indexed_at;
            {_UPSERT_ENTITIES}
            INSERT RELATION INTO defined_in $edges ON DUPLICATE KEY UPDATE out = $input.out;
            RETURN array::len($retired);
            COMMIT;
            """,
            {
                "chunks": chunk_rows,
                "states": state_rows,
                "entities": entity_rows,
                "edges": edge_rows,
                "retire": retire_paths,
                "keep": keep,
                "project": project,
                "at": at,
            },
        )
        # The RETURN is the only statement whose result is a number (whether BEGIN/COMMIT get
        # entries of their own differs between engine versions).
        return next(r for r in reversed(result) if isinstance(r, int))

    async def code_file_states(
        self, project_id: str, paths: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """Stored state of these files (size, mtime, hash, status and the skip reason)."""
        rows = (
            await self.query(
                "SELECT path, size, mtime_ns, hash, status, reason FROM file_state "
                "WHERE project = $p AND path IN $paths",
                {"p": rid("project", project_id), "paths": list(paths)},
            )
        )[0] or []
        return {row["path"]: row for row in rows}

    async def code_index(self, project_id: str) -> dict[str, list[tuple[int, int, str]]]:
        """The valid chunks of a project: path -> [(start_line, end_line, content_hash)] in line
        order. What an exact comparison with the files on disk needs."""
        rows = (
            await self.query(
                "SELECT path, start_line, end_line, content_hash FROM code_chunk "
                "WHERE project = $p AND valid_until IS NONE",
                {"p": rid("project", project_id)},
            )
        )[0] or []
        index: dict[str, list[tuple[int, int, str]]] = {}
        for row in rows:
            index.setdefault(row["path"], []).append(
                (row["start_line"], row["end_line"], row["content_hash"])
            )
        return {path: sorted(chunks) for path, chunks in sorted(index.items())}

    async def code_chunk_links(self, project_id: str, path: str) -> list[dict[str, Any]]:
        """Valid chunks of one file with the entities they are DEFINED_IN (file and symbol
        keys), in line order."""
        rows = (
            await self.query(
                "SELECT start_line, end_line, chunk_type, name, parent_name, "
                "->defined_in->entity.{kind, key} AS defined_in FROM code_chunk "
                "WHERE project = $p AND path = $path AND valid_until IS NONE "
                "ORDER BY start_line",
                {"p": rid("project", project_id), "path": path},
            )
        )[0] or []
        return rows

    async def live_symbols(self, project_id: str) -> set[str]:
        """Keys of the symbol entities of a project that a valid chunk still defines."""
        rows = (
            await self.query(
                "SELECT VALUE key FROM entity WHERE kind = 'symbol' AND project = $p "
                "AND count(<-defined_in<-code_chunk[WHERE valid_until IS NONE]) > 0",
                {"p": rid("project", project_id)},
            )
        )[0] or []
        return set(rows)

    # -- search ------------------------------------------------------------------------------

    async def hybrid_search(
        self,
        table: str,
        text_field: str,
        vector: list[float],
        text: str,
        limit: int,
        filters: dict[str, Any],
        fields: Sequence[str],
        model: str,
    ) -> list[SearchHit]:
        """k-NN over the HNSW index and BM25 over the full-text index, fused with RRF. The
        k-NN compares only vectors of `model` (never two models in one ranking); BM25 also
        finds rows whose vectors still wait for re-embedding."""
        where, params, read = _filter_clause(filters)
        candidates = max(limit * _CANDIDATE_FACTOR, 20)
        params |= {"vec": vector, "text": text, "model": model}
        # What the filters read, so they can run on the k-NN's output (see _KNN_OVERSAMPLE).
        projected = ", ".join(sorted({"embedding_model", *read}))
        k = candidates * _KNN_OVERSAMPLE
        while True:
            rows = await self.query(
                f"""
                LET $near = SELECT id, {projected}, vector::distance::knn() AS distance
                    FROM {table} WHERE embedding <|{k},{max(k, _HNSW_EF)}|> $vec;
                LET $vs = SELECT id, distance FROM $near WHERE embedding_model = $model
                    {where} ORDER BY distance LIMIT {candidates};
                LET $ft = SELECT id, search::score(1) AS ft_score FROM {table}
                    WHERE {text_field} @1,OR@ $text {where}
                    ORDER BY ft_score DESC LIMIT {candidates};
                RETURN {{
                    near: array::len($near), kept: array::len($vs),
                    fused: search::rrf([$vs, $ft], {limit}, {_RRF_K})
                }};
                """,
                params,
            )
            result = rows[-1]
            if result["kept"] >= candidates or result["near"] < k or k >= _KNN_MAX:
                break
            k = min(k * _KNN_OVERSAMPLE, _KNN_MAX)
        fused = result["fused"] or []
        if not fused:
            return []
        ids = [row["id"] for row in fused]
        details = (await self.query(f"SELECT id, {', '.join(fields)} FROM $ids", {"ids": ids}))[
            0
        ] or []
        by_id = {key_of(row["id"]): row for row in details}
        hits = []
        for row in fused:
            key = key_of(row["id"])
            if key in by_id:
                found = dict(by_id[key])
                found.pop("id", None)
                hits.append(SearchHit(table, key, float(row["rrf_score"]), found))
        return hits

    # -- status ------------------------------------------------------------------------------

    async def counts(self) -> dict[str, int]:
        sql = "; ".join(f"SELECT count() AS n FROM {t} GROUP ALL" for t in COUNTED_TABLES)
        results = await self.query(sql)
        return {
            table: (rows[0]["n"] if rows else 0)
            for table, rows in zip(COUNTED_TABLES, results, strict=True)
        }

    async def all_chunk_ids(self) -> set[str]:
        rows = (await self.query("SELECT VALUE id FROM code_chunk"))[0] or []
        return {key_of(r) for r in rows}

    async def valid_chunk_count(self) -> int:
        rows = (
            await self.query(
                "SELECT count() AS n FROM code_chunk WHERE valid_until IS NONE GROUP ALL"
            )
        )[0]
        return rows[0]["n"] if rows else 0

    # -- transcripts -------------------------------------------------------------------------

    async def transcript_cursor(self, path: str) -> dict[str, Any] | None:
        found = await self.query("SELECT * FROM $id", {"id": rid("transcript_cursor", _key(path))})
        return found[0][0] if found[0] else None

    async def write_transcript_batch(
        self, batch: dict[str, list[dict[str, Any]]], cursor: dict[str, Any]
    ) -> None:
        """One transaction: the records parsed from a stretch of a transcript and the cursor
        that says how far it was read, so a crash can never leave one without the other."""
        params: dict[str, Any] = {name: _records(rows) for name, rows in batch.items()}
        cursor_id = rid("transcript_cursor", _key(cursor["path"]))
        params["cursor"] = {**cursor, "id": cursor_id, "updated_at": now()}
        edges = "\n".join(
            f"INSERT RELATION INTO {table} $edge_{table} ON DUPLICATE KEY UPDATE out = $input.out;"
            for table in EDGE_TABLES
        )
        for table in EDGE_TABLES:
            params[f"edge_{table}"] = _records(batch.get(f"edge_{table}", []))
        await self.query(
            f"""
            BEGIN;
            FOR $s IN $sessions {{ UPSERT $s.id MERGE $s.data; }};
            {_UPSERT_ENTITIES}
            INSERT INTO memory $memories ON DUPLICATE KEY UPDATE
                content = $input.content, kind = $input.kind, seq = $input.seq,
                event_time = $input.event_time, source = $input.source,
                embedding = $input.embedding, embedding_model = $input.embedding_model;
            INSERT INTO goal $goals ON DUPLICATE KEY UPDATE
                intent = $input.intent, embedding = $input.embedding,
                embedding_model = $input.embedding_model;
            INSERT INTO summary $summaries ON DUPLICATE KEY UPDATE text = $input.text;
            {edges}
            UPSERT $cursor.id CONTENT $cursor;
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

    async def sessions(self, ids: Sequence[Any]) -> list[dict[str, Any]]:
        rows = (
            await self.query(
                "SELECT *, (SELECT intent, event_time FROM goal WHERE session = $parent.id "
                "ORDER BY event_time LIMIT 1)[0] AS goal FROM $ids",
                {"ids": list(ids)},
            )
        )[0]
        return rows or []

    # -- graph reads (history, session replay) -----------------------------------------------

    async def file_actions(self, entity_key: str) -> list[dict[str, Any]]:
        """Edges of sessions' actions on one entity (by its record key), newest first."""
        rows = await self.query(
            f"SELECT {_EDGE_FIELDS}, session, in.seq AS seq "
            "FROM $e<-(reads, modifies, denied, mentions) "
            "ORDER BY event_time DESC",
            {"e": rid("entity", entity_key)},
        )
        return rows[0] or []

    async def session_rows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT *, (SELECT VALUE intent FROM ONLY ->has_goal->goal LIMIT 1) AS goal, "
            "(SELECT VALUE text FROM summary WHERE leaf_uuid INSIDE "
            "(SELECT VALUE source_id FROM memory WHERE session = $parent.id) LIMIT 1)[0] AS title "
            "FROM $ids",
            {"ids": [rid("session", i) for i in ids]},
        )
        return rows[0] or []

    async def find_sessions(self, prefix: str) -> list[str]:
        """The session with exactly this id, else those whose id starts with it or whose
        external id it is (a scan of every session, so only when the exact one is not there)."""
        exact = await self.query(
            "SELECT VALUE record::id(id) FROM $id", {"id": rid("session", prefix)}
        )
        if exact[0]:
            return list(exact[0])
        rows = await self.query(
            "SELECT VALUE record::id(id) FROM session "
            "WHERE string::starts_with(record::id(id), $p) OR external_id = $p",
            {"p": prefix},
        )
        return sorted(rows[0] or [])

    async def session_errors(self, session_id: str) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT out.key AS signature, out.name AS error, message, exit_code, tool, event_time, "
            "in.seq AS seq FROM $s->contains->memory->triggered ORDER BY seq",
            {"s": rid("session", session_id)},
        )
        return rows[0] or []

    async def session_memories(self, session_id: str) -> list[dict[str, Any]]:
        """A session's memories in file order, each with its outgoing action edges."""
        rows = await self.query(
            f"SELECT id, seq, kind, tool, content, event_time, (SELECT {_EDGE_FIELDS} FROM "
            "$parent.id->(reads, modifies, executes, triggered, denied, spawned, mentions)) "
            "AS edges "
            "FROM memory WHERE session = $s ORDER BY seq",
            {"s": rid("session", session_id)},
        )
        return rows[0] or []

    async def last_retired(self, project_id: str, path: str) -> datetime | None:
        """When code of this file was last replaced or removed (a chunk's valid_until)."""
        rows = await self.query(
            "SELECT VALUE valid_until FROM code_chunk WHERE project = $p AND path = $path "
            "AND valid_until IS NOT NONE ORDER BY valid_until DESC LIMIT 1",
            {"p": rid("project", project_id), "path": path},
        )
        return rows[0][0] if rows[0] else None

    async def valid_chunks(self, project_id: str, path: str) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT path, start_line, end_line, chunk_type, name, parent_name FROM code_chunk "
            "WHERE project = $p AND path = $path AND valid_until IS NONE ORDER BY start_line",
            {"p": rid("project", project_id), "path": path},
        )
        return rows[0] or []

    async def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every table: for diagnostics and for tests that check the whole graph."""
        info = (await self.query("INFO FOR DB"))[0]
        tables = sorted(info.get("tables") or {})
        results = await self.query("; ".join(f"SELECT * FROM {t}" for t in tables))
        return dict(zip(tables, (rows or [] for rows in results), strict=True))

    # -- maintenance -------------------------------------------------------------------------

    async def decay_memories(
        self,
        at: datetime,
        half_lives: dict[str, float],
        default_half_life: float,
        access_boost: float,
        after: str,
        batch: int,
    ) -> tuple[int, str | None]:
        """Recompute `importance` of one batch of unpinned memories (by id order, after
        `after`): 0.5^(age / half-life of its kind) x (1 + boost x ln(1 + access_count)), capped
        at 1, where age runs from the last access or else the event (a time in the future,
        from a fast clock, counts as age 0 instead of failing the pass).
        Returns (count, last id)."""
        rows = await self.query(
            f"""
            UPDATE (SELECT VALUE id FROM memory WHERE pinned = false AND id > $after
                    ORDER BY id LIMIT $batch)
            SET importance = math::min([1.0,
                math::pow(0.5, math::max([0.0, {_age(_LAST_TOUCHED)}]) / 86400.0
                    / ($half[kind] ?? $half_default))
                * (1.0 + $boost * math::ln(1.0 + access_count))])
            RETURN VALUE record::id(id);
            """,
            {
                "at": at,
                "half": half_lives,
                "half_default": default_half_life,
                "boost": access_boost,
                "after": rid("memory", after),
                "batch": batch,
            },
        )
        done = rows[0] or []
        return len(done), (max(done) if done else None)

    async def prune_candidates(
        self, at: datetime, retention_days: float, floor: float, idle_days: float, batch: int
    ) -> dict[str, list[str]]:
        """What a prune deletes next: at most `batch` rows per rule."""
        results = await self.query(
            "; ".join(
                f"SELECT VALUE record::id(id) FROM {table} WHERE {where} LIMIT $batch"
                for table, where in PRUNE_RULES
            ),
            _prune_params(at, retention_days, floor, idle_days) | {"batch": batch},
        )
        found: dict[str, set[str]] = {table: set() for table in PRUNED_TABLES}
        for (table, _), keys in zip(PRUNE_RULES, results, strict=True):
            found[table].update(keys or [])
        return {table: sorted(keys) for table, keys in found.items()}

    async def prune_preview(
        self, at: datetime, retention_days: float, floor: float, idle_days: float, sample: int
    ) -> dict[str, tuple[int, list[str]]]:
        """What a whole prune would delete, deleting nothing: per table the count and the first
        `sample` keys. Entities are those the deletions would leave with no edge (or have none)."""
        conditions = {table: _prune_condition(table) for table in PRUNED_TABLES}
        conditions["entity"] = _ORPHANED_BY_PRUNE
        results = await self.query(
            "; ".join(
                f"SELECT count() AS n FROM {table} WHERE {where} GROUP ALL; "
                f"SELECT VALUE record::id(id) FROM {table} WHERE {where} LIMIT $sample"
                for table, where in conditions.items()
            ),
            _prune_params(at, retention_days, floor, idle_days) | {"sample": sample},
        )
        counts, samples = results[0::2], results[1::2]
        return {
            table: ((n[0]["n"] if n else 0), sorted(keys or []))
            for table, n, keys in zip(conditions, counts, samples, strict=True)
        }

    async def delete_rows(self, table: str, keys: list[str]) -> int:
        """Delete rows and the edges touching them (DELETE of a record removes its edges)."""
        if not keys:
            return 0
        await self.query("BEGIN; DELETE $ids; COMMIT;", {"ids": [rid(table, k) for k in keys]})
        return len(keys)

    async def orphan_entities(self, batch: int) -> list[str]:
        """Entities nothing points at any more (no edge in or out)."""
        rows = await self.query(
            "SELECT VALUE record::id(id) FROM entity WHERE count(<-?) = 0 AND count(->?) = 0 "
            "LIMIT $batch",
            {"batch": batch},
        )
        return sorted(rows[0] or [])

    async def set_pinned(self, table: str, key: str, pinned: bool) -> bool:
        rows = await self.query(
            "UPDATE $id SET pinned = $pinned, importance = 1.0 RETURN id",
            {"id": rid(table, key), "pinned": pinned},
        )
        return bool(rows[0])

    async def bump_access(self, table: str, keys: Sequence[str], at: datetime) -> None:
        """Reading a memory counts: decay starts again from now, and often-read ones last."""
        if keys:
            await self.query(
                "UPDATE $ids SET access_count += 1, last_accessed = $at",
                {"ids": [rid(table, k) for k in keys], "at": at},
            )

    async def record_maintenance(
        self,
        task: str,
        started: datetime,
        result: dict[str, Any],
        dry_run: bool,
        job_id: str | None = None,
    ) -> None:
        await self.query(
            "CREATE maintenance_run CONTENT {task: $task, started_at: $started, "
            "finished_at: time::now(), dry_run: $dry, result: $result, job_id: $job}",
            {"task": task, "started": started, "dry": dry_run, "result": result, "job": job_id},
        )

    async def maintenance_runs(self, task: str) -> list[dict[str, Any]]:
        """Every recorded run of a task, oldest first."""
        rows = await self.query(
            "SELECT task, job_id, started_at, finished_at, result FROM maintenance_run "
            "WHERE task = $task ORDER BY started_at",
            {"task": task},
        )
        return rows[0] or []

    async def last_maintenance(self) -> dict[str, dict[str, Any]]:
        rows = await self.query(
            "SELECT task, started_at, finished_at, dry_run, result FROM maintenance_run "
            "WHERE dry_run = false ORDER BY finished_at DESC LIMIT 50"
        )
        last: dict[str, dict[str, Any]] = {}
        for row in rows[0] or []:
            last.setdefault(row["task"], row)
        return last

    async def stale_vectors(
        self, table: str, text_field: str, model: str, batch: int
    ) -> list[dict[str, Any]]:
        """Rows to embed (again) with `model`: embedded with another model, or their vector
        dropped when the dimension changed."""
        rows = await self.query(
            f"SELECT record::id(id) AS key, {text_field} AS text FROM {table} "
            f"WHERE {_STALE_VECTOR} LIMIT $batch",
            {"model": model, "batch": batch},
        )
        return rows[0] or []

    async def count_stale_vectors(self, model: str) -> dict[str, int]:
        results = await self.query(
            "; ".join(
                f"SELECT count() AS n FROM {t} WHERE {_STALE_VECTOR} GROUP ALL"
                for t in VECTOR_TABLES
            ),
            {"model": model},
        )
        return {
            t: (rows[0]["n"] if rows else 0) for t, rows in zip(VECTOR_TABLES, results, strict=True)
        }

    async def set_vectors(self, table: str, vectors: dict[str, list[float]], model: str) -> None:
        await self.query(
            "BEGIN; FOR $v IN $rows { UPDATE $v.id SET embedding = $v.embedding, "
            "embedding_model = $model; }; COMMIT;",
            {
                "rows": [{"id": rid(table, k), "embedding": v} for k, v in vectors.items()],
                "model": model,
            },
        )


def _prune_params(
    at: datetime, retention_days: float, floor: float, idle_days: float
) -> dict[str, Any]:
    return {
        "at": at,
        "retention": retention_days * 86400.0,
        "floor": floor,
        "idle": idle_days * 86400.0,
    }


def _filter_clause(filters: dict[str, Any]) -> tuple[str, dict[str, Any], set[str]]:
    """`AND field = $f_field ...` for equality filters, its parameters and the fields it reads.
    `valid_at`: rows valid at that time (valid_from <= t < valid_until); `valid_now`: rows not
    closed yet."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    read: set[str] = set()
    for name, value in filters.items():
        if name == "valid_now":
            if value:
                parts.append("valid_until IS NONE")
                read.add("valid_until")
            continue
        if name == "valid_at":
            parts.append(
                "valid_from <= $valid_at AND (valid_until IS NONE OR valid_until > $valid_at)"
            )
            params["valid_at"] = value
            read |= {"valid_from", "valid_until"}
            continue
        if value is None:
            continue
        parts.append(f"{name} = $f_{name}")
        params[f"f_{name}"] = value
        read.add(name)
    return ("AND " + " AND ".join(parts) if parts else ""), params, read
