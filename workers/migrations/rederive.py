"""Today's extraction rules applied to tool calls an earlier memoryd stored (migration step 009).

A transcript still on disk as it was ingested (same inode, at least as long) is read again,
up to where it was ingested, by today's parser with the ingest's own filters: its memories'
edges become exactly what a fresh ingest makes, and a memory kind it tells otherwise (a Codex
result that was a failure) is changed. A transcript may be gone (Claude Code deletes them after
30 days); then a call's edges are derived from what the database kept of it:

- a shell call (an EXECUTES or DENIED edge to a command): its command line is the EXECUTES
  edge's ``detail`` (the first 1,000 characters), or the tool-call memory after its
  ``Name: `` prefix (2,000 characters) when that is longer or the call was denied; the files
  it reads, writes or names are read off it where the session started (``session.cwd``),
  with the writer's home guessed as the parsers guess it. Its EXECUTES edges stay: they were
  read off the whole command line;
- a failure (TRIGGERED): its output is the call's ``error`` memory (its first 4,000
  characters), else the edge's own message;
- other tool edges keep their target, but a file named with ``~`` is expanded with that home
  (or dropped, like a parser drops it when no home is known); MENTIONS an earlier memoryd read
  off a tool's detail (a web search's query) go;
- a Codex call stored as answered: its result memory says whether the sandbox stopped it (a
  failure even when a search ends the pipeline) or the browser refused it (DENIED).

What was not stored cannot be used: the directory each call ran in when the agent moved
(Claude Code records a `cwd` per record; Codex a `workdir` per call; replaying the `cd`s of a
session does not recover it, Claude Code resets its shell's folder on rules of its own),
command lines longer than the stored part, and failure lines past the first 4,000 characters
of an output.

A call whose action edges all say where they were seen (``via``) was made by today's rules:
it is left as it is (re-deriving it with less than its parser knew could only lose).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memoryd import vocabulary
from memoryd.ids import entity_id
from memoryd.watch.transcripts import rewritten_whole
from workers.context import JobContext
from workers.ingest import _read_batch, _remembered, rows_for, source_for
from workers.resolutions import resolve_sessions
from workers.stages.entities import (
    Entity,
    canonical_commands,
    canonical_error,
    canonical_file,
    canonical_tool,
    guess_home,
)
from workers.stages.transcripts import ParserState, codex, parser_for
from workers.stages.transcripts.events import (
    CAP_DETAIL,
    ERROR,
    EXECUTES,
    OK,
    PERMISSION_DENIED,
    Source,
    shell_targets,
)
from workers.stages.transcripts.text import safe_entity, safe_target, safe_text

if TYPE_CHECKING:
    from memoryd.config import Settings
    from memoryd.store import Store

# The agents whose transcripts memoryd read before today's rules (Gemini CLI and aider came
# with them: what is stored of those is today's already).
READ_BEFORE = frozenset({"claude-code", "codex"})
# Step 26 (issue 33) reads every agent's transcripts again; what is gone is left as stored.
READ_AGAIN_2 = frozenset({"claude-code", "codex", "gemini", "aider"})

# The edges a tool call's memory starts, which today's rules make.
CALL_EDGES = (
    vocabulary.READS,
    vocabulary.MODIFIES,
    vocabulary.EXECUTES,
    vocabulary.MENTIONS,
    vocabulary.TRIGGERED,
    vocabulary.DENIED,
)
CALL_EDGE_TABLES = tuple(e.table for e in CALL_EDGES)
_ACTION_TABLES = frozenset(e.table for e in CALL_EDGES if e.action or e is vocabulary.MENTIONS)
_EXECUTES, _DENIED, _TRIGGERED, _MENTIONS = (
    vocabulary.EXECUTES.table,
    vocabulary.DENIED.table,
    vocabulary.TRIGGERED.table,
    vocabulary.MENTIONS.table,
)


@dataclass(frozen=True, slots=True)
class StoredEdge:
    """An edge as stored: ``target`` is its entity's row (kind, key, name, project, aliases)."""

    table: str
    key: str
    target: dict[str, Any]
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredCall:
    """A memory with edges in :data:`CALL_EDGE_TABLES`, and the session it belongs to."""

    memory: str
    content: str
    edges: tuple[StoredEdge, ...]
    cwd: str | None
    transcript: str | None
    error_output: str | None  # the call's `error` memory, if it has one
    call_id: str | None = None
    # A Codex call's answer, its result memory (key, text): today's rules may tell otherwise
    result: tuple[str, str] | None = None


@dataclass(slots=True)
class Derived:
    """A call's edges by today's rules, (table, edge key, target, fields) each, in place of
    all its stored edges in :data:`CALL_EDGE_TABLES`."""

    edges: list[tuple[str, str, Entity, dict[str, Any]]] = field(default_factory=list)
    # memories whose kind today's rules tell otherwise: key -> kind
    kinds: dict[str, str] = field(default_factory=dict)

    def add(self, table: str, key: str, target: Entity, fields: dict[str, Any]) -> None:
        if all((t, k) != (table, key) for t, k, _, _ in self.edges):
            self.edges.append((table, key, target, fields))


def is_current(call: StoredCall) -> bool:
    """Made by today's rules: its action edges say where they were seen."""
    return _current(call.edges)


def _current(edges: tuple[StoredEdge, ...] | list[StoredEdge]) -> bool:
    actions = [e for e in edges if e.table in _ACTION_TABLES]
    return bool(actions) and all(e.fields.get("via") for e in actions)


def rederive(call: StoredCall, projects: list[tuple[str, str]]) -> Derived:
    """The edges today's parsers would have made of this stored call."""
    home = guess_home(call.transcript) or guess_home(call.cwd)
    source = Source(call.transcript or "", tuple(projects), home=home)
    out = Derived()
    shell = [
        e
        for e in call.edges
        if e.table in (_EXECUTES, _DENIED) and e.target["kind"] == vocabulary.COMMAND
    ]
    if shell:
        _shell(call, shell[0], source, out)
    for e in call.edges:
        if e.table == _TRIGGERED:
            _triggered(call, e, out)
        elif e.table == _EXECUTES and e.target["kind"] == vocabulary.COMMAND:
            # Read off the whole command line when it was stored, not off its stored part.
            _tool_edge(call, e, source, out)
        elif not shell and not (e.table == _MENTIONS and not e.fields.get("via")):
            # (an earlier memoryd read names off any EXECUTES detail, a web search's too)
            _tool_edge(call, e, source, out)
    if call.result is not None:
        _codex_outcome(call, call.result, out)
    denied = [e for e in call.edges if e.table == _DENIED]
    if denied and not any(table == _DENIED for table, *_ in out.edges):
        # Nothing left to name: the call's tool was denied, as a parser says then.
        tool = canonical_tool(str(denied[0].fields.get("tool") or "unknown"))
        key = vocabulary.DENIED.row_id(call.memory, tool.kind, tool.key)
        out.add(_DENIED, key, tool, dict(denied[0].fields))
    return out


def _shell(call: StoredCall, first: StoredEdge, source: Source, out: Derived) -> None:
    denied = first.table == _DENIED
    command = call.content.partition(": ")[2] if denied else _command(call, first.fields)
    targets = [safe_target(t) for t in shell_targets(command, call.cwd, source)]
    for t in targets:
        if t.verb == EXECUTES and not denied:
            continue  # the stored EXECUTES edges stay
        if denied:
            key = vocabulary.DENIED.row_id(call.memory, t.entity.kind, t.entity.key)
            out.add(_DENIED, key, t.entity, dict(first.fields))
        else:
            key = vocabulary.edge(t.verb).row_id(call.memory, t.entity.kind, t.entity.key)
            fields = {**first.fields, "via": t.via}
            out.add(vocabulary.edge(t.verb).table, key, t.entity, fields)


def _codex_outcome(call: StoredCall, result: tuple[str, str], out: Derived) -> None:
    """Codex results an earlier memoryd took for answers: a browser-policy rejection is a
    denial of what the call named; a sandbox block fails the call even when a search ends
    the pipeline (its result memory is then an error)."""
    memory, text = result
    actions = [(t, k, e, f) for t, k, e, f in out.edges if t in _ACTION_TABLES]
    if not actions or any(f.get("outcome") != OK for *_, f in actions):
        return
    if codex.BROWSER_POLICY.search(text[:1000]):
        out.edges = [edge for edge in out.edges if edge[0] not in _ACTION_TABLES]
        message = safe_text(text, CAP_DETAIL)
        for _, _, entity, fields in actions:
            key = vocabulary.DENIED.row_id(call.memory, entity.kind, entity.key)
            reason = {"reason": PERMISSION_DENIED, "message": message}
            kept = {k: fields[k] for k in ("session", "tool", "event_time")}
            out.add(_DENIED, key, entity, {**kept, **reason})
        return
    code = actions[0][3].get("exit_code")
    programs = [e.key for t, _, e, _ in actions if t == _EXECUTES and e.kind == vocabulary.COMMAND]
    if code is None or not programs:
        return
    last = canonical_commands(_command(call, actions[0][3]))
    if codex.outcome(code, last[-1].key if last else None, text) == OK:
        return
    out.edges = [
        (t, k, e, {**f, "outcome": ERROR} if t in _ACTION_TABLES else f) for t, k, e, f in out.edges
    ]
    error = safe_entity(canonical_error(text, code))
    fields = {k: actions[0][3][k] for k in ("session", "tool", "event_time")}
    message = error.raw or safe_text(text, CAP_DETAIL)
    key = vocabulary.TRIGGERED.row_id(call.memory, error.key)
    out.add(_TRIGGERED, key, error, {**fields, "exit_code": code, "message": message})
    out.kinds[memory] = "error"


def _command(call: StoredCall, fields: dict[str, Any]) -> str:
    """A shell call's command line: the edge's detail (1,000 characters), or the tool-call
    memory after its `Name: ` prefix (2,000) when that holds more of it."""
    detail = str(fields.get("detail") or "")
    body = call.content.partition(": ")[2]
    if len(detail) >= CAP_DETAIL and body.startswith(detail):
        return body.removesuffix(" …[truncated]")
    return detail


def _triggered(call: StoredCall, e: StoredEdge, out: Derived) -> None:
    aliases = e.target.get("aliases") or []
    text = call.error_output or e.fields.get("message") or (aliases[0] if aliases else "error")
    error = safe_entity(canonical_error(text, e.fields.get("exit_code")))
    message = error.raw or safe_text(text, CAP_DETAIL)
    key = vocabulary.TRIGGERED.row_id(call.memory, error.key)
    out.add(_TRIGGERED, key, error, {**e.fields, "message": message})


def _tool_edge(call: StoredCall, e: StoredEdge, source: Source, out: Derived) -> None:
    target, key = _entity(e.target), e.key
    fields = dict(e.fields)
    if e.table in _ACTION_TABLES:
        fields["via"] = fields.get("via") or vocabulary.VIA_TOOL
    if target.kind == vocabulary.FILE and target.key.startswith("~"):
        expanded = canonical_file(target.key, call.cwd, source.projects, home=source.home)
        if expanded is None:
            return  # a parser makes no file of `~/…` when no home is known
        target = expanded
        key = vocabulary.edge(e.table.upper()).row_id(call.memory, target.kind, target.key)
    out.add(e.table, key, target, fields)


def _entity(row: dict[str, Any]) -> Entity:
    aliases = row.get("aliases") or []
    raw = aliases[0] if aliases else ""
    return Entity(row["kind"], row["key"], raw, row["name"], row.get("project"))


# --------------------------------------------------------------------------------------------
# The step: transcripts still on disk are read again; the other sessions from what was stored


async def rederive_all(
    store: Store, settings: Settings, page: int, read_again: frozenset[str] = READ_BEFORE
) -> None:
    """Every stored call's edges by today's rules (the transcripts of ``read_again``'s agents
    read again where they are still on disk); then error entities take their aliases from
    their failures, and entities nothing points at any more go."""
    projects = [(p["id"], p["root"]) for p in await store.projects()]
    after: str | None = None
    while cursors := await store.rows_after("transcript_cursor", after, page):
        after = str(cursors[-1]["id"])
        for cursor in cursors:
            if cursor.get("agent") in read_again and _readable(cursor):
                await _read_again(store, settings, cursor, projects, page)
    after = None
    while sessions := await store.rows_after("session", after, page):
        after = str(sessions[-1]["id"])
        for session in sessions:
            source = session.get("source")
            if session.get("agent") not in READ_BEFORE:
                continue
            if not (source and _readable(await store.transcript_cursor(source))):
                await _from_stored(store, session, projects, page)
    error: str | None = None
    while keys := await store.error_entities_after(error, page):
        await store.aliases_from_failures(keys)
        error = keys[-1]
    # The failures' resolutions follow from the edges just derived (ingest's own rule).
    await resolve_sessions(store, await store.failed_sessions())
    while orphans := await store.orphan_entities(page):
        await store.delete_rows("entity", orphans)


def _readable(cursor: dict[str, Any] | None) -> bool:
    """The transcript a cursor read is still there as it was read (appended to at most; one
    rewritten whole on every update is read whole: its messages keep their ids)."""
    if not cursor or not cursor.get("agent"):
        return False
    try:
        info = os.stat(cursor["path"])
    except OSError:
        return False
    if rewritten_whole(cursor["path"]):
        return True
    if cursor["path"].endswith(".zst"):
        return info.st_ino == cursor["inode"] and info.st_size == cursor["size"]
    return info.st_ino == cursor["inode"] and info.st_size >= cursor["offset"]


async def _read_again(
    store: Store,
    settings: Settings,
    cursor: dict[str, Any],
    projects: list[tuple[str, str]],
    page: int,
) -> None:
    """The transcript read again up to where it was ingested, with the filters of an ingest
    (forgotten sessions, excluded folders and files); its memories' edges replaced by what
    the parse made of them. A file's edges are held until it is read: its calls are settled
    by results that may come much later in the file."""
    path, end = cursor["path"], cursor["offset"]
    agent = cursor["agent"]
    parser = parser_for(agent)
    info = os.stat(path)
    if rewritten_whole(path):
        end = info.st_size
    source = source_for(path, agent, projects, info)
    ctx: JobContext = {"store": store, "settings": settings}
    state: ParserState | None = None
    offset = 0
    memories: list[str] = []
    kinds: dict[str, str] = {}
    edges: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    entities: dict[str, dict[str, Any]] = {}
    while offset < end:
        lines, offset = await asyncio.to_thread(_read_batch, path, offset, path.endswith(".zst"))
        lines = [line for line in lines if line.offset < end]  # never ingested: not read
        if not lines:
            break
        result = await _remembered(ctx, await asyncio.to_thread(parser.parse, lines, state, source))
        state = result.state
        rows = rows_for(result, path)
        for row in rows.tables.get("memories", []):
            memories.append(row["id"].key)
            kinds[row["id"].key] = row["kind"]
        for table in CALL_EDGE_TABLES:
            for row in rows.tables.get(f"edge_{table}", []):
                edges.setdefault(row["in"].key, []).append((table, row))
        for row in rows.tables.get("entities", []):
            _merge(entities, row)
    for start in range(0, len(memories), page):
        chunk = await store.call_edges(memories[start : start + page], CALL_EDGE_TABLES)
        changed = {c["key"]: kinds[c["key"]] for c in chunk if c["kind"] != kinds[c["key"]]}
        stored = [call for call in chunk if not _unchanged(call, edges.get(call["key"], []))]
        derived = [(table, row) for call in stored for table, row in edges.get(call["key"], [])]
        wanted = {row["out"].key for _, row in derived}
        await _write(
            store,
            [(e["table"], e["key"]) for call in stored for e in call["edges"]],
            [
                (table, row["id"].key, row["in"].key, row["out"].key, _fields(row))
                for table, row in derived
            ],
            [_entity_row(e) for key, e in entities.items() if key in wanted],
            changed,
        )


def _unchanged(call: dict[str, Any], derived: list[tuple[str, dict[str, Any]]]) -> bool:
    """Made by today's rules and read again to the same edges: nothing to write."""
    stored = [StoredEdge(**e) for e in call["edges"]]
    same = {(e.table, e.key) for e in stored} == {(t, row["id"].key) for t, row in derived}
    return same and _current(stored)


def _merge(entities: dict[str, dict[str, Any]], row: dict[str, Any]) -> None:
    known = entities.get(row["id"].key)
    if known is None:
        entities[row["id"].key] = dict(row)
        return
    known["aliases"] = sorted({*known["aliases"], *row["aliases"]})
    known["first_seen"] = min(known["first_seen"], row["first_seen"])
    known["last_seen"] = max(known["last_seen"], row["last_seen"])


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in row.items() if k not in ("id", "in", "out")}
    return {**fields, "session": row["session"].key}


def _entity_row(row: dict[str, Any]) -> dict[str, Any]:
    project = row.get("project")
    return {
        **{k: v for k, v in row.items() if k != "id"},
        "project": project.key if project else None,
    }


async def _from_stored(
    store: Store, session: dict[str, Any], projects: list[tuple[str, str]], page: int
) -> None:
    """A session whose transcript is gone: its calls' edges derived from what was stored."""
    errors = await store.error_outputs(session["id"])
    after: str | None = None
    while True:
        rows, after = await store.memories_with_edges(session["id"], CALL_EDGE_TABLES, after, page)
        calls = [
            StoredCall(
                memory=row["key"],
                content=row["content"],
                edges=tuple(StoredEdge(**e) for e in row["edges"]),
                cwd=session.get("cwd"),
                transcript=session.get("source"),
                error_output=errors.get(row.get("call_id") or ""),
                call_id=row.get("call_id"),
            )
            for row in rows
        ]
        calls = [call for call in calls if not is_current(call)]
        if session.get("agent") == codex.AGENT and calls:
            results = await store.call_results(
                session["id"], [c.call_id for c in calls if c.call_id]
            )
            calls = [replace(c, result=results.get(c.call_id or "")) for c in calls]
        new = []
        entities = []
        kinds: dict[str, str] = {}
        for call in calls:
            derived = rederive(call, projects)
            kinds |= derived.kinds
            for table, key, target, fields in derived.edges:
                new.append((table, key, call.memory, entity_id(target.kind, target.key), fields))
                entities.append(
                    {
                        "kind": target.kind,
                        "key": target.key,
                        "name": target.name,
                        "project": target.project_id,
                        "aliases": [target.raw] if target.raw else [],
                        "first_seen": fields.get("event_time"),
                        "last_seen": fields.get("event_time"),
                    }
                )
        doomed = [(e.table, e.key) for call in calls for e in call.edges]
        await _write(store, doomed, new, entities, kinds)
        if after is None:
            return


async def _write(
    store: Store,
    doomed: list[tuple[str, str]],
    new: list[tuple[str, str, str, str, dict[str, Any]]],
    entities: list[dict[str, Any]],
    kinds: dict[str, str],
) -> None:
    """(table, edge key, memory key, entity key, fields) rows in place of `doomed`, and the
    memories' `kinds`, in one transaction."""
    if not doomed and not new and not kinds:
        return
    edges: dict[str, list[dict[str, Any]]] = {}
    for table, key, memory, entity, fields in new:
        row = {"key": key, "memory": memory, "entity": entity, "fields": fields}
        edges.setdefault(table, []).append(row)
    await store.replace_edges(doomed, edges, entities, kinds)
