"""Today's extraction rules applied to tool calls an earlier memoryd stored (migration step 009).

The transcripts may be gone (Claude Code deletes them after 30 days), so a call's edges are
derived from what the database kept of it:

- a shell call (an EXECUTES or DENIED edge to a command): its command line is the EXECUTES
  edge's ``detail`` (the first 1,000 characters), or the tool-call memory after its
  ``Name: `` prefix (2,000 characters) when that is longer or the call was denied; the files
  it reads, writes or names are read off it where the session started (``session.cwd``),
  with the writer's home guessed as the parsers guess it. Its EXECUTES edges stay: they were
  read off the whole command line;
- a failure (TRIGGERED): its output is the call's ``error`` memory (its first 4,000
  characters), else the edge's own message;
- other tool edges keep their target, but a file named with ``~`` is expanded with that home
  (or dropped, like a parser drops it when no home is known).

What was not stored cannot be used: the directory each call ran in when the agent moved
(Claude Code records a `cwd` per record; Codex a `workdir` per call), command lines longer
than the stored part, and failure lines past the first 4,000 characters of an output.

A call whose action edges all say where they were seen (``via``) was made by today's rules:
it is left as it is (re-deriving it with less than its parser knew could only lose).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memoryd import vocabulary
from memoryd.ids import stable_id
from workers.entities import Entity, canonical_error, canonical_file, canonical_tool, guess_home
from workers.transcripts.model import (
    CAP_DETAIL,
    EXECUTES,
    Source,
    safe_entity,
    safe_target,
    safe_text,
    shell_targets,
)

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
    session: str
    content: str
    edges: tuple[StoredEdge, ...]
    cwd: str | None
    transcript: str | None
    error_output: str | None  # the call's `error` memory, if it has one


@dataclass(slots=True)
class Derived:
    """A call's edges by today's rules (``edges``: table -> rows with ``key``, ``target``
    (an Entity) and fields), replacing all its stored edges in those tables."""

    edges: list[tuple[str, str, Entity, dict[str, Any]]] = field(default_factory=list)

    def add(self, table: str, key: str, target: Entity, fields: dict[str, Any]) -> None:
        if all((t, k) != (table, key) for t, k, _, _ in self.edges):
            self.edges.append((table, key, target, fields))


def is_current(call: StoredCall) -> bool:
    """Made by today's rules: its action edges say where they were seen."""
    actions = [e for e in call.edges if e.table in _ACTION_TABLES]
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
    denied = [e for e in call.edges if e.table == _DENIED]
    if denied and not any(table == _DENIED for table, *_ in out.edges):
        # Nothing left to name: the call's tool was denied, as a parser says then.
        tool = canonical_tool(str(denied[0].fields.get("tool") or "unknown"))
        key = stable_id("DENIED", call.memory, tool.kind, tool.key)
        out.add(_DENIED, key, tool, dict(denied[0].fields))
    return out


def _shell(call: StoredCall, first: StoredEdge, source: Source, out: Derived) -> None:
    denied = first.table == _DENIED
    body = call.content.partition(": ")[2]  # `Bash: <command>` (2,000 characters)
    command = body if denied else first.fields.get("detail") or ""
    if len(command) >= CAP_DETAIL and body.startswith(command):
        command = body.removesuffix(" …[truncated]")
    targets = [safe_target(t) for t in shell_targets(command, call.cwd, source)]
    for t in targets:
        if t.verb == EXECUTES and not denied:
            continue  # the stored EXECUTES edges stay
        if denied:
            key = stable_id("DENIED", call.memory, t.entity.kind, t.entity.key)
            out.add(_DENIED, key, t.entity, dict(first.fields))
        else:
            key = stable_id(t.verb, call.memory, t.entity.kind, t.entity.key)
            fields = {**first.fields, "via": t.via}
            out.add(vocabulary.edge(t.verb).table, key, t.entity, fields)


def _triggered(call: StoredCall, e: StoredEdge, out: Derived) -> None:
    aliases = e.target.get("aliases") or []
    text = call.error_output or e.fields.get("message") or (aliases[0] if aliases else "error")
    error = safe_entity(canonical_error(text, e.fields.get("exit_code")))
    message = error.raw or safe_text(text, CAP_DETAIL)
    key = stable_id("TRIGGERED", call.memory, error.key)
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
        verb = "DENIED" if e.table == _DENIED else e.table.upper()
        key = stable_id(verb, call.memory, target.kind, target.key)
    out.add(e.table, key, target, fields)


def _entity(row: dict[str, Any]) -> Entity:
    aliases = row.get("aliases") or []
    raw = aliases[0] if aliases else ""
    return Entity(row["kind"], row["key"], raw, row["name"], row.get("project"))
