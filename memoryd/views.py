"""Graph views: a file's history across sessions, and a session replayed in order.

Both return one JSON-ready document (documented in README.md) so scripts and tests can check
exact results.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memoryd.agent_shared import qualified
from memoryd.anchors import action_states, anchor_states, anchor_text
from memoryd.errors import InvalidRequest, NotFound
from memoryd.ids import entity_id
from memoryd.store import Store, key_of, plain
from memoryd.vocabulary import AGENT_MEMORY_KINDS, MODIFIES, READS, SPAWNED

# Content shown per event in a session replay; the full text stays in the database.
REPLAY_CHARS = 400


def _session_doc(row: dict[str, Any]) -> dict[str, Any]:
    fields = (
        "agent",
        "cwd",
        "project",
        "git_branch",
        "parent",
        "agent_type",
        "description",
        "started_at",
        "ended_at",
        "goal",
        "title",
        "source",
    )
    return {"session": key_of(row["id"]), **{f: plain(row.get(f)) for f in fields}}


async def history(
    store: Store, kind: str, key: str, project_id: str | None, rel_path: str | None
) -> dict[str, Any]:
    """Every session that read, modified or was denied this file, newest first, with its goal,
    its actions on the file (each read or edit with how the file stands now against what it
    saw or left: `anchor`) and its errors; the notes and decisions agents linked to the file
    (with theirs); then the file's current chunks."""
    actions = [plain(a) for a in await store.file_actions(entity_id(kind, key))]
    retired = (
        plain(await store.last_retired(project_id, rel_path))
        if project_id and rel_path is not None
        else None
    )
    mark_changed_since(actions, retired)
    for action, state in zip(actions, await action_states(store, actions), strict=True):
        # What the action saw or left, against the index now (memoryd/anchors.py); None for
        # a command, a failure, a file no project indexes (then `changed_since` is all).
        action["anchor"] = (anchor_text([state]) or None) if state else None
        # Read for the check only: the document's actions stay as documented.
        action.pop("code_hash", None)
        action.pop("project", None)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for action in actions:
        by_session.setdefault(action.pop("session"), []).append(action)
    sessions = []
    for row in await store.session_rows(list(by_session)):
        doc = _session_doc(row)
        doc["actions"] = sorted(by_session[doc["session"]], key=lambda a: a["seq"])
        doc["errors"] = distinct_errors(await store.session_errors(doc["session"]))
        sessions.append(doc)
    sessions.sort(key=lambda d: max(a["event_time"] or "" for a in d["actions"]), reverse=True)
    chunks = (
        [plain(c) for c in await store.valid_chunks(project_id, rel_path)]
        if project_id and rel_path is not None
        else []
    )
    notes = [plain(n) for n in await store.file_notes(entity_id(kind, key), AGENT_MEMORY_KINDS)]
    states = await anchor_states(store, [n["id"] for n in notes])
    return {
        "file": {"kind": kind, "key": key, "project": project_id, "path": rel_path},
        "sessions": sessions,
        "notes": [
            {
                "id": qualified("memory", n["id"]),
                "kind": n["kind"],
                "text": n["content"],
                "event_time": n.get("event_time"),
                "anchor": anchor_text(states.get(n["id"], [])) or None,
            }
            for n in notes
        ],
        "chunks": chunks,
    }


def mark_changed_since(actions: list[dict[str, Any]], retired: str | None) -> None:
    """`changed_since`: the file changed after this action, so what the session saw or wrote
    is not what is there now: a later MODIFIES by any session, or (after a READS) code of the
    file replaced in the index later. ISO-8601 UTC strings compare in time order."""
    modified = sorted(
        a["event_time"]
        for a in actions
        if a["verb"] == MODIFIES.name and a["outcome"] == "ok" and a["event_time"]
    )
    for action in actions:
        at = action["event_time"] or ""
        later_edit = any(t > at for t in modified)
        later_index = action["verb"] == READS.name and retired is not None and retired > at
        action["changed_since"] = later_edit or later_index


async def session(store: Store, given: str) -> dict[str, Any]:
    """A session replayed in file order: goal, events with their edges, errors, subagents."""
    matches = await store.find_sessions(given)
    # A prefix of a session also matches its subagents ("<id>:agent-…"): the session wins.
    roots = [m for m in matches if all(o == m or o.startswith(m + ":") for o in matches)]
    if roots:
        matches = roots[:1]
    if not matches:
        raise NotFound(f"no session {given!r}")
    if len(matches) > 1:
        raise InvalidRequest(f"{given!r} matches {len(matches)} sessions: {', '.join(matches[:5])}")
    session_id = matches[0]
    [row] = await store.session_rows([session_id])
    doc = _session_doc(row)
    events = []
    for memory in await store.session_memories(session_id):
        event = plain(memory)
        event["id"] = key_of(memory["id"])
        content = event.pop("content")
        event["text"] = content if len(content) <= REPLAY_CHARS else content[:REPLAY_CHARS] + "…"
        events.append(event)
    doc["events"] = events
    doc["errors"] = distinct_errors(await store.session_errors(session_id))
    shown = {e["signature"]: e["message"] for e in doc["errors"]}
    for event in events:
        for edge in event["edges"]:
            if edge["verb"] == "TRIGGERED":  # the failure as it appeared, not its hash
                edge["target"] = shown.get(edge["target"], edge["target"])
    doc["subagents"] = [
        {"session": e["target"], "description": e.get("detail"), "seq": ev["seq"]}
        for ev in events
        for e in ev["edges"]
        if e["verb"] == SPAWNED.name
    ]
    return doc


def distinct_errors(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A session's failures once each (in order of first sighting, rows come by seq): the
    first occurrence's fields, ``message`` as it first appeared, and ``count``."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        known = out.get(row["signature"])
        if known is None:
            out[row["signature"]] = {**plain(row), "count": 1}
        else:
            known["count"] += 1
    return list(out.values())


def edge_counts(events: Iterable[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in events:
        for edge in event["edges"]:
            counts[edge["verb"]] = counts.get(edge["verb"], 0) + 1
    return counts
