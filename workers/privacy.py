"""`memoryd forget --session | --project | --path | --before`: a scope resolved to row
references and deleted through the one deletion path (workers/forget.py). Forgotten sessions
are remembered by id, so tailing their transcript never brings them back."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
from datetime import UTC, datetime
from typing import Any

from memoryd.errors import InvalidRequest, NotFound
from memoryd.searchindex.search import resolve_project
from memoryd.watch.transcripts import transcript_files
from workers.context import JobContext
from workers.forget import erase_traces, forget_rows, per_table
from workers.ingest import is_forgotten, scrub_state

SCOPES = ("session", "project", "path", "before")


async def forget_scope(
    ctx: JobContext, scope: str, value: str, dry_run: bool = False
) -> dict[str, Any]:
    started = datetime.now(UTC)
    store = ctx["store"]
    sessions: list[str] = []
    if scope == "session":
        # A prefix also matches the subagent sessions ("<id>:agent-…"), which go with it.
        found = await store.find_sessions(value)
        matches = [m for m in found if ":" not in m] or found
        if len(matches) != 1:
            raise (
                NotFound(f"no session {value!r}")
                if not matches
                else InvalidRequest(f"{value!r} names {len(matches)} sessions; give more of the id")
            )
        refs, sessions = await store.session_scope(matches[0])
    elif scope == "project":
        refs, sessions = await store.project_scope(await resolve_project(store, value))
    elif scope == "path":
        roots = {p["id"]: p["root"] for p in await store.projects()}
        refs = await store.path_scope(roots, lambda path: fnmatch.fnmatchcase(path, value))
        refs += await store.memories_about([r for r in refs if r.table == "entity"])
    elif scope == "before":
        try:
            refs, sessions = await store.before_scope(datetime.fromisoformat(value))
        except ValueError:
            raise InvalidRequest(f"--before: not an ISO-8601 time: {value!r}") from None
    else:
        raise InvalidRequest(f"unknown scope {scope!r}; choose from {', '.join(SCOPES)}")
    if dry_run:
        return {"dry_run": True, "sessions": sessions, "removed": per_table(refs)}
    # Remembered first: a transcript tailed while this runs skips them already.
    sources = await store.session_sources(sessions)
    await store.remember_forgotten(sources)
    gone = functools.partial(is_forgotten, set(sessions))
    for path in {p for p in sources.values() if p}:
        cursor = await store.transcript_cursor(path)
        if cursor is not None and cursor.get("state"):
            await store.set_cursor_state(path, scrub_state(cursor["state"], gone))
    deleted = await forget_rows(ctx, refs)
    await erase_traces(ctx, deleted, started)
    return {"dry_run": False, "sessions": sessions, "removed": per_table(deleted)}


async def changed_transcripts(ctx: JobContext, since: float) -> list[str]:
    """The transcripts the daemon follows (its own folders, which the asking shell's settings
    need not name) changed since `since` (a unix time): what `memoryd resume` catches up on or
    skips."""
    changed = []
    for path in transcript_files(ctx["settings"].transcript_roots):
        with contextlib.suppress(OSError):  # gone meanwhile: nothing to read or skip
            if os.stat(path).st_mtime >= since:
                changed.append(path)
    return changed


async def skip_transcripts(ctx: JobContext, paths: list[str]) -> int:
    """`memoryd resume` without --catch-up: these transcripts' cursors to their ends."""
    skipped = 0
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue
        await ctx["store"].skip_transcript(path, info.st_ino, info.st_size)
        skipped += 1
    return skipped
