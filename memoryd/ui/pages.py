"""The pages of `memoryd ui` as HTML, rendered on the server from the client API's typed
results (memoryd/results.py). No template engine: each page is a few small functions, every
value escaped on its way in (`e`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from memoryd.agent.present_graph import SECTIONS, short_key
from memoryd.agent_shared import qualified
from memoryd.results import FileHistory, GraphLink, Record, Related, SearchResult, SessionReplay

NAV = (("/", "Overview"), ("/sessions", "Sessions"), ("/search", "Search"), ("/memory", "Memory"))
SEARCH_KINDS = ("code", "docs", "memory", "goal")
FORGET_SCOPES = ("session", "project", "path")
# Characters of an event's text on the timeline (the record page has it whole).
EVENT_CHARS = 300
PLOT_DAYS = 30
# The file page's links, what is done to the file first; what it defines (often dozens) last.
RELATIONS = (*SECTIONS[1:], SECTIONS[0])


def e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def when(iso: str | None) -> str:
    """`2025-11-17 11:30` from an ISO time."""
    return iso[:16].replace("T", " ") if iso else ""


def link(to: str, text: object, /, **query: object) -> str:
    given = {k: v for k, v in query.items() if v not in (None, "")}
    href = to + ("?" + urlencode(given) if given else "")
    return f'<a href="{e(href)}">{e(text)}</a>'


def table(ident: str, head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table whose cells are already HTML; `ident` names it for the tests and the CSS."""
    cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    heads = "".join(f"<th>{e(h)}</th>" for h in head)
    return f'<table id="{e(ident)}"><thead><tr>{heads}</tr></thead><tbody>{cells}</tbody></table>'


def csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{e(csrf)}">'


def button_form(action: str, label: str, csrf: str, **fields: object) -> str:
    """A change is always a POST carrying the CSRF token."""
    hidden = "".join(
        f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in fields.items()
    )
    return (
        f'<form method="post" action="{e(action)}" class="inline">{csrf_field(csrf)}{hidden}'
        f'<button type="submit">{e(label)}</button></form>'
    )


def layout(title: str, body: str, current: str) -> str:
    top, bottom = frame(title, current)
    return top + body + bottom


def frame(title: str, current: str) -> tuple[str, str]:
    """A page's HTML around its body: what goes before it, what after."""
    nav = "".join(
        f'<a href="{href}"{" class=here" if href == current else ""}>{name}</a>'
        for href, name in NAV
    )
    top = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{e(title)} · memoryd</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/static/ui.css"></head><body>'
        f"<header><span class=brand>memoryd</span><nav>{nav}</nav>"
        '<form action="/file" method="get" class="filebox">'
        '<input name="path" placeholder="file history: /path/to/file" size=40></form></header>'
        f"<main><h1>{e(title)}</h1>"
    )
    return top, "</main></body></html>"


def error_body(message: str) -> str:
    return f'<p class="error">{e(message)}</p>'


def select(name: str, options: Sequence[tuple[str, str]], chosen: str | None) -> str:
    opts = "".join(
        f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(label)}</option>'
        for v, label in options
    )
    return f'<select name="{e(name)}">{opts}</select>'


# -- overview ------------------------------------------------------------------------------


def bars(ident: str, title: str, points: Sequence[tuple[str, float]]) -> str:
    """A small bar plot as inline SVG (no script, no asset): one bar per day."""
    width, height = 240, 60
    top = max((v for _, v in points), default=0) or 1
    # At least a month wide, the newest day on the right: a first day is one thin bar, not a
    # block filling the plot.
    slots = max(len(points), PLOT_DAYS)
    step = width / slots
    left = (slots - len(points)) * step
    rects = "".join(
        f'<rect x="{left + i * step:.1f}" y="{height - v / top * height:.1f}" '
        f'width="{max(step - 1, 1):.1f}" height="{v / top * height:.1f}">'
        f"<title>{e(day)}: {v:g}</title></rect>"
        for i, (day, v) in enumerate(points)
    )
    last = f"{points[-1][1]:g}" if points else "no data yet"
    return (
        f'<figure id="{e(ident)}"><figcaption>{e(title)}: {e(last)}</figcaption>'
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img">{rects}</svg></figure>'
    )


def overview(status: Mapping[str, Any], days: Sequence[Mapping[str, Any]]) -> str:
    projects = table(
        "projects",
        ["Project", "Root", "Index", "Files", "Chunks", "Vectors owed"],
        (
            [
                e(p["name"]),
                e(p["root"]),
                e((p.get("index") or {}).get("state", "never indexed")),
                e(_files(p.get("index"))),
                e((p.get("index") or {}).get("chunks", "")),
                e(p.get("vectors_owed", 0)),
            ]
            for p in status.get("projects", [])
        ),
    )
    q = status.get("queue", {})
    paused = status.get("paused_since")
    queue = table(
        "queue",
        ["Daemon", "Capture", "Jobs waiting", "Queries waiting", "Oldest job (s)"],
        [
            [
                "running" if status.get("daemon_running") else "stopped",
                e(f"paused since {when(paused)}") if paused else "on",
                e(q.get("jobs", 0)),
                e(q.get("queries", 0)),
                e(q.get("oldest_job_age_seconds") or 0),
            ]
        ],
    )
    counts = table(
        "tables",
        ["Table", "Rows"],
        ([e(t), e(n)] for t, n in sorted((status.get("counts") or {}).items())),
    )
    size = status.get("database_bytes")
    disk = f"<p id=disk>Database on disk: {e(_mb(size))} in {e(status.get('data_dir'))}</p>"
    plots = "".join(
        bars(f"plot-{field}", title, [(d["day"], d.get(field) or 0) for d in days])
        for field, title in (
            ("memories", "memories stored"),
            ("chunks", "code chunks stored"),
            ("database_mb", "database MB"),
            ("jobs", "jobs in the day's last hour"),
        )
    )
    return (
        "<h2>Projects</h2>" + projects + "<h2>Queue</h2>" + queue + disk + "<h2>Over time</h2>"
        f"<div class=plots>{plots}</div><h2>Rows per table</h2>" + counts
    )


def _files(index: Mapping[str, Any] | None) -> str:
    return f"{index['files_done']}/{index['files_total']}" if index else ""


def _mb(size: int | None) -> str:
    return "unknown (database server)" if size is None else f"{size / 1e6:.1f} MB"


# -- sessions ------------------------------------------------------------------------------


def sessions(
    found: Sequence[Mapping[str, Any]],
    projects: Sequence[Mapping[str, Any]],
    chosen: Mapping[str, str],
) -> str:
    agents = sorted({s["agent"] for s in found if s.get("agent")})
    form = (
        '<form method="get" class="filters">'
        + select(
            "project",
            [("", "all projects"), *((p["id"], p["name"]) for p in projects)],
            chosen.get("project"),
        )
        + select("agent", [("", "all agents"), *((a, a) for a in agents)], chosen.get("agent"))
        + f'<input name="day" type="date" value="{e(chosen.get("day"))}">'
        + f'<input name="days" type="number" min="1" value="{e(chosen.get("days"))}"> days back'
        + "<button>Show</button></form>"
    )
    shown = [
        s
        for s in found
        if (not chosen.get("agent") or s.get("agent") == chosen["agent"])
        and (not chosen.get("day") or (s.get("started_at") or "").startswith(chosen["day"]))
    ]
    rows = (
        [
            e(when(s.get("started_at"))),
            e(s.get("agent")),
            e(s.get("project") or ""),
            link(f"/session/{s['session']}", s["session"]),
            "<br>".join(e(g) for g in s.get("goals") or []),
        ]
        for s in shown
    )
    return form + table("sessions", ["Started", "Agent", "Project", "Session", "Goals"], rows)


def session(replay: SessionReplay) -> str:
    facts = table(
        "session-facts",
        ["Agent", "Project", "Branch", "Started", "Ended", "Goal"],
        [
            [
                e(replay.get("agent")),
                e(replay.get("project") or ""),
                e(replay.get("git_branch") or ""),
                e(when(replay.get("started_at"))),
                e(when(replay.get("ended_at"))),
                e(replay.get("goal") or ""),
            ]
        ],
    )
    errors_at = {err.get("seq") for err in replay.get("errors", [])}
    subagents = {s["seq"]: s for s in replay.get("subagents", [])}
    rows = []
    for ev in replay.get("events", []):
        text = ev["text"]
        cut = text[:EVENT_CHARS] + ("…" if len(text) > EVENT_CHARS else "")
        actions = "".join(f"<div>{_action(a)}</div>" for a in ev.get("edges", []))
        sub = subagents.get(ev["seq"])
        if sub:
            actions += "<div>subagent " + link(f"/session/{sub['session']}", sub["session"])
            actions += f" {e(sub.get('description') or '')}</div>"
        rows.append(
            [
                link("/record", f"#{ev['seq']}", id=qualified("memory", ev["id"])),
                e(when(ev.get("event_time"))),
                e(ev["kind"]) + (" <b class=error>error</b>" if ev["seq"] in errors_at else ""),
                e(ev.get("tool") or ""),
                f"<div class=text>{e(cut)}</div>{actions}",
            ]
        )
    return facts + table("timeline", ["#", "Time", "Kind", "Tool", "What"], rows)


def _action(action: Mapping[str, Any]) -> str:
    """`modifies ok /path` with the path opening its file page."""
    target = action.get("target") or ""
    shown = link("/file", target, path=target) if action.get("target_kind") == "file" else e(target)
    return f"{e(_did(action))} {shown}"


def _did(action: Mapping[str, Any]) -> str:
    """`modifies ok`, `executes failed exit 2`: an action's verb and how it went."""
    outcome = action.get("outcome") or action.get("reason") or ""
    code = f" exit {action['exit_code']}" if action.get("exit_code") not in (None, 0) else ""
    return f"{action['verb']} {outcome}{code}".strip()


# -- file ----------------------------------------------------------------------------------


def _file_action(action: Mapping[str, Any]) -> str:
    """What a session did to the file (the page's own, so no target): verb, outcome, when."""
    tool = f" via {action['tool']}" if action.get("tool") else ""
    return e(f"{_did(action)}{tool} {when(action.get('event_time'))}")


def file(history: FileHistory) -> str:
    """What `file_history` says of the file's sessions: the file, the sessions that touched
    it. The code graph's section and the current chunks follow (`file_graph`), sent once the
    daemon has read the graph."""
    ref = history["file"]
    head = table(
        "file-facts",
        ["Project", "Path", "Key"],
        [[e(ref.get("project") or ""), e(ref.get("path") or ""), e(ref["key"])]],
    )
    touched = table(
        "file-sessions",
        ["Session", "Agent", "Started", "Goal", "Actions", "Errors"],
        (
            [
                link(f"/session/{s['session']}", s["session"]),
                e(s.get("agent")),
                e(when(s.get("started_at"))),
                e(s.get("goal") or s.get("title") or ""),
                "".join(f"<div>{_file_action(a)}</div>" for a in s.get("actions", [])),
                "".join(
                    f"<div>#{e(x.get('seq'))} {e(x.get('error'))}: {e(x.get('message'))}</div>"
                    for x in s.get("errors", [])
                ),
            ]
            for s in history["sessions"]
        ),
    )
    return head + "<h2>Sessions that touched it</h2>" + touched


def file_graph(graph: Related | None, history: FileHistory) -> str:
    """The rest of a file's page: what it is related to in the code graph, its chunks."""
    chunks = table(
        "file-chunks",
        ["Lines", "Type", "Name"],
        (
            [e(f"{c['start_line']}-{c['end_line']}"), e(c["chunk_type"]), e(c.get("name") or "")]
            for c in history["chunks"]
        ),
    )
    return (
        "<h2>Related in the code graph</h2>" + related(graph) + "<h2>Current chunks</h2>" + chunks
    )


def related(graph: Related | None) -> str:
    """What `related` says of the file: one row per link (its relation, the symbol or file
    at its other end, opening that file's page, and where the link is written), then the
    files that usually change with it."""
    if graph is None:
        return "<p id=related-none>Not in the code graph (no project's source file).</p>"
    project = graph["target"]["project"]
    links = table(
        "related",
        ["Relation", "With", "At", "Sure"],
        (
            [e(label), _graph_end(link_), e(f"{link_['path']}:{link_['line']}"), _sure(link_)]
            for name, label in RELATIONS
            for link_ in graph[name]  # type: ignore[literal-required]
        ),
    )
    together = table(
        "changes-with",
        ["File", "Commits together", "Last"],
        (
            [
                link("/file", c["path"], path=f"{project}:{c['path']}"),
                e(f"{c['count']:g}"),
                e(when(c["last_at"])),
            ]
            for c in graph["changes_with"]
        ),
    )
    return links + "<h3>Usually changes with it (git history)</h3>" + together


def _graph_end(found: GraphLink) -> str:
    """A symbol or file of a project, opening its file's page; a module from outside the
    projects (`asyncio`) as plain text."""
    short = short_key(found["key"])
    if short == found["key"]:
        return e(short)
    project = found["key"][: -len(short) - 1]
    return link("/file", short, path=f"{project}:{short.split('#', 1)[0]}")


def _sure(found: GraphLink) -> str:
    """Empty for a link its file settles; a guess by name says how likely it is."""
    return "" if found["confidence"] >= 1 else e(f"guess {found['confidence']:.2f}")


# -- search and records --------------------------------------------------------------------


def search_form(chosen: Mapping[str, str], projects: Sequence[Mapping[str, Any]]) -> str:
    return (
        '<form method="get" class="filters">'
        f'<input name="q" value="{e(chosen.get("q"))}" placeholder="search" size=40 autofocus>'
        + select("kind", [(k, k) for k in SEARCH_KINDS], chosen.get("kind") or "code")
        + select(
            "project",
            [("", "all projects"), *((p["id"], p["name"]) for p in projects)],
            chosen.get("project"),
        )
        + f'<input name="path" value="{e(chosen.get("path"))}" placeholder="path glob">'
        + f'<input name="language" value="{e(chosen.get("language"))}" placeholder="language">'
        + "<button>Search</button></form>"
    )


def hits(found: Sequence[SearchResult]) -> str:
    rows = []
    for hit in found:
        ident = qualified(hit.kind, hit.id)
        # Code and docs open their file's page, a memory its session's.
        where = (
            link("/file", hit.path, path=f"{hit.project}:{hit.path}")
            + e(f":{hit.start_line}-{hit.end_line}")
            if hit.path is not None and hit.project
            else e(f"{hit.path}:{hit.start_line}-{hit.end_line}")
            if hit.path is not None
            else link(f"/session/{hit.session}", f"session {hit.session}") + e(f"#{hit.seq}")
        )
        rows.append(
            [
                link("/record", ident, id=ident),
                e(hit.project or ""),
                where,
                e(hit.name or ""),
                e(f"{hit.score:.3f}"),
            ]
        )
    return table("hits", ["Id", "Project", "Where", "Name", "Score"], rows)


def record(found: Record, csrf: str) -> str:
    where = (
        link("/file", found.get("path"), path=found.get("path"))
        + e(f":{found.get('start_line')}-{found.get('end_line')}")
        if found.get("path")
        else link(f"/session/{found.get('session')}", f"session {found.get('session')}")
        + e(f"#{found.get('seq')}")
    )
    facts = table(
        "record-facts",
        ["Id", "Kind", "Project", "Where", "Time", "Pinned"],
        [
            [
                e(found["id"]),
                e(found["kind"]),
                e(found.get("project") or ""),
                where,
                e(when(found.get("event_time"))),
                e("yes" if found.get("pinned") else ""),
            ]
        ],
    )
    controls = ""
    if found.get("session"):  # memories and goals: code follows its files
        back = f"/record?id={found['id']}"
        controls = f"<div class=controls>{_memory_controls(found['id'], csrf, back)}</div>"
    return facts + controls + f"<pre id=record-text>{e(found['text'])}</pre>"


def _memory_controls(ident: str, csrf: str, back: str) -> str:
    return (
        button_form("/pin", "pin", csrf, id=ident, pinned="1", back=back)
        + button_form("/pin", "unpin", csrf, id=ident, pinned="0", back=back)
        + button_form("/forget-memory", "forget", csrf, id=ident, back="/memory")
    )


# -- memory you control --------------------------------------------------------------------


def memory(
    notes: Sequence[Mapping[str, Any]],
    injected: Sequence[Mapping[str, str]],
    status: Mapping[str, Any],
    projects: Sequence[Mapping[str, Any]],
    project: str | None,
    csrf: str,
) -> str:
    pick = (
        '<form method="get" class="filters">'
        + select("project", [(p["id"], p["name"]) for p in projects], project)
        + "<button>Show notes</button></form>"
    )
    back = "/memory" + ("?" + urlencode({"project": project}) if project else "")
    note_rows = (
        [
            link("/record", n["id"], id=n["id"]),
            e(n["kind"]),
            e(when(n.get("event_time"))),
            e(n["text"]),
            _memory_controls(n["id"], csrf, back),
        ]
        for n in notes
    )
    paused = status.get("paused_since")
    capture = (
        f"<div id=capture>Capture paused since {e(when(paused))}. "
        + button_form("/resume", "resume", csrf)
        if paused
        else "<div id=capture>Capture is on. " + button_form("/pause", "pause", csrf)
    ) + "</div>"
    shown = table(
        "injected",
        ["Time", "Agent", "Session", "Event", "Text"],
        (
            [
                e(when(i["at"])),
                e(i["agent"]),
                link(f"/session/{i['session']}", i["session"]),
                e(i["event"]),
                f"<pre>{e(i['text'])}</pre>",
            ]
            for i in injected
        ),
    )
    forget = (
        '<form method="post" action="/forget/preview" class="filters" id=forget-form>'
        + csrf_field(csrf)
        + select("scope", [(s, s) for s in FORGET_SCOPES], "session")
        + '<input name="value" placeholder="session id, project or path glob" size=40 required>'
        + "<button>Preview</button></form>"
    )
    return (
        "<h2>Capture</h2>"
        + capture
        + "<h2>Agents' notes and decisions</h2>"
        + pick
        + table("notes", ["Id", "Kind", "Time", "Text", ""], note_rows)
        + "<h2>What the hooks injected lately</h2>"
        + shown
        + "<h2>Forget</h2><p>Nothing is deleted before you confirm the preview.</p>"
        + forget
    )


def forget_preview(scope: str, value: str, preview: Mapping[str, Any], csrf: str) -> str:
    removed = preview.get("removed") or {}
    rows = table("preview", ["Table", "Rows"], ([e(t), e(n)] for t, n in sorted(removed.items())))
    sessions = "".join(f"<li>{e(s)}</li>" for s in preview.get("sessions") or [])
    confirm = (
        button_form("/forget", "Forget these rows for good", csrf, scope=scope, value=value)
        if removed
        else "<p>Nothing to forget.</p>"
    )
    return (
        f"<p>Forgetting {e(scope)} <code>{e(value)}</code> would remove:</p>{rows}"
        "<p>and the entities (files, commands, errors) that only these rows point at.</p>"
        f"<h2>Sessions</h2><ul id=preview-sessions>{sessions}</ul>{confirm}"
    )


def forgotten(scope: str, value: str, done: Mapping[str, Any]) -> str:
    removed = done.get("removed") or {}
    rows = table("removed", ["Table", "Rows"], ([e(t), e(n)] for t, n in sorted(removed.items())))
    return f"<p>Forgot {e(scope)} <code>{e(value)}</code>:</p>{rows}"
