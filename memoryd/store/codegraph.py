"""The code graph in the database: the writes a file's index job makes in its own transaction,
and the reads `related` and `impact` answer from."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from memoryd.store.base import StoreBase, now, rid
from memoryd.vocabulary import CHANGES_WITH, CODE_GRAPH_EDGES, MODULE, SYMBOL

_TABLES = tuple(edge.table for edge in CODE_GRAPH_EDGES)


def graph_params(graph: Sequence[Any], written: Iterable[str] = ()) -> dict[str, Any]:
    """Query parameters of the graph rows of a batch of files (workers/stages/codegraph GraphRows);
    `written`: ids of entities the same transaction upserts already."""
    edges: dict[str, list[dict[str, Any]]] = {t: [] for t in _TABLES}
    refs: list[dict[str, Any]] = []
    for rows in graph:
        for edge in rows.edges:
            edges[edge["table"]].append(
                {k: v for k, v in edge.items() if k != "table"} | {"path": rows.path}
            )
        refs += [ref | {"path": rows.path} for ref in rows.refs]
    skip = set(written)
    entities = [e for e in graph_entities(graph) if e["id"] not in skip]
    return {f"graph_{t}": edges[t] for t in _TABLES} | {
        "graph_refs": refs,
        "graph_entities": entities,
    }


def _retire(table: str) -> str:
    # Every valid row of the files is retired, then the rows the files still give are
    # upserted valid again (keeping their valid_from): within the transaction no reader sees
    # the step between. Comparing each row with the ids kept (NOTINSIDE) took minutes a page.
    # By the path index, one path at a time (as chunks are: memoryd/store/code.py).
    return f"""
            FOR $path IN $retire {{
                UPDATE {table} WITH INDEX {table}_path SET valid_until = $at
                    WHERE project = $project AND path = $path AND valid_until IS NONE
                    RETURN NONE;
            }};"""


def _write_edges(table: str) -> str:
    rows = f"$graph_{table}"
    return (
        _retire(table)
        + f"""
            INSERT RELATION INTO {table} {rows}.map(|$e| $e + {{
                id: type::record("{table}", $e.id), in: type::record("entity", $e.in),
                out: type::record("entity", $e.out), project: $project, valid_from: $at }})
                ON DUPLICATE KEY UPDATE valid_until = NONE, line = $input.line,
                lines = $input.lines, name = $input.name RETURN NONE;"""
    )


# The statements `write_file_index` runs in its transaction (with $retire, $project, $at):
# the symbol and module entities the graph adds (one INSERT: the per-row UPSERT of the
# entities of chunks took most of a graph write), then each file re-indexed or deleted has
# its old graph rows retired and the new ones upserted.
GRAPH_WRITE = (
    """
            INSERT INTO entity $graph_entities.map(|$e| $e + { id: type::record("entity", $e.id),
                project: $project, aliases: [$e.name], first_seen: $at, last_seen: $at })
                ON DUPLICATE KEY UPDATE last_seen = $input.last_seen RETURN NONE;"""
    + "".join(_write_edges(t) for t in _TABLES)
    + (
        _retire("code_ref")
        + """
            INSERT INTO code_ref $graph_refs.map(|$r| $r + { id: type::record("code_ref", $r.id),
                source: type::record("entity", $r.source), project: $project, valid_from: $at })
                ON DUPLICATE KEY UPDATE valid_until = NONE, line = $input.line,
                lines = $input.lines, paths = $input.paths RETURN NONE;"""
    )
)


def _valid(as_of: datetime | None) -> str:
    if as_of is None:
        return "valid_until IS NONE"
    return "valid_from <= $as_of AND (valid_until IS NONE OR valid_until > $as_of)"


def graph_entities(graph: Sequence[Any]) -> list[dict[str, Any]]:
    """The symbol and module entities of a batch's graph rows, one row per id."""
    rows = [
        {"id": row["entity_id"], "kind": kind, "key": row["key"], "name": row["name"]}
        for rows in graph
        for kind, found in ((SYMBOL, rows.symbols), (MODULE, rows.modules))
        for row in found
    ]
    return list({row["id"]: row for row in rows}.values())


class CodeGraphQueries(StoreBase):
    async def write_graph(self, project_id: str, graph: Sequence[Any]) -> None:
        """The graph rows of these files alone, replacing what they had (migration step 029
        fills the graph of files indexed before it existed)."""
        await self.query(
            f"BEGIN; {GRAPH_WRITE} COMMIT;",
            {
                "retire": [rows.path for rows in graph],
                "project": rid("project", project_id),
                "at": now(),
                **graph_params(graph),
            },
        )

    async def graph_edges(
        self,
        table: str,
        side: str,
        ids: Sequence[str],
        as_of: datetime | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        """Edges of `table` whose `side` (in | out) is one of these entity ids, valid now or
        `as_of`, with both ends' keys: the file that owns each, its line and the name as
        written, in a fixed order."""
        if not ids:
            return []
        other = "out" if side == "in" else "in"
        rows = await self.query(
            f"SELECT record::id({side}) AS at, record::id({other}) AS other, "
            f"{side}.key AS at_key, {other}.key ?? target AS other_key, {other}.kind AS kind, "
            f"path, line, lines, name, count, last_at FROM {table} WITH INDEX {table}_{side} "
            f"WHERE {side} IN $ids AND {_valid(as_of)} ORDER BY other_key, path, line LIMIT $n",
            {"ids": [rid("entity", i) for i in ids], "as_of": as_of, "n": limit},
        )
        return rows[0] or []

    async def refs_named(
        self, project_id: str, names: Sequence[str], verb: str, as_of: datetime | None = None
    ) -> list[dict[str, Any]]:
        """Unsettled references (calls or bases) by these names in a project, with the key of
        the symbol or file they sit in."""
        if not names:
            return []
        rows = await self.query(
            "SELECT name, owner, path, line, lines, paths, source.key AS source_key, "
            "record::id(source) AS source FROM code_ref WITH INDEX code_ref_name "
            f"WHERE project = $p AND name IN $names AND verb = $verb AND {_valid(as_of)} "
            "ORDER BY path, line",
            {"p": rid("project", project_id), "names": list(names), "verb": verb, "as_of": as_of},
        )
        return rows[0] or []

    async def refs_from(
        self, sources: Sequence[str], verb: str, as_of: datetime | None = None
    ) -> list[dict[str, Any]]:
        """Unsettled references made in these symbols or files."""
        if not sources:
            return []
        rows = await self.query(
            "SELECT name, owner, path, line, paths, record::id(source) AS source FROM code_ref "
            f"WITH INDEX code_ref_source WHERE source IN $ids AND verb = $verb AND {_valid(as_of)} "
            "ORDER BY name, line",
            {"ids": [rid("entity", i) for i in sources], "verb": verb, "as_of": as_of},
        )
        return rows[0] or []

    async def symbols_named(
        self, project_id: str, names: Sequence[str], as_of: datetime | None = None
    ) -> list[dict[str, Any]]:
        """Symbols a file of the project declares (valid DEFINES) whose last name part is one
        of `names`: the candidates of a guess by name."""
        if not names:
            return []
        rows = await self.query(
            "SELECT record::id(out) AS id, target AS key, path, line, name FROM defines "
            f"WHERE project = $p AND {_valid(as_of)} AND "
            "array::last(string::split(name, '.')) IN $names ORDER BY key",
            {"p": rid("project", project_id), "names": list(names), "as_of": as_of},
        )
        return rows[0] or []

    async def entities_by_key(self, kind: str, keys: Sequence[str]) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT record::id(id) AS id, kind, key, name FROM entity "
            "WHERE kind = $kind AND key IN $keys",
            {"kind": kind, "keys": list(keys)},
        )
        return rows[0] or []

    async def symbols_of_files(
        self, ids: Sequence[str], as_of: datetime | None = None
    ) -> list[dict[str, Any]]:
        """What these files declare: symbol id, key, name and line."""
        return await self.graph_edges("defines", "in", ids, as_of, limit=2000)

    async def write_changes_with(
        self, project_id: str, pairs: list[dict[str, Any]], head: str, seen: list[str]
    ) -> None:
        """Add counts to CHANGES_WITH pairs and record the history read up to `head` (one
        writer per project: its co-change job)."""
        ids = [rid(CHANGES_WITH.table, p["id"]) for p in pairs]
        before = (
            await self.query("SELECT record::id(id) AS id, count, last_at FROM $ids", {"ids": ids})
        )[0] or []
        known = {row["id"]: row for row in before}
        rows = []
        for pair in pairs:
            old = known.get(pair["id"])
            rows.append(
                pair
                | {
                    "count": round(pair["count"] + (old["count"] if old else 0.0), 4),
                    "last_at": max(pair["last_at"], old["last_at"]) if old else pair["last_at"],
                }
            )
        await self.query(
            f"""
            BEGIN;
            INSERT RELATION INTO {CHANGES_WITH.table} $pairs.map(|$p| {{
                id: type::record("{CHANGES_WITH.table}", $p.id),
                in: type::record("entity", $p.a), out: type::record("entity", $p.b),
                project: $project, count: $p.count, last_at: $p.last_at,
                valid_from: $p.last_at }})
                ON DUPLICATE KEY UPDATE count = $input.count, last_at = $input.last_at
                RETURN NONE;
            UPSERT $state SET head = $head, seen = $seen, updated_at = time::now();
            COMMIT;
            """,
            {
                "pairs": rows,
                "project": rid("project", project_id),
                "state": rid("cochange_state", project_id),
                "head": head,
                "seen": seen,
            },
        )

    async def cochange_state(self, project_id: str) -> dict[str, Any] | None:
        rows = await self.query(
            "SELECT head, seen FROM $s", {"s": rid("cochange_state", project_id)}
        )
        return rows[0][0] if rows[0] else None
