"""The graph's vocabulary, declared once: edges (verbs), memory kinds, entity kinds, search kinds.

Parsers, row shaping, store writes, traversals, views, search and the schema test all derive
from these tables; adding a verb is one :class:`Edge` here plus its parser rule (and its
table definition in schema/, which tests/test_vocabulary.py checks against this declaration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memoryd.ids import stable_id

# -- entity kinds ------------------------------------------------------------------------------

FILE, SYMBOL, COMMAND, TOOL, URL, ERROR = "file", "symbol", "command", "tool", "url", "error"
# A library a file imports that is not a file of the project (`python:redis`).
MODULE = "module"
ENTITY_KINDS = (FILE, SYMBOL, COMMAND, TOOL, URL, ERROR, MODULE)

# -- edges -------------------------------------------------------------------------------------

# Where an action edge came from: the agent's own tool (Read, Edit, apply_patch) or a shell
# command that reads or writes a file (`cat f`, `sed -i`, `echo x > f`).
Via = Literal["tool", "shell"]
VIA_TOOL: Via = "tool"
VIA_SHELL: Via = "shell"


@dataclass(frozen=True, slots=True)
class Edge:
    """One relation table of the graph.

    ``source``/``target``: the tables it joins (SurrealDB `TYPE RELATION IN … OUT …`).
    ``target_kinds``: entity kinds it points at (empty when the target is not an entity).
    ``written_by``: which write path creates it (``transcript`` batches or the ``code`` index).
    ``in_history``: `memoryd history FILE` lists it among a file's actions.
    ``in_replay``: `memoryd session` lists it under the memory it starts from.
    ``action``: a verb of an agent's tool call (READS/MODIFIES/EXECUTES), with an outcome.
    ``text_field``: its field of free text from a transcript (a command line, an error
    message), which redaction scrubs.
    """

    name: str
    source: str
    target: str
    target_kinds: tuple[str, ...] = ()
    written_by: Literal["transcript", "code"] = "transcript"
    in_history: bool = False
    in_replay: bool = False
    action: bool = False
    text_field: str | None = None

    @property
    def table(self) -> str:
        return self.name.lower()

    def row_id(self, source: str, *target: str) -> str:
        """The key of this edge's row from `source` (a memory's key) to `target` (an entity's
        kind and key, an error's key, a session): the same wherever it is written or derived
        again (ingest, re-derivation, notes), so a second write is the same row."""
        return stable_id(self.name, source, *target)


# A session's memories and their order are the memory's `session` and `seq` fields (indexed
# together), not edges. The CONTAINS and NEXT edges an earlier memoryd wrote said it again in a
# third of the database's bytes: migration step 025 drops their tables, an import skips them.
RETIRED_EDGE_TABLES = ("contains", "next")
HAS_GOAL = Edge("HAS_GOAL", "session", "goal")
READS = Edge(
    "READS",
    "memory",
    "entity",
    (FILE, URL),
    in_history=True,
    in_replay=True,
    action=True,
    text_field="detail",
)
MODIFIES = Edge(
    "MODIFIES",
    "memory",
    "entity",
    (FILE,),
    in_history=True,
    in_replay=True,
    action=True,
    text_field="detail",
)
EXECUTES = Edge(
    "EXECUTES",
    "memory",
    "entity",
    (COMMAND, TOOL),
    in_replay=True,
    action=True,
    text_field="detail",
)
TRIGGERED = Edge("TRIGGERED", "memory", "entity", (ERROR,), in_replay=True, text_field="message")
DENIED = Edge(
    "DENIED",
    "memory",
    "entity",
    (FILE, COMMAND, TOOL, URL),
    in_history=True,
    in_replay=True,
    text_field="message",
)
SPAWNED = Edge("SPAWNED", "memory", "session", in_replay=True, text_field="detail")
MENTIONS = Edge(
    "MENTIONS",
    "memory",
    "entity",
    (FILE, SYMBOL),
    in_history=True,
    in_replay=True,
    text_field="detail",
)
DEFINED_IN = Edge("DEFINED_IN", "code_chunk", "entity", (FILE, SYMBOL), written_by="code")
# An error and the tool call that fixed it: the action that failed with it succeeding later in
# the same session (workers/resolutions.py derives it at ingest; migration step 027 for older
# databases). It carries the files modified in between and the command that then succeeded.
RESOLVED_BY = Edge("RESOLVED_BY", "entity", "memory")
# The code graph (workers/stages/codegraph). A symbol's key names its file, and DEFINES says the
# same as an edge with validity times: file -> every symbol it declares now, module-level names
# included, which have no chunk of their own. DEFINED_IN says which chunk holds a symbol's
# text; DEFINES which file declares it, and stops holding when the file no longer does.
DEFINES = Edge("DEFINES", "entity", "entity", (SYMBOL,), written_by="code")
IMPORTS = Edge("IMPORTS", "entity", "entity", (FILE, MODULE), written_by="code")
CALLS = Edge("CALLS", "entity", "entity", (SYMBOL,), written_by="code")
INHERITS = Edge("INHERITS", "entity", "entity", (SYMBOL,), written_by="code")
# Files changed together in the repository's history (workers/cochange.py).
CHANGES_WITH = Edge("CHANGES_WITH", "entity", "entity", (FILE,), written_by="code")
# The edges a file's own text gives (its path owns them: re-indexing it replaces them).
CODE_GRAPH_EDGES = (DEFINES, IMPORTS, CALLS, INHERITS)

EDGES = (
    HAS_GOAL,
    READS,
    MODIFIES,
    EXECUTES,
    TRIGGERED,
    DENIED,
    SPAWNED,
    MENTIONS,
    DEFINED_IN,
    RESOLVED_BY,
    DEFINES,
    IMPORTS,
    CALLS,
    INHERITS,
    CHANGES_WITH,
)
EDGES_BY_NAME = {edge.name: edge for edge in EDGES}
ACTION_VERBS = tuple(edge.name for edge in EDGES if edge.action)
TRANSCRIPT_EDGE_TABLES = tuple(edge.table for edge in EDGES if edge.written_by == "transcript")
HISTORY_EDGE_TABLES = tuple(edge.table for edge in EDGES if edge.in_history)
REPLAY_EDGE_TABLES = tuple(edge.table for edge in EDGES if edge.in_replay)
# What a memory says of entities: derived from its tool call and text (a migration re-derives
# them), and, for files, what makes a memory "about" a file (forget by path).
MEMORY_ENTITY_EDGE_TABLES = tuple(
    edge.table for edge in EDGES if (edge.source, edge.target) == ("memory", "entity")
)
MEMORY_FILE_EDGE_TABLES = tuple(
    edge.table for edge in EDGES if edge.source == "memory" and FILE in edge.target_kinds
)
EDGE_TEXT_FIELDS = {edge.table: edge.text_field for edge in EDGES if edge.text_field}


def edge(name: str) -> Edge:
    """The edge of a verb name (`READS`); a name not declared here is a bug, so it raises."""
    return EDGES_BY_NAME[name]


# -- memory kinds ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryKind:
    """What one memory row is. ``half_life_days``: the decay default (config can override).
    ``embedded``: it gets a vector (tool results are found by BM25 and the graph).
    ``agent_written``: written by an agent through `remember`, pinned by default.
    ``injectable``: a hook may put it into an agent's context (memoryd/agent/hooks.py): words of
    people and agents, never a tool's call or output, which could carry a prompt injection
    from a web page or a file into later sessions."""

    name: str
    half_life_days: float
    embedded: bool = True
    agent_written: bool = False
    injectable: bool = False


MEMORY_KINDS = (
    MemoryKind("user_prompt", 90.0, injectable=True),
    MemoryKind("assistant_message", 30.0, injectable=True),
    MemoryKind("tool_call", 14.0),
    MemoryKind("tool_result", 7.0, embedded=False),
    MemoryKind("error", 30.0),
    MemoryKind("summary", 90.0, injectable=True),
    MemoryKind("decision", 365.0, agent_written=True, injectable=True),
    MemoryKind("note", 180.0, agent_written=True, injectable=True),
    MemoryKind("todo", 90.0, agent_written=True, injectable=True),
)
MEMORY_KINDS_BY_NAME = {kind.name: kind for kind in MEMORY_KINDS}
EMBEDDED_MEMORY_KINDS = frozenset(kind.name for kind in MEMORY_KINDS if kind.embedded)
AGENT_MEMORY_KINDS = tuple(kind.name for kind in MEMORY_KINDS if kind.agent_written)
INJECTABLE_MEMORY_KINDS = frozenset(kind.name for kind in MEMORY_KINDS if kind.injectable)
DEFAULT_HALF_LIVES = {kind.name: kind.half_life_days for kind in MEMORY_KINDS}

# -- search kinds ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SearchKind:
    """What `search --kind NAME` looks through: rows of ``table`` (and for code tables, which
    files: source code or prose such as docs and changelogs)."""

    name: str
    table: str
    description: str
    text_field: str = "content"  # the text that is searched by words and embedded


SEARCH_KINDS = (
    SearchKind("code", "code_chunk", "source code chunks (functions, classes, blocks)"),
    SearchKind("docs", "code_chunk", "prose files: docs, readmes and changelogs"),
    SearchKind("memory", "memory", "what happened in sessions: prompts, messages, tool calls"),
    SearchKind("goal", "goal", "what users asked agents to do", text_field="intent"),
)
SEARCH_KINDS_BY_NAME = {kind.name: kind for kind in SEARCH_KINDS}
# The tables search reads (each has vectors), with the field of each that is searched.
SEARCHED_TABLES = {kind.table: kind.text_field for kind in SEARCH_KINDS}

# The name memoryd's MCP server is registered under in every client (`memoryd integrate`); its
# tools are `mcp:memoryd:<tool>` in transcripts.
MCP_SERVER = "memoryd"
