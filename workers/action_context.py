"""Query jobs behind the hooks at the moment of action (memoryd/agent/hooks.py): what the graph
knows about a file an agent is about to edit, and about a failure it just met.

Both answer only from one project's sessions (the hook's repository), leave out the asking
session, and return facts; the hook words and caps them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memoryd import agent_shared as agent
from memoryd.anchors import action_states, anchor_states, anchor_text
from memoryd.ids import entity_id, split_file_key
from memoryd.store import plain
from memoryd.vocabulary import AGENT_MEMORY_KINDS, ERROR, MODIFIES
from workers.context import JobContext
from workers.graph_views import co_changed
from workers.stages.entities import canonical_error, canonical_file

# Earlier sessions, notes and resolutions one answer holds at most (the hook's budget is ~600
# characters: more would never be shown).
MAX_SESSIONS = 3
MAX_NOTES = 3
MAX_RESOLUTIONS = 2
# The failures after an edit one session's line names at most (the latest distinct ones).
FAILURES_PER_SESSION = 2
# Files changed with the edited one that the hook names at most, and how many (weighted)
# commits changed both before it says so: once is chance, not "usually".
MAX_CO_CHANGED = 3
MIN_CO_CHANGES = 2.0
# The other files one session's line names as edited with this one, at most (the rest counted).
MAX_EDITED_WITH = 3


async def file_context(
    ctx: JobContext, project: str, cwd: str, path: str, session: str
) -> dict[str, Any]:
    """The earlier sessions of `project` that edited `path` (newest first: goal, agent, when,
    how the file stands against what the session's last edit left, the other files it
    modified, and the last few distinct failures that followed the edit in that session with
    what fixed each, if anything did; only those sessions' edits and those failures' fixes
    are read), the notes and
    decisions agents linked to the file (with how the code they name stands), and the files
    the history usually changes with it. Empty when there are none."""
    store = ctx["store"]
    projects = [(p["id"], p["root"]) for p in await store.projects()]
    entity = canonical_file(path, cwd, projects)
    if entity is None or entity.project_id != project:
        return {}
    key = entity_id(entity.kind, entity.key)
    last_edit = {
        r["session"]: r.get("last_at") or ""
        for r in map(plain, await store.file_edit_sessions(key))
        if r["session"] != session
    }
    rows = {
        r["session"]: r
        for r in map(plain, await store.session_goals(sorted(last_edit)))
        if r.get("project") == project
    }
    newest = sorted(rows, key=lambda s: last_edit[s], reverse=True)[:MAX_SESSIONS]
    first_edit: dict[str, int] = {}
    last_ok: dict[str, dict[str, Any]] = {}
    for e in map(plain, await store.file_modifications(key, newest)):
        first_edit.setdefault(e["session"], e["seq"])
        if e.get("outcome") == "ok":
            last_ok[e["session"]] = e
    failures: dict[str, list[dict[str, Any]]] = {}
    for f in map(plain, await store.failures_in(newest)):
        if f["seq"] > first_edit[f["session"]]:
            failures.setdefault(f["session"], []).append(f)
    shown = {s: _distinct(failures.get(s, []))[-FAILURES_PER_SESSION:] for s in newest}
    # What fixed each failure shown, if anything did: only those, each its first fix.
    asked = [f for s in newest for f in shown[s]]
    fixes = await store.first_fixes(
        [(f["error"], _time(f.get("event_time"))) for f in asked], project
    )
    for f, fix in zip(asked, fixes, strict=True):
        f["fixed"] = _fix(fix)
    # How the file stands against what each session's last successful edit left.
    left = [
        {**last_ok[s], "verb": MODIFIES.name, "target": entity.key, "project": project}
        for s in newest
        if s in last_ok
    ]
    code = {
        a["session"]: anchor_text([state]) if state else ""
        for a, state in zip(left, await action_states(store, left), strict=True)
    }
    # What else each session modified: the file an agent edits next is most often one an
    # earlier session edited together with this one.
    others: dict[str, list[dict[str, Any]]] = {}
    for f in map(plain, await store.session_files(newest)):
        owner, rel = split_file_key(f["target"] or "")
        if f["target"] != entity.key and owner == project and rel:
            others.setdefault(f["session"], []).append({**f, "path": rel})
    sessions = [
        {
            "session": s,
            "agent": rows[s].get("agent"),
            "goal": rows[s].get("goal"),
            "last_edit": last_edit[s],
            "anchor": code.get(s) or None,
            "edited_with": edited_with(others.get(s, [])),
            "failures": [
                {
                    "name": f["name"],
                    "seq": f["seq"],
                    "event_time": f.get("event_time"),
                    "fixed": f["fixed"],
                }
                for f in shown[s]
            ],
        }
        for s in newest
    ]
    found = [
        n
        for n in map(plain, await store.file_notes(key, AGENT_MEMORY_KINDS))
        if n.get("project") == project
    ][:MAX_NOTES]
    states = await anchor_states(store, [n["id"] for n in found])
    notes = [
        {
            "id": agent.qualified("memory", n["id"]),
            "kind": n["kind"],
            "text": n["content"],
            "event_time": n.get("event_time"),
            "anchor": anchor_text(states.get(n["id"], [])) or None,
        }
        for n in found
    ]
    # Files the repository's history changes together with this one, often enough to say
    # "usually" (CHANGES_WITH, workers/cochange.py).
    usually = [
        c for c in await co_changed(store, [key], MAX_CO_CHANGED) if c["count"] >= MIN_CO_CHANGES
    ]
    if not sessions and not notes and not usually:
        return {}
    return {
        "file": split_file_key(entity.key)[1],
        "sessions": sessions,
        "notes": notes,
        "changes_with": usually,
    }


async def error_context(ctx: JobContext, project: str, text: str, session: str) -> dict[str, Any]:
    """Where the error of this failure output (its signature, workers/stages/entities.py) was seen
    before in `project`, and what fixed it there. Empty when it was never seen before."""
    store = ctx["store"]
    error = canonical_error(text)
    key = entity_id(ERROR, error.key)
    seen = [
        plain(o)
        for o in await store.error_occurrences(key)
        if plain(o.get("project")) == project and plain(o["session"]) != session
    ]
    if not seen:
        return {}
    fixes = [
        {k: r.get(k) for k in ("session", "files", "verb", "detail", "event_time")}
        for r in map(plain, await store.resolutions_of([key]))
        if r.get("project") == project and r["session"] != session
    ]
    return {
        "error": error.name,
        "signature": error.key,
        "seen": seen[-MAX_SESSIONS:],
        "times": len(seen),
        "resolutions": fixes[-MAX_RESOLUTIONS:][::-1],
    }


def edited_with(files: list[dict[str, Any]]) -> dict[str, Any]:
    """The files a session edited most (then first, then by path: the same answer wherever
    the repository and the transcripts are), at most MAX_EDITED_WITH, and how many more."""
    files = sorted(files, key=lambda f: (-f["edits"], f["first_at"] or "", f["path"]))
    named = [f["path"] for f in files[:MAX_EDITED_WITH]]
    return {"files": named, "more": len(files) - len(named)}


def _distinct(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One failure per error (its last), in order: a test run failing five times the same
    way is one thing to know."""
    last = {f["name"]: f for f in failures}
    return sorted(last.values(), key=lambda f: f["seq"])


def _time(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None


def _fix(found: dict[str, Any] | None) -> dict[str, Any] | None:
    if found is None:
        return None
    fix = plain(found)
    return {k: fix.get(k) for k in ("session", "files", "detail", "event_time")}
