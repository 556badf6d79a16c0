"""Reads behind the agent-facing calls: records by id, a stretch of a session around a memory,
and what happened lately in a project (sessions, their goals, edits and failures)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memoryd.store.base import StoreBase, plain, rid
from memoryd.store.blobs import BODY, whole_texts
from memoryd.vocabulary import ACTION_VERBS, edge

# The agent of the sessions that hold agent-written notes (workers/notes.py).
NOTES_AGENT = "memoryd"
# The verb edges whose outcome says whether an action worked (a read of a missing file, a
# failed command, an edit that did not apply).
_OUTCOME_TABLES = tuple(edge(verb).table for verb in ACTION_VERBS)


class RecallQueries(StoreBase):
    async def chunks_by_key(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT id, project, path, language, chunk_type, name, parent_name, start_line, "
            "end_line, content, valid_until FROM $ids",
            {"ids": [rid("code_chunk", k) for k in keys]},
        )
        return rows[0] or []

    async def memories_by_key(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT id, session, session.project AS project, seq, kind, tool, content, "
            f"{BODY}, event_time, pinned, valid_until FROM $ids",
            {"ids": [rid("memory", k) for k in keys]},
        )
        return whole_texts(rows[0] or [])

    async def goals_by_key(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        rows = await self.query(
            "SELECT id, session, session.project AS project, memory, memory.seq AS seq, intent, "
            "event_time FROM $ids",
            {"ids": [rid("goal", k) for k in keys]},
        )
        return rows[0] or []

    async def memory_window(self, session_key: str, first: int, last: int) -> list[dict[str, Any]]:
        """A session's memories with `first <= seq <= last`, in file order."""
        rows = await self.query(
            f"SELECT id, seq, kind, tool, content, {BODY}, event_time FROM memory "
            "WHERE session = $s AND seq >= $first AND seq <= $last ORDER BY seq",
            {"s": rid("session", session_key), "first": first, "last": last},
        )
        return whole_texts(rows[0] or [])

    async def session_projects(self, session_keys: Sequence[str]) -> dict[str, str | None]:
        rows = await self.query(
            "SELECT record::id(id) AS session, project FROM $ids",
            {"ids": [rid("session", k) for k in sorted(set(session_keys))]},
        )
        return {row["session"]: plain(row.get("project")) for row in rows[0] or []}

    async def recent_sessions(
        self, project_key: str | None, since: datetime, limit: int
    ) -> list[dict[str, Any]]:
        """Top-level agent sessions (subagents are part of their parent; notes sessions are
        not agents' work) active since `since`, newest first, with their goals in order; all
        projects when `project_key` is None."""
        where = "project = $p AND " if project_key else ""
        rows = await self.query(
            "SELECT record::id(id) AS session, agent, project, cwd, "
            "git_branch, started_at, ended_at, (ended_at ?? started_at) AS active_at, "
            "(SELECT VALUE intent FROM ->has_goal->goal ORDER BY event_time) AS goals "
            f"FROM session WHERE {where}parent IS NONE AND agent != $notes "
            "AND (ended_at ?? started_at) >= $since "
            "ORDER BY active_at DESC LIMIT $limit",
            {
                "p": rid("project", project_key) if project_key else None,
                "since": since,
                "limit": limit,
                "notes": NOTES_AGENT,
            },
        )
        return rows[0] or []

    async def recent_notes(
        self, session_key: str, since: datetime, limit: int
    ) -> list[dict[str, Any]]:
        """Notes agents wrote in one notes session since `since`, newest first."""
        rows = await self.query(
            f"SELECT id, kind, content, {BODY}, event_time, pinned FROM memory "
            "WHERE session = $s AND event_time >= $since ORDER BY event_time DESC LIMIT $limit",
            {"s": rid("session", session_key), "since": since, "limit": limit},
        )
        return whole_texts(rows[0] or [])

    async def session_outcomes(self, session_keys: Sequence[str]) -> list[dict[str, Any]]:
        """Every action with an outcome in these sessions and their subagents: what it
        touched, how it went, and the message of an error it triggered."""
        if not session_keys:
            return []
        parents = [rid("session", k) for k in session_keys]
        children = await self.query(
            "SELECT VALUE id FROM session WHERE parent INSIDE $ids", {"ids": parents}
        )
        sessions = [*parents, *(children[0] or [])]
        # By the session each edge carries (schema 024 indexes it), one table at a time.
        rows = await self.query(
            "; ".join(
                "SELECT string::uppercase(meta::tb(id)) AS verb, out.kind AS target_kind, "
                "out.key AS target, out.project AS project, outcome, exit_code, tool, detail, "
                "event_time, code_hash, session, in.seq AS seq, "
                "(SELECT VALUE message FROM $parent.in->triggered LIMIT 1)[0] AS message "
                f"FROM {table} WHERE session = $s{i}"
                for i in range(len(sessions))
                for table in _OUTCOME_TABLES
            ),
            {f"s{i}": s for i, s in enumerate(sessions)},
        )
        return [row for result in rows for row in result or []]
