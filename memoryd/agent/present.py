"""What an agent reads: the client API's typed results as compact text, cut to a size budget
the same way every time. The MCP tools and the hooks both print through these functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.agent_shared import MIN_BUDGET, Scope, clip, fit, one_line, qualified
from memoryd.results import (
    EditedFiles,
    FileHistory,
    Note,
    RecentActivity,
    Record,
    SearchAnswer,
    SearchResult,
    SessionReplay,
    Timeline,
)

# Characters of one line of a list (a hit, an event, an action).
LINE_CHARS = 240
RECORD_HEAD_CHARS = 200
NO_PROJECT = "(no project)"


def _day(when: str | None) -> str:
    """`2025-11-17 11:30` from an ISO time (provenance needs the when, not the microseconds)."""
    return when[:16].replace("T", " ") if when else "?"


def scope_head(scope: Scope, what: str) -> list[str]:
    where = f"project {scope.project}" if scope.project else "all projects"
    head = [f"{what} — {where}"]
    if scope.note:
        head.append(f"note: {scope.note}")
    return head


def hit_line(hit: SearchResult) -> str:
    ident = qualified(hit.kind, hit.id)
    proj = hit.project or NO_PROJECT
    if hit.path is not None:  # code and docs: a piece of a file
        where = f"{hit.path}:{hit.start_line}-{hit.end_line}"
        return one_line(f"{ident} [{proj}] {where} {hit.name or ''}", LINE_CHARS)
    seq = "" if hit.seq is None else f"#{hit.seq}"
    return one_line(
        f"{ident} [{proj}] session {hit.session}{seq} {hit.name}{code_state(hit.anchor)}: "
        f"{hit.text}",
        LINE_CHARS,
    )


def code_state(anchor: str | None) -> str:
    """` (code current)`, ` (code changed since … (n lines))`, ` (code file deleted)` for a
    memory that points at code (memoryd/anchors.py); nothing for one that does not."""
    return f" (code {anchor})" if anchor else ""


def search_text(query: str, answer: SearchAnswer, max_chars: int) -> str:
    hits = answer.hits
    head = scope_head(Scope(answer.project, answer.note), f"search {query!r}: {len(hits)} hits")
    if not hits:
        head.append("nothing found")
    lines = [hit_line(hit) for hit in hits]
    if hits:
        lines.append("(get(ids) returns the full text of any id above)")
    return fit(head, lines, max_chars, "hits")


def record_text(record: Record) -> str:
    proj = record.get("project") or NO_PROJECT
    flags = "" if record.get("valid", True) else " (no longer current)"
    if record["kind"] == "code":
        end = record.get("chunk_end_line")
        cut = f" (chunk ends at line {end}; cut to the budget)" if record.get("truncated") else ""
        head = (
            f"{record['id']} [{proj}] {record.get('path')}:{record.get('start_line')}-"
            f"{record.get('end_line')} {record.get('name') or ''}{flags}{cut}"
        )
    else:
        pinned = " pinned" if record.get("pinned") else ""
        tool = f" tool {record['tool']}" if record.get("tool") else ""
        head = (
            f"{record['id']} [{proj}] {record['kind']} in session {record.get('session')}"
            f"#{record.get('seq')}{tool} at {_day(record.get('event_time'))}{pinned}{flags}"
            f"{code_state(record.get('anchor'))}"
        )
    return f"{head}\n{record['text']}"


def text_budget(max_chars: int, records: int) -> int:
    """What the records' own text may take of an answer of `max_chars`: each header line
    (id, project, where, when) takes up to RECORD_HEAD_CHARS of it."""
    return max(MIN_BUDGET, max_chars - RECORD_HEAD_CHARS * records)


def get_text(records: Sequence[Record], max_chars: int) -> str:
    """Every record asked for, in order (their text already fits `text_budget`)."""
    return clip("\n".join(record_text(r) for r in records), max_chars)[0]


def _action_line(action: Mapping[str, Any]) -> str:
    outcome = action.get("outcome") or action.get("reason") or ""
    code = f" exit {action['exit_code']}" if action.get("exit_code") not in (None, 0) else ""
    # What the index says of the file against what this call saw or left; without an
    # anchor (a file no project indexes), whether a later edit was seen.
    changed = code_state(action.get("anchor")) or (
        " (file changed since)" if action.get("changed_since") else ""
    )
    detail = f" — {action['detail']}" if action.get("detail") else ""
    return "  " + one_line(
        f"{action['verb']} {outcome}{code} via {action.get('tool') or '?'} at "
        f"{_day(action.get('event_time'))}{changed}{detail}",
        LINE_CHARS,
    )


def history_text(history: FileHistory, max_chars: int) -> str:
    file = history["file"]
    name = f"{file['project']}:{file['path']}" if file.get("project") else file["key"]
    head = [f"file_history {name}: {len(history['sessions'])} sessions touched it"]
    blocks = []
    for s in history["sessions"]:
        lines = [
            one_line(
                f"session {s['session']} ({s.get('agent')}, {_day(s.get('started_at'))}) "
                f"goal: {s.get('goal') or s.get('title') or '-'}",
                LINE_CHARS,
            )
        ]
        lines += [_action_line(a) for a in s.get("actions", [])]
        lines += [
            "  "
            + one_line(f"error #{e.get('seq')}: {e.get('error')}: {e.get('message')}", LINE_CHARS)
            for e in s.get("errors", [])[:3]
        ]
        blocks.append("\n".join(lines))
    blocks += [note_line(n) for n in history.get("notes", [])]
    chunks = history["chunks"]
    if chunks:
        blocks.append(
            "current chunks: "
            + ", ".join(
                f"{c['start_line']}-{c['end_line']} {c['chunk_type']} {c.get('name') or ''}".strip()
                for c in chunks
            )
        )
    return fit(head, blocks, max_chars, "sessions")


def event_line(event: Mapping[str, Any]) -> str:
    """`#seq kind tool [id]: text`; `id` qualified (timeline) or a memory's bare key (session)."""
    ident = event["id"] if ":" in event["id"] else qualified("memory", event["id"])
    tool = f" {event['tool']}" if event.get("tool") else ""
    return one_line(f"#{event['seq']} {event['kind']}{tool} [{ident}]: {event['text']}", LINE_CHARS)


def session_text(replay: SessionReplay, max_chars: int) -> str:
    head = [
        one_line(
            f"session {replay['session']} ({replay.get('agent')}, project "
            f"{replay.get('project') or NO_PROJECT}, {_day(replay.get('started_at'))} to "
            f"{_day(replay.get('ended_at'))}) goal: {replay.get('goal') or '-'}",
            LINE_CHARS * 2,
        )
    ]
    errors = replay.get("errors", [])
    if errors:
        head.append(f"{len(errors)} errors, first at #{errors[0].get('seq')}")
    return fit(head, [event_line(e) for e in replay.get("events", [])], max_chars, "events")


def timeline_text(timeline: Timeline, max_chars: int) -> str:
    head = [
        f"timeline of session {timeline['session']} (project "
        f"{timeline.get('project') or NO_PROJECT}) around #{timeline['anchor_seq']}"
    ]
    lines = [
        ("> " if e["id"] == timeline["anchor"] else "  ") + event_line(e)
        for e in timeline["events"]
    ]
    return fit(head, lines, max_chars, "events")


def note_line(note: Note) -> str:
    """An agent's note or decision, with whether the code it names still stands."""
    return one_line(
        f"{note['kind']} [{note['id']}] (agent note, {_day(note.get('event_time'))})"
        f"{code_state(note.get('anchor'))}: {note['text']}",
        LINE_CHARS,
    )


def edited_files(edited: EditedFiles | None, lead: str) -> str:
    """` <lead> a.py, b.py, c.py (+2 more)`; nothing when no file was edited."""
    if not edited or not edited["files"]:
        return ""
    more = f" (+{edited['more']} more)" if edited["more"] else ""
    return f" {lead} {', '.join(edited['files'])}{more}"


def activity_blocks(activity: RecentActivity) -> list[str]:
    """One line per session (the files it modified, ahead of its goals, which the line's
    budget may cut), per changed file, per open failure; with provenance (which session,
    which tool, when)."""
    lines = []
    for s in activity["sessions"]:
        goals = "; ".join(s["goals"][:2]) or "-"
        lines.append(
            one_line(
                f"session {s['session']} ({s.get('agent')}, "
                f"{_day(s.get('ended_at') or s.get('started_at'))})"
                f"{edited_files(s.get('modified'), 'modified')}: {goals}",
                LINE_CHARS,
            )
        )
    lines += [note_line(n) for n in activity["notes"]]
    for f in activity["files"]:
        lines.append(
            f"modified {f['file']} ×{f['edits']} (last {_day(f.get('last_at'))}, "
            f"session {f['last_session']}){code_state(f.get('anchor'))}"
        )
    for x in activity["failures"]:
        msg = x.get("message") or x.get("detail") or ""
        code = f" exit {x['exit_code']}" if x.get("exit_code") not in (None, 0) else ""
        lines.append(
            one_line(
                f"open failure: {x['verb']} {x['target']}{code} via {x.get('tool')} "
                f"(session {x['session']}#{x.get('seq')}, {_day(x.get('event_time'))}): {msg}",
                LINE_CHARS,
            )
        )
    return lines


def activity_text(activity: RecentActivity, scope: Scope, max_chars: int) -> str:
    head = scope_head(
        scope,
        f"recent activity since {_day(activity['since'])}: {len(activity['sessions'])} sessions, "
        f"{len(activity['files'])} files modified, {len(activity['failures'])} open failures, "
        f"{len(activity['notes'])} notes",
    )
    return fit(head, activity_blocks(activity), max_chars, "lines")


def status_text(status: Mapping[str, Any], max_chars: int) -> str:
    counts = status.get("counts", {})
    lines = [
        f"daemon running: {status.get('daemon_running')}",
        f"data dir: {status.get('data_dir')}",
        "rows: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        f"queue: {status.get('queue', {}).get('jobs')} jobs waiting",
    ]
    lines += [f"project {p['id']}: {p['root']}" for p in status.get("projects", [])]
    return clip("\n".join(lines), max_chars)[0]
