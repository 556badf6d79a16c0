"""What the client API takes and returns: plain typed data, the same whether it came through
the queue from the daemon or was computed in this process. Importing this module loads nothing
heavy (no model, no database SDK), so the CLI, the MCP server and the hooks can hold these
types."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict

from memoryd.errors import InvalidRequest
from memoryd.vocabulary import SEARCH_KINDS_BY_NAME

# Kinds whose rows are pieces of a project's files (code chunks): path and language narrow
# them, and the index knows their project. Memories and goals belong to their session's.
FILE_KINDS = tuple(k.name for k in SEARCH_KINDS_BY_NAME.values() if k.table == "code_chunk")


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search as every caller asks it (the CLI, the MCP tools, the hooks, the web page),
    answered by the daemon in one round trip (memoryd/searchindex/search.py).

    ``kinds``: search kinds (memoryd.vocabulary), each ranked on its own and its hits listed
    in turn; ``limit``: hits per kind, ``limits``: another number for some of them.
    ``project``: an id, name or root, or "all"; when None, the watched project containing
    ``cwd`` if one is given, else every project. Memories and goals are kept to the project of
    their session, code and docs to their file's. ``path`` (a glob over paths within their
    project) and ``language`` narrow code and docs: the other kinds are left out of the search
    then. ``as_of``: what was valid at that time, else what is valid now."""

    query: str
    kinds: tuple[str, ...] = ("code",)
    limit: int = 10
    project: str | None = None
    cwd: str | None = None
    path: str | None = None
    language: str | None = None
    as_of: datetime | None = None
    limits: tuple[tuple[str, int], ...] = ()

    def limit_of(self, kind: str) -> int:
        return dict(self.limits).get(kind, self.limit)

    def searched_kinds(self) -> tuple[str, ...]:
        """The kinds searched: those asked for, less the ones `path` and `language` leave out.
        Raises InvalidRequest for an unknown kind or when nothing is left to search."""
        unknown = [k for k in self.kinds if k not in SEARCH_KINDS_BY_NAME]
        if unknown or not self.kinds:
            raise InvalidRequest(
                f"unknown kind {', '.join(map(repr, unknown)) or 'none'}; "
                f"choose from {', '.join(SEARCH_KINDS_BY_NAME)}"
            )
        if (self.path, self.language) == (None, None):
            return self.kinds
        kept = tuple(k for k in self.kinds if k in FILE_KINDS)
        if not kept:
            raise InvalidRequest("path and language apply to code and docs search")
        return kept

    def wire(self) -> dict[str, Any]:
        """The request as the queue and the channel carry it: plain values, so either side
        may run another version of this class."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_wire(cls, given: dict[str, Any]) -> SearchRequest:
        return cls(**given)


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    """The hits of a SearchRequest, kind after kind; ``project``: the project searched (None:
    every project), ``note``: what the asker should be told of that choice (its folder is in
    no watched repository)."""

    hits: tuple[SearchResult, ...]
    project: str | None = None
    note: str | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "hits": [hit.as_dict() for hit in self.hits],
            "project": self.project,
            "note": self.note,
        }

    @classmethod
    def from_wire(cls, given: dict[str, Any]) -> SearchAnswer:
        hits = tuple(SearchResult(**hit) for hit in given["hits"])
        return cls(hits, given["project"], given["note"])


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One hit. Code: project, path, lines and the symbol's name. Memory and goal: session,
    seq, the memory's kind as ``name`` and a one-line snippet as ``text``. ``score``: the
    relevance in [0, 1] (memoryd/searchindex/search.py); ``project``: a memory's or goal's is its
    session's. ``anchor``: for a memory that points at code,
    whether that code is current (memoryd/anchors.py)."""

    kind: str
    id: str
    score: float
    project: str | None = None
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    name: str | None = None
    session: str | None = None
    seq: int | None = None
    text: str | None = None
    anchor: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k in _ALWAYS}

    def line(self) -> str:
        """The CLI's plain output: `project  path:start-end  score  name` for code and docs
        (the project, since one path can exist in every indexed repository)."""
        if self.path is not None:
            where = f"{self.project or '-'}  {self.path}:{self.start_line}-{self.end_line}"
            return f"{where}  {self.score:.4f}  {self.name or '-'}"
        where = self.session if self.seq is None else f"{self.session}#{self.seq}"
        anchor = f" [code {self.anchor}]" if self.anchor else ""
        return f"{where}  {self.score:.4f}  {self.name}{anchor}: {self.text}"


_ALWAYS = frozenset({"kind", "id", "score", "name"})


# How the code a memory points at stands now (memoryd/anchors.py).
State = Literal["current", "changed", "deleted", "unknown"]


class AnchorState(TypedDict):
    """How an anchor stands now: ``since`` when its code was first changed (ISO time),
    ``lines`` how many lines changed (None when the indexer no longer holds the old chunks)."""

    key: str
    kind: str
    state: State
    since: str | None
    lines: int | None


class Action(TypedDict):
    """A verb edge of a session's tool call, as history and session show it."""

    verb: str
    target: str
    target_kind: str | None
    outcome: str | None
    reason: str | None
    exit_code: int | None
    tool: str | None
    detail: str | None
    event_time: str | None
    # History only: how the file a read or edit saw or left stands now (memoryd/anchors.py:
    # `current`, `changed since … (n lines)`, `file deleted`); None when nothing to check.
    anchor: NotRequired[str | None]


class SessionError(TypedDict):
    signature: str
    error: str | None
    message: str | None
    exit_code: int | None
    tool: str | None
    event_time: str | None
    seq: int | None


class SessionSummary(TypedDict, total=False):
    session: str
    agent: str | None
    cwd: str | None
    project: str | None
    git_branch: str | None
    parent: str | None
    agent_type: str | None
    description: str | None
    started_at: str | None
    ended_at: str | None
    goal: str | None
    title: str | None
    source: str | None
    actions: list[Action]
    errors: list[SessionError]


class FileRef(TypedDict):
    kind: str
    key: str
    project: str | None
    path: str | None


class ChunkRef(TypedDict):
    path: str
    start_line: int
    end_line: int
    chunk_type: str
    name: str | None
    parent_name: str | None


class FileHistory(TypedDict):
    """`history FILE`: the sessions that touched it, newest first, and its current chunks."""

    file: FileRef
    sessions: list[SessionSummary]
    notes: list[Note]
    chunks: list[ChunkRef]


class TimelineEvent(TypedDict):
    id: str
    seq: int
    kind: str
    tool: str | None
    event_time: str | None
    text: str


class ReplayEvent(TimelineEvent):
    edges: list[Action]


class Subagent(TypedDict):
    session: str
    description: str | None
    seq: int


class SessionReplay(SessionSummary, total=False):
    """`session ID`: the session's fields, its events in file order, errors and subagents."""

    events: list[ReplayEvent]
    subagents: list[Subagent]


class IndexProgress(TypedDict):
    """The last whole-project sync of a project (`memoryd index`, the daemon's start): state
    is indexing, ready or failed; times are ISO-8601 UTC."""

    state: str
    files_done: int
    files_total: int
    chunks: int
    started_at: str
    finished_at: str | None
    last_error: str | None


class ProjectProgress(TypedDict):
    id: str
    name: str
    root: str
    index: IndexProgress | None  # None: registered, never synced as a whole
    # Valid chunks with their vector of the configured model.
    vectors_done: int
    # Chunks indexed (found by words) whose vectors are still to come: indexing writes chunks
    # first and embeds them after.
    vectors_owed: int
    # The embedding pass they wait for: "full" (the configured model); None when none waits.
    vector_pass: str | None
    # Seconds until every owed chunk (of every project: they share the model) has its vector,
    # at the rate of the last two minutes; None when nothing is owed or the rate is not known.
    vectors_seconds_left: int | None


class PinResult(TypedDict):
    memory: str
    pinned: bool


class Record(TypedDict, total=False):
    """`get`: one full record. ``id`` is qualified (`code:…`, `memory:…`, `goal:…`). Code:
    project, path, the lines shown (``start_line``-``end_line``) and the chunk's own last line
    ``chunk_end_line``; memory and goal: session and seq. ``truncated``: the text was cut to
    the size budget (whole lines for code)."""

    id: str
    kind: str
    project: str | None
    path: str | None
    language: str | None
    name: str | None
    start_line: int | None
    end_line: int | None
    chunk_end_line: int | None
    session: str | None
    seq: int | None
    tool: str | None
    event_time: str | None
    pinned: bool | None
    valid: bool
    text: str
    truncated: bool
    anchor: str | None


class Timeline(TypedDict):
    """`timeline`: the memories of one session around an anchor, in file order."""

    session: str
    project: str | None
    anchor: str
    anchor_seq: int
    events: list[TimelineEvent]


class EditedFiles(TypedDict):
    """The files a session modified: the most edited first (then the first edited, then by
    path), a few, and how many more."""

    files: list[str]
    more: int


class RecentSession(TypedDict):
    session: str
    agent: str | None
    project: str | None
    git_branch: str | None
    started_at: str | None
    ended_at: str | None
    goals: list[str]
    modified: EditedFiles


class FileChange(TypedDict):
    file: str
    project: str | None
    edits: int
    sessions: int
    last_at: str | None
    last_session: str
    # How the file stands now against what that last edit left (memoryd/anchors.py).
    anchor: str | None


class OpenFailure(TypedDict):
    """An action that failed and was not followed, later in the window, by a success of an
    action on the same target (the same command, the same file)."""

    verb: str
    target: str
    target_kind: str | None
    tool: str | None
    exit_code: int | None
    message: str | None
    detail: str | None
    event_time: str | None
    session: str
    seq: int | None


class Note(TypedDict):
    id: str
    kind: str
    text: str
    event_time: str | None
    # How the code it names stands now (memoryd/anchors.py); None when it names none.
    anchor: str | None


class RecentActivity(TypedDict):
    project: str | None
    since: str
    sessions: list[RecentSession]
    files: list[FileChange]
    failures: list[OpenFailure]
    notes: list[Note]


class Remembered(TypedDict):
    id: str
    session: str
    seq: int
    kind: str
    pinned: bool
    files: list[str]


class Forgotten(TypedDict):
    ids: list[str]
    removed: dict[str, int]


class ProjectInfo(TypedDict):
    id: str
    name: str
    root: str


class GraphLink(TypedDict):
    """A neighbour in the code graph: the entity's key (`<project>:<path>#<Name>`, a file's
    `<project>:<path>`, or an external module's `<language>:<name>`), the file and line of the
    site (the call, the import, the definition), and how sure: 1 when the file's imports and
    scope settle it, 1/n for a guess by name among n symbols of that name."""

    key: str
    path: str
    line: int | None
    confidence: float


class GraphTarget(TypedDict):
    kind: str
    key: str
    project: str
    path: str


class CoChange(TypedDict):
    path: str
    count: float
    last_at: str | None


class TouchedBy(TypedDict):
    path: str
    session: str | None
    verbs: list[str]
    last_at: str | None


class Related(TypedDict):
    """`related TARGET`: the code graph around a file, symbol or chunk (README, "Code graph")."""

    target: GraphTarget
    as_of: str | None
    definitions: list[GraphLink]
    callers: list[GraphLink]
    callees: list[GraphLink]
    importers: list[GraphLink]
    imports: list[GraphLink]
    bases: list[GraphLink]
    subclasses: list[GraphLink]
    changes_with: list[CoChange]
    sessions: list[TouchedBy]


class Dependent(TypedDict):
    path: str
    depth: int
    via: str  # imports | calls
    of: str  # the file it depends on, one step nearer the changed ones
    test: bool


class FailureAfterEdit(TypedDict):
    path: str
    session: str
    error: str
    tool: str | None
    at: str | None


class Impact(TypedDict):
    """`impact FILE…`: what depends on these files, the tests among them, and the errors that
    followed earlier edits of them."""

    paths: list[str]
    depth: int
    dependents: list[Dependent]
    tests: list[Dependent]
    failures: list[FailureAfterEdit]
