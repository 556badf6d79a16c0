"""The code index: projects, file states, chunks, and the file and symbol entities they define."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from memoryd.ids import file_state_id
from memoryd.store.base import StoreBase, key_of, now, rid, unpack_vector, with_packed_vector
from memoryd.store.codegraph import GRAPH_WRITE, graph_params
from memoryd.store.entities import UPSERT_ENTITIES
from memoryd.store.search import BUMP_GENERATION, returned

# A file's chunks are found by the (project, path) index. The planner prefers the index on
# valid_until when a query also asks `valid_until IS NONE`, and then reads every valid chunk
# (11 s at 10k chunks, where the path index takes 8 ms); and it cannot use the path key for
# `path IN [...]`, so the retiring of files' old chunks asks path by path.
BY_PATH = "WITH INDEX code_chunk_path"


# A chunk written before its vector: `embedding_model` names the model it waits for.
OWES_VECTOR = "embedding IS NONE AND embedding_model = $model"
# What a chunk's plan carries for the write's other rows, not stored on the chunk.
_PLAN_ONLY = frozenset({"entity_id", "symbol_id", "symbol_edge_id"})


class FileIndexWrite(NamedTuple):
    """What `write_file_index` changed beyond its input: the chunks it retired (key -> their
    valid_until), the search generation of the records after it, and each written chunk's
    valid_from (a chunk that existed keeps its own)."""

    retired: dict[str, datetime]
    generation: int
    valid_from: dict[str, datetime]


class CodeQueries(StoreBase):
    async def upsert_project(self, project_id: str, fields: dict[str, Any]) -> None:
        await self.query(
            "UPSERT $id MERGE $fields",
            {"id": rid("project", project_id), "fields": {**fields, "updated_at": now()}},
        )

    async def projects(self) -> list[dict[str, Any]]:
        rows = (await self.query("SELECT * FROM project ORDER BY name"))[0] or []
        return [{**row, "id": key_of(row["id"])} for row in rows]

    async def indexed_paths(self, project_id: str) -> list[str]:
        rows = (
            await self.query(
                "SELECT VALUE path FROM file_state WHERE project = $p AND status != 'deleted'",
                {"p": rid("project", project_id)},
            )
        )[0] or []
        return sorted(rows)

    async def vectors_by_hash(self, hashes: Iterable[str], model: str) -> dict[str, list[float]]:
        """Existing vectors for chunk contents, so unchanged or moved code is not re-embedded."""
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        rows = (
            await self.query(
                # The planner scans the whole table for `IN $hashes` unless told the index:
                # 0.8 s a call at 100k rows (20 ms with it), once per index job.
                "SELECT content_hash, embedding FROM code_chunk WITH INDEX code_chunk_hash "
                "WHERE content_hash IN $hashes AND embedding_model = $model "
                "AND embedding IS NOT NONE",
                {"hashes": wanted, "model": model},
            )
        )[0] or []
        return {row["content_hash"]: unpack_vector(row["embedding"]) for row in rows}

    async def owed_chunk_keys(self, model: str) -> list[str]:
        """Keys of the chunks written without their vector of `model` (indexing writes a
        chunk first and embeds it after; a crash in between leaves these)."""
        rows = (
            await self.query(
                f"SELECT VALUE record::id(id) FROM code_chunk WHERE {OWES_VECTOR}",
                {"model": model},
            )
        )[0] or []
        return list(rows)

    async def vectors_by_project(self, model: str) -> dict[str, dict[str, int]]:
        """Per project id, in one scan of the table: `valid` chunks, `done` (valid ones with
        their vector of `model`) and `owed` (chunks that owe theirs)."""
        rows = (
            await self.query(
                "SELECT record::id(project) AS project, count(valid_until IS NONE) AS valid, "
                "count(valid_until IS NONE AND embedding IS NOT NONE "
                "AND embedding_model = $model) AS done, "
                f"count({OWES_VECTOR}) AS owed FROM code_chunk GROUP BY project",
                {"model": model},
            )
        )[0] or []
        return {row.pop("project"): row for row in rows}

    async def owed_chunks(self, keys: Sequence[str], model: str) -> list[dict[str, Any]]:
        """Of these chunks, the ones still without their vector of `model`: key, content hash
        and content (one embedded meanwhile, or deleted, is not among them)."""
        rows = (
            await self.query(
                "SELECT record::id(id) AS key, content_hash, content FROM $ids "
                f"WHERE {OWES_VECTOR}",
                {"ids": [rid("code_chunk", key) for key in keys], "model": model},
            )
        )[0] or []
        return list(rows)

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
        """One transaction: upsert chunks, retire the chunks of `retire_paths` not in `chunks`,
        record file states (a retired chunk whose text comes back is valid again: its validity
        says when the file held it, which memoryd/anchors.py reads), upsert file
        and symbol entities and DEFINED_IN edges (chunk -> its
        file; chunk -> the symbol it defines, for chunks with a `symbol_id`), and bump the
        search generation. Retired chunks keep their edges: readers filter on `valid_until`.
        `graph`: the code graph rows of these files (memoryd/store/codegraph.py), replaced
        like their chunks. `since`: path -> when the file came to hold the content written
        (workers/indexing.py), its chunks' validity bound; now for a path not in it."""
        at = now()
        project = rid("project", project_id)
        # Keys go as plain strings and become record ids in the engine: the SDK's encoder took
        # four times as long over record ids as over the rest of a write.
        chunk_rows = [
            {k: v for k, v in with_packed_vector(c).items() if k not in _PLAN_ONLY} for c in chunks
        ]
        state_rows = [
            {**s, "id": rid("file_state", s["id"]), "project": project, "indexed_at": at}
            for s in file_states
        ]
        entity_rows = [
            {"id": f["entity_id"], "kind": "file", "key": f["key"], "name": f["path"]}
            for f in files
        ] + [
            {"id": sym["entity_id"], "kind": "symbol", "key": sym["key"], "name": sym["name"]}
            for sym in symbols or []
        ]
        edge_rows = [{"edge": c["id"], "chunk": c["id"], "entity": c["entity_id"]} for c in chunks]
        edge_rows += [
            {"edge": c["symbol_edge_id"], "chunk": c["id"], "entity": c["symbol_id"]}
            for c in chunks
            if c.get("symbol_id")
        ]
        result = await self.query(
            f"""
            BEGIN;
            LET $chunks = $chunks.map(|$c| $c + {{ id: type::record("code_chunk", $c.id),
                project: $project, valid_from: $since[$c.path] ?? $at, indexed_at: $at }});
            LET $keep = $chunks.map(|$c| $c.id);
            INSERT INTO code_chunk $chunks ON DUPLICATE KEY UPDATE
                valid_from = IF valid_until IS NONE THEN valid_from ELSE $input.valid_from END,
                valid_until = NONE, start_line = $input.start_line, end_line = $input.end_line,
                name = $input.name, parent_name = $input.parent_name,
                file_hash = $input.file_hash, indexed_at = $input.indexed_at,
                embedding = $input.embedding, embedding_model = $input.embedding_model
                RETURN NONE;
            LET $retired = array::flatten($retire.map(|$path| (UPDATE code_chunk {BY_PATH}
                SET valid_until = $since[$path] ?? $at WHERE project = $project AND path = $path
                AND valid_until IS NONE AND id NOTINSIDE $keep
                RETURN record::id(id) AS key, valid_until)));
            INSERT INTO file_state $states ON DUPLICATE KEY UPDATE
                size = $input.size, mtime_ns = $input.mtime_ns, hash = $input.hash,
                status = $input.status, reason = $input.reason, indexed_at = $input.indexed_at
                RETURN NONE;
            LET $entities = $entities.map(|$e| $e + {{ id: type::record("entity", $e.id),
                project: $project, aliases: [$e.name], first_seen: $at, last_seen: $at }});
            {UPSERT_ENTITIES}
            -- A link's ends cannot change in place: one whose chunk now defines another
            -- symbol (its class renamed, its text the same) goes, and comes back to it below.
            DELETE $edges.map(|$e| type::record("defined_in", $e.edge))
                WHERE record::id(out) != $links[record::id(id)] RETURN NONE;
            INSERT RELATION INTO defined_in $edges.map(|$e| {{
                id: type::record("defined_in", $e.edge), in: type::record("code_chunk", $e.chunk),
                out: type::record("entity", $e.entity) }})
                ON DUPLICATE KEY UPDATE out = $input.out RETURN NONE;
            {GRAPH_WRITE}
            {BUMP_GENERATION}
            RETURN {{ retired: $retired, generation: $generation,
                valid_from: (SELECT record::id(id) AS key, valid_from FROM $keep) }};
            COMMIT;
            """,
            {
                "chunks": chunk_rows,
                "states": state_rows,
                "entities": entity_rows,
                "edges": edge_rows,
                "links": {e["edge"]: e["entity"] for e in edge_rows},
                "retire": retire_paths,
                "project": project,
                "at": at,
                "since": dict(since or {}),
                **graph_params(graph, (row["id"] for row in entity_rows)),
            },
        )
        done = returned(result)
        valid_from = {row["key"]: row["valid_from"] for row in done["valid_from"]}
        retired = {row["key"]: row["valid_until"] for row in done["retired"]}
        return FileIndexWrite(retired, done["generation"], valid_from)

    async def code_file_states(
        self, project_id: str, paths: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """Stored state of these files (size, mtime, hash, status, the skip reason and when it
        was written)."""
        rows = (
            await self.query(
                # By key: `path IN $paths` read every file state of the project.
                "SELECT path, size, mtime_ns, hash, status, reason, indexed_at FROM $ids",
                {"ids": [rid("file_state", file_state_id(project_id, p)) for p in paths]},
            )
        )[0] or []
        return {row["path"]: row for row in rows}

    async def skipped_files(self, limit: int) -> list[dict[str, Any]]:
        """Files recorded as skipped, with the reason (too large, too many chunks, a secret
        file…), by project and path, then the transcripts skipped (a FIFO, a symlink to
        nothing, a format memoryd does not read), project None: what `memoryd status` lists."""
        found = await self.query(
            "SELECT record::id(project) AS project, path, reason FROM file_state "
            "WHERE status = 'skipped' ORDER BY project, path LIMIT $n;"
            "SELECT NONE AS project, path, note AS reason FROM transcript_cursor "
            "WHERE note IS NOT NONE ORDER BY path LIMIT $n;",
            {"n": limit},
        )
        rows: list[dict[str, Any]] = [*(found[0] or []), *(found[1] or [])]
        return rows[:limit]

    async def code_index(self, project_id: str) -> dict[str, list[tuple[int, int, str]]]:
        """The valid chunks of a project: path -> [(start_line, end_line, content_hash)] in line
        order. What an exact comparison with the files on disk needs."""
        rows = (
            await self.query(
                f"SELECT path, start_line, end_line, content_hash FROM code_chunk {BY_PATH} "
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

    async def valid_chunk_counts(self, project_id: str, paths: Sequence[str]) -> dict[str, int]:
        """How many valid chunks each of these files holds (a file with none is left out)."""
        rows = (
            await self.query(
                f"SELECT path, count() AS chunks FROM code_chunk {BY_PATH} WHERE project = $p "
                "AND path IN $paths AND valid_until IS NONE GROUP BY path",
                {"p": rid("project", project_id), "paths": list(paths)},
            )
        )[0] or []
        return {row["path"]: row["chunks"] for row in rows}

    async def code_chunk_links(self, project_id: str, path: str) -> list[dict[str, Any]]:
        """Valid chunks of one file with the entities they are DEFINED_IN (file and symbol
        keys), in line order."""
        rows = (
            await self.query(
                "SELECT start_line, end_line, chunk_type, name, parent_name, "
                f"->defined_in->entity.{{kind, key}} AS defined_in FROM code_chunk {BY_PATH} "
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

    async def last_retired(self, project_id: str, path: str) -> datetime | None:
        """When code of this file was last replaced or removed (a chunk's valid_until)."""
        rows = await self.query(
            f"SELECT VALUE valid_until FROM code_chunk {BY_PATH} WHERE project = $p "
            "AND path = $path AND valid_until IS NOT NONE ORDER BY valid_until DESC LIMIT 1",
            {"p": rid("project", project_id), "path": path},
        )
        return rows[0][0] if rows[0] else None

    async def valid_chunks(self, project_id: str, path: str) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT path, start_line, end_line, chunk_type, name, parent_name FROM code_chunk "
            f"{BY_PATH} WHERE project = $p AND path = $path AND valid_until IS NONE "
            "ORDER BY start_line",
            {"p": rid("project", project_id), "path": path},
        )
        return rows[0] or []
