"""Stored tool calls with their edges, read a session and a page at a time, and their edges
replaced in one transaction: what migration step 009 (edges by today's rules) needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memoryd.ids import entity_id
from memoryd.store.base import StoreBase, key_of, now, plain, rid
from memoryd.store.blobs import BODY, whole_texts
from memoryd.store.entities import UPSERT_ENTITIES
from memoryd.store.search import BUMP_GENERATION
from memoryd.vocabulary import ERROR, TRIGGERED


def _outgoing(tables: tuple[str, ...]) -> str:
    return ", ".join(f"->{t}.* AS {t}" for t in tables)


class RederiveQueries(StoreBase):
    async def error_outputs(self, session_key: str) -> dict[str, str]:
        """A session's failed calls: call id -> the output of its (last) `error` memory."""
        rows = (
            await self.query(
                f"SELECT call_id, content, {BODY}, seq FROM memory WHERE session = $s "
                "AND kind = 'error' AND call_id != NONE ORDER BY seq",
                {"s": rid("session", session_key)},
            )
        )[0] or []
        return {row["call_id"]: row["content"] for row in whole_texts(rows)}

    async def call_results(
        self, session_key: str, call_ids: list[str]
    ) -> dict[str, tuple[str, str]]:
        """These calls' answers: call id -> (key, text) of its last `tool_result` memory."""
        rows = (
            await self.query(
                f"SELECT id, call_id, content, {BODY}, seq FROM memory WHERE session = $s "
                "AND kind = 'tool_result' AND call_id INSIDE $calls ORDER BY seq",
                {"s": rid("session", session_key), "calls": call_ids},
            )
        )[0] or []
        return {row["call_id"]: (key_of(row["id"]), row["content"]) for row in whole_texts(rows)}

    async def memories_with_edges(
        self, session_key: str, tables: tuple[str, ...], after: str | None, batch: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a session's memories in id order, those with edges in `tables` (see
        :meth:`call_edges`); and the key to read the next page after (None at the end)."""
        rows = (
            await self.query(
                f"SELECT id, content, {BODY}, call_id, {_outgoing(tables)} FROM memory "
                "WHERE session = $s "
                f"{'AND id > $after ' if after else ''}ORDER BY id LIMIT $batch",
                {
                    "s": rid("session", session_key),
                    "after": rid("memory", after) if after else None,
                    "batch": batch,
                },
            )
        )[0] or []
        calls = [call for call in await self._with_targets(rows, tables) if call["edges"]]
        return calls, (key_of(rows[-1]["id"]) if len(rows) == batch else None)

    async def call_edges(self, keys: list[str], tables: tuple[str, ...]) -> list[dict[str, Any]]:
        """These memories, those that exist, each as {key, content, call_id, edges: [{table,
        key, target: entity row, fields}]} with its edges in `tables`."""
        rows = (
            await self.query(
                f"SELECT id, kind, content, {BODY}, call_id, {_outgoing(tables)} FROM $ids",
                {"ids": [rid("memory", k) for k in keys]},
            )
        )[0] or []
        return await self._with_targets(rows, tables)

    async def _with_targets(
        self, rows: list[dict[str, Any]], tables: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        rows = whole_texts(rows)  # a long text's whole (its blob), not the stored head
        targets = {e["out"] for row in rows for t in tables for e in row.get(t) or []}
        entities: dict[str, dict[str, Any]] = {}
        if targets:
            found = (await self.query("SELECT * FROM $ids", {"ids": sorted(targets, key=str)}))[0]
            entities = {key_of(e["id"]): plain(e) for e in found or []}
        return [
            {
                "key": key_of(row["id"]),
                "kind": row.get("kind"),
                "content": row.get("content") or "",
                "call_id": row.get("call_id"),
                "edges": [
                    {
                        "table": t,
                        "key": key_of(e["id"]),
                        "target": entities[key_of(e["out"])],
                        "fields": {
                            k: key_of(v) if k == "session" else v
                            for k, v in e.items()
                            if k not in ("id", "in", "out")
                        },
                    }
                    for t in tables
                    for e in row.get(t) or []
                    if key_of(e["out"]) in entities
                ],
            }
            for row in rows
            if row.get("id") is not None
        ]

    async def replace_edges(
        self,
        doomed: Iterable[tuple[str, str]],
        edges: dict[str, list[dict[str, Any]]],
        entities: list[dict[str, Any]],
        kinds: dict[str, str] | None = None,
    ) -> None:
        """One transaction: delete the edges `doomed` ((table, key) pairs), upsert the
        entities, insert the edges (table -> rows with key, memory, entity key and fields;
        a `session` field is a session key), and set the kind of the memories in `kinds`
        (the search indexes hold it: the search generation moves, the next start rebuilds
        them)."""
        params: dict[str, Any] = {
            "doomed": [rid(t, k) for t, k in doomed],
            "entities": [
                {
                    **e,
                    "id": rid("entity", entity_id(e["kind"], e["key"])),
                    "project": rid("project", e["project"]) if e.get("project") else None,
                    "first_seen": e.get("first_seen") or now(),
                    "last_seen": e.get("last_seen") or now(),
                }
                for e in entities
            ],
        }
        inserts = []
        for table, rows in edges.items():
            params[f"edge_{table}"] = [
                {
                    **row["fields"],
                    "id": rid(table, row["key"]),
                    "in": rid("memory", row["memory"]),
                    "out": rid("entity", row["entity"]),
                    "session": rid("session", row["fields"]["session"]),
                }
                for row in rows
            ]
            inserts.append(f"INSERT RELATION INTO {table} $edge_{table};")
        if kinds:
            params["kinds"] = [{"id": rid("memory", k), "kind": v} for k, v in kinds.items()]
            inserts.append(
                f"FOR $m IN $kinds {{ UPDATE $m.id SET kind = $m.kind; }}; {BUMP_GENERATION}"
            )
        await self.query(
            f"BEGIN; DELETE $doomed; {UPSERT_ENTITIES} {' '.join(inserts)} COMMIT;", params
        )

    async def error_entities_after(self, after: str | None, batch: int) -> list[str]:
        rows = (
            await self.query(
                f"SELECT VALUE record::id(id) FROM entity WHERE kind = $kind "
                f"{'AND id > $after ' if after else ''}ORDER BY id LIMIT $batch",
                {"kind": ERROR, "after": rid("entity", after) if after else None, "batch": batch},
            )
        )[0] or []
        return list(rows)

    async def aliases_from_failures(self, keys: list[str]) -> None:
        """An error entity's aliases are the lines its failures were read from: the
        messages of the TRIGGERED edges pointing at it."""
        await self.query(
            f"FOR $e IN $ids {{ UPDATE $e SET aliases = array::sort(array::distinct("
            f"(SELECT VALUE message FROM $e<-{TRIGGERED.table} WHERE message != NONE))); }};",
            {"ids": [rid("entity", k) for k in keys]},
        )
