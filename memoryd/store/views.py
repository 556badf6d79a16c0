"""Graph reads behind `history` and `session`: actions on an entity, a session's events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memoryd.store.base import StoreBase, rid
from memoryd.store.blobs import BODY, whole_texts
from memoryd.vocabulary import HISTORY_EDGE_TABLES, REPLAY_EDGE_TABLES

# What a verb edge says, as the history and session views show it.
_EDGE_FIELDS = (
    "string::uppercase(meta::tb(id)) AS verb, out.kind AS target_kind, "
    "out.key ?? record::id(out) AS target, outcome, exit_code, reason, tool, detail, event_time"
)
_HISTORY = ", ".join(HISTORY_EDGE_TABLES)
_REPLAY = ", ".join(REPLAY_EDGE_TABLES)


class ViewQueries(StoreBase):
    async def file_actions(self, entity_key: str) -> list[dict[str, Any]]:
        """Edges of sessions' actions on one entity (by its record key), newest first."""
        rows = await self.query(
            f"SELECT {_EDGE_FIELDS}, code_hash, out.project AS project, session, in.seq AS seq "
            f"FROM $e<-({_HISTORY}) "
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
            "in.seq AS seq FROM triggered WHERE session = $s ORDER BY seq",
            {"s": rid("session", session_id)},
        )
        return rows[0] or []

    async def session_memories(self, session_id: str) -> list[dict[str, Any]]:
        """A session's memories in file order, each with its outgoing action edges."""
        rows = await self.query(
            f"SELECT id, seq, kind, tool, content, {BODY}, event_time, (SELECT {_EDGE_FIELDS} "
            f"FROM $parent.id->({_REPLAY})) "
            "AS edges "
            "FROM memory WHERE session = $s ORDER BY seq",
            {"s": rid("session", session_id)},
        )
        return whole_texts(rows[0] or [])
