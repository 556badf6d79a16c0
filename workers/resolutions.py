"""What fixed an error, read off the graph: RESOLVED_BY edges (memoryd/vocabulary.py).

A failure is resolved when the action that failed (the same verb on the same target: the
`pytest` command, the Edit of `app.py`) succeeds later in the same session. The fix is that
successful call, with the files the session modified successfully in between. One rule, so
ingest (after each batch) and migration step 027 (every stored session) derive the same
edges, and deriving them again changes nothing (the edge id is the error and the fixing call).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memoryd import vocabulary
from memoryd.ids import split_file_key
from memoryd.store import Ref, Store

_OK, _ERROR = "ok", "error"


def _path(action: dict[str, Any]) -> str:
    """A file entity's key is `<project>:<path>`; outside every project it is the path."""
    return split_file_key(action["target"])[1] if action.get("project") else action["target"]


def resolutions(
    session: str, actions: Sequence[dict[str, Any]], triggers: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """RESOLVED_BY rows for one session. `actions`: its action edges (`memory`, `seq`,
    `verb`, `target`, `project`, `outcome`, `detail`, `event_time`); `triggers`: its TRIGGERED
    edges (`memory`, `seq`, `error`: the error entity's record key, `event_time`)."""
    ordered = sorted(actions, key=lambda a: a["seq"])
    rows: dict[str, dict[str, Any]] = {}
    for trigger in triggers:
        failed = {
            (a["verb"], a["target"], a.get("detail"))
            for a in ordered
            if a["memory"] == trigger["memory"] and a["outcome"] == _ERROR
        }
        later = [a for a in ordered if a["seq"] > trigger["seq"] and a["outcome"] == _OK]
        # The very same command line succeeding is the surest fix; else the same program.
        fix = next((a for a in later if (a["verb"], a["target"], a.get("detail")) in failed), None)
        wanted = {(verb, target) for verb, target, _ in failed}
        fix = fix or next((a for a in later if (a["verb"], a["target"]) in wanted), None)
        if fix is None:
            continue
        files = _modified_between(ordered, trigger["seq"], fix["seq"])
        key = vocabulary.RESOLVED_BY.row_id(trigger["error"], fix["memory"])
        rows[key] = {
            "id": Ref(vocabulary.RESOLVED_BY.table, key),
            "in": Ref("entity", trigger["error"]),
            "out": Ref("memory", fix["memory"]),
            "session": Ref("session", session),
            # Where it failed, by place (a record link here would be one more reference for
            # export and import to carry).
            "failed_seq": trigger["seq"],
            "failed_at": trigger.get("event_time"),
            "files": files,
            "verb": fix["verb"],
            "target": fix["target"],
            "detail": fix.get("detail"),
            "event_time": fix.get("event_time"),
        }
    return list(rows.values())


def _modified_between(actions: Iterable[dict[str, Any]], after: int, until: int) -> list[str]:
    files: list[str] = []
    for a in actions:
        modified = a["verb"] == vocabulary.MODIFIES.name and a["outcome"] == _OK
        if modified and after < a["seq"] <= until and _path(a) not in files:
            files.append(_path(a))
    return files


async def resolve_sessions(store: Store, sessions: Iterable[str]) -> int:
    """Derive and write the RESOLVED_BY edges of these sessions; returns how many."""
    written = 0
    for session in sorted(set(sessions)):
        triggers = await store.session_triggers(session)
        if not triggers:
            continue  # most sessions: nothing failed, one cheap query
        rows = resolutions(session, await store.session_actions(session), triggers)
        await store.write_resolutions(rows)
        written += len(rows)
    return written
