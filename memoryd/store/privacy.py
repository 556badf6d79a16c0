"""What `memoryd forget` selects (a session, a project, a path glob, everything before a time)
as row references for the one deletion path (store/forget.py), and the sessions it forgot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from memoryd.store.base import Ref, StoreBase, key_of, now, path_key, rid, to_record
from memoryd.vocabulary import MEMORY_FILE_EDGE_TABLES


def _refs(rows: list[Any] | None) -> list[Ref]:
    return [Ref(str(r.table_name), key_of(r)) for r in rows or []]


# The rows of a set of sessions ($sessions): the sessions, their memories and goals, and the
# summaries that title them (a summary names the memory it follows by its source id); with
# `$own`, the other rows a scope takes.
_SESSION_ROWS = """
    LET $memories = SELECT VALUE id FROM memory WHERE session INSIDE $sessions;
    LET $goals = SELECT VALUE id FROM goal WHERE session INSIDE $sessions;
    LET $leaves = SELECT VALUE source_id FROM memory WHERE session INSIDE $sessions
        AND source_id IS NOT NONE;
    LET $summaries = SELECT VALUE id FROM summary WHERE leaf_uuid INSIDE $leaves;
    RETURN {
        rows: array::distinct(array::flatten([$own, $sessions, $memories, $goals, $summaries])),
        sessions: $sessions
    };
"""


class PrivacyQueries(StoreBase):
    async def _scope(self, select: str, params: dict[str, Any]) -> tuple[list[Ref], list[str]]:
        """`select` sets $sessions and $own; returns the rows and the session ids."""
        found = (await self.query(select + _SESSION_ROWS, params))[-1]
        return _refs(found["rows"]), [key_of(s) for s in found["sessions"]]

    async def session_scope(self, session_id: str) -> tuple[list[Ref], list[str]]:
        """A session with its subagent sessions."""
        return await self._scope(
            """
            LET $s = type::record('session', $key);
            LET $sessions = array::concat((SELECT VALUE id FROM session WHERE id = $s),
                (SELECT VALUE id FROM session WHERE parent = $s));
            LET $own = [];
            """,
            {"key": session_id},
        )

    async def project_scope(self, project_id: str) -> tuple[list[Ref], list[str]]:
        """A project's sessions, code, files, entities and the project itself."""
        return await self._scope(
            """
            LET $p = type::record('project', $key);
            LET $sessions = SELECT VALUE id FROM session WHERE project = $p;
            LET $own = array::flatten([
                (SELECT VALUE id FROM code_chunk WHERE project = $p),
                (SELECT VALUE id FROM file_state WHERE project = $p),
                (SELECT VALUE id FROM entity WHERE project = $p),
                (SELECT VALUE id FROM project WHERE id = $p)]);
            """,
            {"key": project_id},
        )

    async def before_scope(self, before: datetime) -> tuple[list[Ref], list[str]]:
        """Sessions over before `before` (whole; one with no end, started before then),
        memories and goals of before then, and code versions retired by then. A row with no
        time stays (NONE sorts before every time: `x < $before` alone would take it)."""
        return await self._scope(
            """
            LET $sessions = SELECT VALUE id FROM session
                WHERE (ended_at ?? started_at) IS NOT NONE AND (ended_at ?? started_at) < $before;
            LET $own = array::flatten([
                (SELECT VALUE id FROM memory WHERE event_time IS NOT NONE AND event_time < $before),
                (SELECT VALUE id FROM goal WHERE event_time IS NOT NONE AND event_time < $before),
                (SELECT VALUE id FROM code_chunk
                    WHERE valid_until IS NOT NONE AND valid_until < $before)]);
            """,
            {"before": before},
        )

    async def path_scope(self, roots: dict[str, str], matches: Callable[[str], bool]) -> list[Ref]:
        """Code rows and file entities whose absolute path `matches`: the file as memoryd
        knows it, its chunks, and (with the entity) every action edge that named it."""
        found: list[Ref] = []
        rows = await self.query(
            "SELECT id, project, path FROM code_chunk;"
            "SELECT id, project, path FROM file_state;"
            "SELECT id, key FROM entity WHERE kind = 'file';"
        )
        for table_rows in rows[:2]:
            for row in table_rows or []:
                root = roots.get(key_of(row["project"]))
                if root is not None and matches(f"{root.rstrip('/')}/{row['path']}"):
                    found.append(Ref(str(row["id"].table_name), key_of(row["id"])))
        for row in rows[2] or []:
            key = str(row["key"])
            project, sep, rel = key.partition(":")
            absolute = f"{roots[project].rstrip('/')}/{rel}" if sep and project in roots else key
            if matches(absolute):
                found.append(Ref("entity", key_of(row["id"])))
        return found

    async def memories_about(self, files: list[Ref]) -> list[Ref]:
        """The memories that are about these file entities alone: every file their actions
        and mentions name (at least one) is among `files`; and the results of those tool
        calls (same session, same call id), which carry what the call read or wrote. A memory
        that also names another file stays (its edges to `files` go with the entities)."""
        if not files:
            return []
        edges = ", ".join(MEMORY_FILE_EDGE_TABLES)
        found = (
            await self.query(
                f"""
                LET $touching = array::distinct(array::flatten(
                    (SELECT VALUE <-({edges})<-memory FROM $files)));
                LET $only = SELECT VALUE id FROM $touching WHERE array::len(array::complement(
                    array::distinct(->({edges})->entity[
                        WHERE kind = 'file']), $files)) = 0;
                LET $calls = SELECT session, call_id FROM $only WHERE call_id IS NOT NONE;
                LET $results = SELECT VALUE id FROM memory
                    WHERE call_id INSIDE $calls.call_id AND session INSIDE $calls.session;
                RETURN array::distinct(array::concat($only, $results));
                """,
                {"files": to_record(files)},
            )
        )[-1]
        return _refs(found)

    async def remember_forgotten(self, sessions: dict[str, str | None]) -> None:
        """Session id -> the transcript it came from."""
        await self.query(
            "FOR $s IN $rows { UPSERT $s.id CONTENT $s; };",
            {
                "rows": [
                    {"id": rid("forgotten_session", s), "source": src, "forgotten_at": now()}
                    for s, src in sessions.items()
                ]
            },
        )

    async def set_cursor_state(self, path: str, state: dict[str, Any]) -> None:
        await self.query(
            "UPDATE $id SET state = $state",
            {"id": rid("transcript_cursor", path_key(path)), "state": state},
        )

    async def skip_transcript(self, path: str, inode: int, size: int) -> None:
        """Move a transcript's cursor to its end (what was written while capture was paused
        is left unread); a file never read gets a cursor there."""
        await self.query(
            "UPSERT $id SET path = $path, inode = $inode, offset = $size, size = $size, "
            "updated_at = time::now()",
            {
                "id": rid("transcript_cursor", path_key(path)),
                "path": path,
                "inode": inode,
                "size": size,
            },
        )

    async def session_sources(self, sessions: Iterable[str]) -> dict[str, str | None]:
        rows = (
            await self.query(
                "SELECT record::id(id) AS key, source FROM $ids",
                {"ids": [rid("session", s) for s in sessions]},
            )
        )[0]
        return {r["key"]: r.get("source") for r in rows or []}

    async def remember_forgotten_rows(self, refs: Iterable[Ref]) -> None:
        """Memories and goals removed on request, so a transcript read again skips them."""
        ids = [rid("forgotten_record", f"{r.table}:{r.key}") for r in refs]
        if ids:
            await self.query(
                "FOR $id IN $ids { UPSERT $id SET forgotten_at = time::now(); };", {"ids": ids}
            )

    async def forgotten_rows(self, refs: Iterable[Ref]) -> set[Ref]:
        """Which of these memories and goals were forgotten."""
        ids = [rid("forgotten_record", f"{r.table}:{r.key}") for r in set(refs)]
        if not ids:
            return set()
        rows = (await self.query("SELECT VALUE record::id(id) FROM $ids", {"ids": ids}))[0]
        return {Ref(*str(r).split(":", 1)) for r in rows or []}

    async def forgotten_sessions(self, sessions: Iterable[str]) -> set[str]:
        """Which of these session ids were forgotten."""
        ids = [rid("forgotten_session", s) for s in set(sessions)]
        if not ids:
            return set()
        rows = (await self.query("SELECT VALUE record::id(id) FROM $ids", {"ids": ids}))[0]
        return {str(r) for r in rows or []}
