"""Reads and writes behind the context at the moment of action (memoryd/agent/hooks.py): what
earlier sessions did to a file before an edit, and where an error was seen and what fixed it after a
failure; and the RESOLVED_BY edges that say the latter (workers/resolutions.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memoryd.store.base import StoreBase, rid, to_records
from memoryd.store.blobs import BODY, whole_texts
from memoryd.vocabulary import ACTION_VERBS, RESOLVED_BY, edge

_ACTION_TABLES = tuple(edge(verb).table for verb in ACTION_VERBS)
_RESOLUTION_FIELDS = (
    "record::id(in) AS error, record::id(session) AS session, files, verb, detail, "
    "event_time, failed_at"
)


class ActionQueries(StoreBase):
    async def session_triggers(self, session_key: str) -> list[dict[str, Any]]:
        """A session's failures: the failing call, its place and the error's record key."""
        rows = await self.query(
            "SELECT record::id(in) AS memory, in.seq AS seq, record::id(out) AS error, "
            "event_time FROM triggered WHERE session = $s",
            {"s": rid("session", session_key)},
        )
        return rows[0] or []

    async def session_actions(self, session_key: str) -> list[dict[str, Any]]:
        """A session's reads, edits and commands with their outcomes (by the session each edge
        carries, schema 024)."""
        rows = await self.query(
            "; ".join(
                "SELECT record::id(in) AS memory, in.seq AS seq, "
                "string::uppercase(meta::tb(id)) AS verb, out.key AS target, "
                "out.project AS project, outcome, detail, event_time "
                f"FROM {table} WHERE session = $s"
                for table in _ACTION_TABLES
            ),
            {"s": rid("session", session_key)},
        )
        return [row for result in rows for row in result or []]

    async def write_resolutions(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            await self.query(
                f"INSERT RELATION INTO {RESOLVED_BY.table} $rows ON DUPLICATE KEY UPDATE "
                "files = $input.files, detail = $input.detail RETURN NONE",
                {"rows": to_records(list(rows))},
            )

    async def failed_sessions(self) -> list[str]:
        """Every session with a failure (migration step 027 derives their resolutions)."""
        found = await self.query(
            "SELECT record::id(session) AS s FROM triggered WHERE session IS NOT NONE GROUP BY s"
        )
        return sorted(str(row["s"]) for row in found[0] or [])

    async def file_edit_sessions(self, entity_key: str) -> list[dict[str, Any]]:
        """The sessions that edited one file, each with its last edit's time: one row per
        session, however often each edited it (a hook reads the edits of the newest few)."""
        rows = await self.query(
            "SELECT record::id(session) AS session, time::max(event_time) AS last_at "
            "FROM $e<-modifies WHERE session IS NOT NONE GROUP BY session",
            {"e": rid("entity", entity_key)},
        )
        return rows[0] or []

    async def file_modifications(
        self, entity_key: str, session_keys: Sequence[str]
    ) -> list[dict[str, Any]]:
        """Every edit of one file (successful or not) by these sessions, oldest first (by the
        sessions' index: not every edit of a file many sessions edited)."""
        if not session_keys:
            return []
        rows = await self.query(
            "SELECT record::id(session) AS session, in.seq AS seq, outcome, event_time, "
            "code_hash FROM modifies WITH INDEX modifies_session "
            "WHERE session IN $s AND out = $e ORDER BY event_time",
            {"e": rid("entity", entity_key), "s": [rid("session", k) for k in session_keys]},
        )
        return rows[0] or []

    async def session_files(self, session_keys: Sequence[str]) -> list[dict[str, Any]]:
        """The files each of these sessions modified successfully: one row per session and
        file (its canonical key), with how many edits and the first one's time (grouped in the
        database: a long session's hundreds of edits are not sent over)."""
        if not session_keys:
            return []
        rows = await self.query(
            "SELECT session, target.key AS target, edits, first_at FROM ("
            "SELECT record::id(session) AS session, out AS target, count() AS edits, "
            "time::min(event_time) AS first_at FROM modifies WITH INDEX modifies_session "
            "WHERE session IN $s AND outcome = 'ok' GROUP BY session, target)",
            {"s": [rid("session", k) for k in session_keys]},
        )
        return rows[0] or []

    async def session_goals(self, session_keys: Sequence[str]) -> list[dict[str, Any]]:
        """Each session's agent, project and first goal: no more (a hook waits for it)."""
        rows = await self.query(
            "SELECT record::id(id) AS session, agent, record::id(project) AS project, "
            "(SELECT VALUE intent FROM ->has_goal->goal ORDER BY event_time LIMIT 1)[0] AS goal "
            "FROM $ids",
            {"ids": [rid("session", k) for k in session_keys]},
        )
        return rows[0] or []

    async def failures_in(self, session_keys: Sequence[str]) -> list[dict[str, Any]]:
        """The failures of these sessions: where, which error (its record key and name)."""
        if not session_keys:
            return []
        rows = await self.query(
            "SELECT record::id(session) AS session, in.seq AS seq, record::id(out) AS error, "
            "out.name AS name, tool, event_time FROM triggered WHERE session INSIDE $s",
            {"s": [rid("session", k) for k in session_keys]},
        )
        return rows[0] or []

    async def resolutions_of(self, error_keys: Sequence[str]) -> list[dict[str, Any]]:
        """What fixed these errors, wherever it happened, oldest first."""
        if not error_keys:
            return []
        rows = await self.query(
            f"SELECT {_RESOLUTION_FIELDS}, record::id(session.project) AS project "
            f"FROM {RESOLVED_BY.table} WHERE in INSIDE $e ORDER BY event_time",
            {"e": [rid("entity", k) for k in error_keys]},
        )
        return rows[0] or []

    async def first_fixes(
        self, asked: Sequence[tuple[str, datetime | None]], project: str
    ) -> list[dict[str, Any] | None]:
        """For each (error key, time): the first fix of that error in a session of `project`
        at or after the time (None: any time), or None. One statement each, reading only
        that error's RESOLVED_BY edges."""
        if not asked:
            return []
        statements, params = [], {"p": rid("project", project)}
        for i, (error_key, since) in enumerate(asked):
            params |= {f"e{i}": rid("entity", error_key), f"t{i}": since}
            statements.append(
                f"SELECT {_RESOLUTION_FIELDS} FROM $e{i}->{RESOLVED_BY.table} "
                f"WHERE session.project = $p AND ($t{i} IS NONE OR event_time >= $t{i}) "
                "ORDER BY event_time, session LIMIT 1"
            )
        rows = await self.query("; ".join(statements), params)
        return [(found or [None])[0] for found in rows]

    async def file_notes(self, entity_key: str, kinds: Sequence[str]) -> list[dict[str, Any]]:
        """Memories of these kinds that name one file (MENTIONS), newest first. Read from the
        memories the edges lead to, each once: not field by field through the edge (`in.kind`,
        `in.content`…), which cost twice as much for a file mentioned 180 times."""
        rows = await self.query(
            f"SELECT id, kind, content, {BODY}, event_time, "
            # The project as a record (NONE for a session in no project: record::id would
            # fail on it); plain() gives its key.
            "record::id(session) AS session, session.project AS project "
            "FROM $e<-mentions<-memory WHERE kind INSIDE $kinds ORDER BY event_time DESC",
            {"e": rid("entity", entity_key), "kinds": list(kinds)},
        )
        return whole_texts(rows[0] or [])

    async def error_occurrences(self, error_key: str) -> list[dict[str, Any]]:
        """Where one error was seen: session, agent, project and time, oldest first."""
        rows = await self.query(
            "SELECT record::id(session) AS session, in.seq AS seq, session.agent AS agent, "
            "record::id(session.project) AS project, tool, event_time "
            "FROM $e<-triggered ORDER BY event_time",
            {"e": rid("entity", error_key)},
        )
        return rows[0] or []
