"""What transcript parsers produce (the state they carry between batches is in
:mod:`~workers.stages.transcripts.state`, their shared bookkeeping in
:mod:`~workers.stages.transcripts.emitter`).

A parser is fed complete lines from a stored byte offset and returns a :class:`ParseResult`:

``events``
    Append-only facts in file order, each with a deterministic ``id`` (derived from the
    transcript's own uuid / call_id, or the byte offset where a format has no ids), so writing
    them is an upsert and re-reading a file from 0 produces identical events:

    - :class:`Memory`: one observation (prompt, assistant text, tool call, tool result, error,
      summary). ``content`` is redacted and capped; base64 media and thinking text are dropped.
    - :class:`Goal`: what the user asked for (the first real prompt of a session).
    - :class:`Action`: a verb edge ``READS``/``MODIFIES``/``EXECUTES``/``MENTIONS`` from a
      tool-call memory to an :class:`~workers.stages.entities.Entity` (file, command, url, tool).
      Emitted once the call's outcome is known (``"ok"``/``"error"``), so it never needs
      retracting. ``outcome`` is what the agent reported: a pipeline's exit status is its last
      command's. ``via`` says where the access was seen: ``"tool"`` (the agent's own tool:
      Read, Edit, apply_patch, Bash for EXECUTES) or ``"shell"`` for the edges a shell command
      line implies (``cat f`` READS f, ``> f`` MODIFIES f, ``pytest f`` MENTIONS f).
    - :class:`Triggered`: a failed call → an error entity (signature key).
    - :class:`Denied`: a call the user rejected or a permission rule blocked → its target. Not a
      failure and not a verb edge: a denied call gets no READS/MODIFIES/EXECUTES.
    - :class:`Spawned`: a Task/Agent call → the subagent session it started.
    - :class:`Summary`: a Claude ``summary`` record: a title for the session that owns
      ``leaf_uuid`` (usually another file's session).

An id may occur twice (a Codex edge stated by two result events): writes are upserts.

``sessions``
    :class:`SessionInfo` snapshots of the sessions this batch touched (upsert by ``session_id``;
    ``ended_at`` grows as the file grows).

``pending``
    Verb edges of calls whose result has not been seen yet (outcome ``"pending"``). They are
    *not* events: the result may still turn the call into a denial. Show them as in-flight.

``state``
    A JSON-serialisable :class:`ParserState` to store next to the byte offset and pass to the
    next call (``ParserState.from_json(state.to_json())`` round-trips).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memoryd import vocabulary
from workers.stages.entities import (
    NAME,
    READ,
    WRITE,
    Entity,
    Project,
    ProjectsLike,
    as_projects,
    canonical_commands,
    files_in_command,
    guess_home,
)

# Caps on stored text. Embedding models read ~256 tokens; the rest is for display and BM25.
CAP_TEXT = 16_000  # prompts, assistant messages, summaries
CAP_TOOL_INPUT = 2_000  # the rendered tool call
CAP_TOOL_OUTPUT = 4_000  # tool results and errors
CAP_GOAL = 2_000
CAP_DETAIL = 1_000  # command lines / change summaries on edges

READS, MODIFIES, EXECUTES, MENTIONS = (
    vocabulary.READS.name,
    vocabulary.MODIFIES.name,
    vocabulary.EXECUTES.name,
    vocabulary.MENTIONS.name,
)
# Provenance of an edge read off a shell command line rather than the agent's own tool.
SHELL = vocabulary.VIA_SHELL
OK, ERROR, PENDING = "ok", "error", "pending"
USER_REJECTED, PERMISSION_DENIED = "user_rejected", "permission_denied"

STATE_VERSION = 1


# --------------------------------------------------------------------------------------------
# Output


@dataclass(frozen=True, slots=True)
class Source:
    """Where the lines come from and how to canonicalise what they name.

    ``projects``: watched projects as ``Project`` or ``(project_id, root)`` pairs.
    ``subagent_meta``: the parsed ``agent-<id>.meta.json`` next to a Claude Code 2.1.2+ subagent
    transcript (``{agentType, description, worktreePath?}``), if the caller read it.
    ``home``: the home directory of whoever wrote the transcript, for ``~`` in commands
    (guessed from ``path`` when not given; a session's cwd may tell it later).
    ``written``: the file's size and the time it was last written (ISO), for a format whose
    lines carry no time of their own (aider's): the line ending there was written then.
    """

    path: str
    projects: tuple[Project, ...] = ()
    subagent_meta: dict[str, Any] | None = None
    home: str | None = None
    written: tuple[int, str] | None = None

    def __post_init__(self) -> None:
        # Accept (project_id, root) pairs too; frozen, hence object.__setattr__.
        object.__setattr__(self, "projects", as_projects(self.projects))
        if self.home is None:
            object.__setattr__(self, "home", guess_home(self.path))

    @classmethod
    def of(
        cls,
        path: str,
        projects: ProjectsLike | None = None,
        subagent_meta: dict[str, Any] | None = None,
        written: tuple[int, str] | None = None,
    ) -> Source:
        return cls(path, as_projects(projects), subagent_meta, written=written)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session. ``session_id`` is ours: the transcript's id, or for a subagent
    ``"<parent session id>:agent-<agent id>"`` (``:sidechain-<root uuid>`` for Claude Code
    ≤1.0 inline sidechains). ``external_id`` is the id written in the records."""

    session_id: str
    agent: str
    source_path: str
    external_id: str | None = None
    parent_session_id: str | None = None
    agent_id: str | None = None
    cwd: str | None = None
    project_id: str | None = None
    git_branch: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    version: str | None = None
    agent_type: str | None = None
    description: str | None = None
    warmup: bool = False  # a Claude Code "Warmup" subagent: noise, no goal


@dataclass(frozen=True, slots=True)
class Media:
    """An image or other binary payload that was dropped: what it was and how big."""

    media_type: str
    size: int


@dataclass(frozen=True, slots=True)
class Memory:
    """One observation in a session.

    ``kind``: user_prompt | assistant_message | tool_call | tool_result | error | summary.
    ``seq``: position in file order (per parser state). ``source_id``: the transcript's own id
    of the record (uuid, tool call id) when it has one. ``call_id``: links a tool_result/error
    to its tool_call (for Codex polls, the call that started the process).
    """

    id: str
    session_id: str
    kind: str
    content: str
    event_time: str | None
    seq: int
    byte_offset: int
    source_id: str | None = None
    tool: str | None = None
    call_id: str | None = None
    media: tuple[Media, ...] = ()


@dataclass(frozen=True, slots=True)
class Goal:
    """What the user asked for: the first real prompt of a session."""

    id: str
    session_id: str
    intent: str
    memory_id: str
    event_time: str | None


@dataclass(frozen=True, slots=True)
class Action:
    """A verb edge from a tool-call memory to what it touched."""

    id: str
    verb: str  # READS | MODIFIES | EXECUTES
    memory_id: str
    session_id: str
    entity: Entity
    tool: str
    event_time: str | None  # when the call was made
    outcome: str  # ok | error (| pending, only in ParseResult.pending)
    exit_code: int | None = None
    detail: str = ""  # the command line, or what the change was
    # where the access was seen: the agent's own tool, or (SHELL) a shell command line
    via: str = vocabulary.VIA_TOOL


@dataclass(frozen=True, slots=True)
class Triggered:
    """A failed call → the error entity whose key is the failure's signature."""

    id: str
    memory_id: str
    session_id: str
    error: Entity
    tool: str
    event_time: str | None
    exit_code: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Denied:
    """A call that was refused (``reason``: user_rejected | permission_denied) → its target."""

    id: str
    memory_id: str
    session_id: str
    entity: Entity
    tool: str
    event_time: str | None
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Spawned:
    """A Task/Agent call → the subagent session it started."""

    id: str
    memory_id: str
    session_id: str
    child_session_id: str
    agent_id: str | None
    event_time: str | None
    agent_type: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """A title for whichever session holds the memory whose ``source_id`` is ``leaf_uuid``."""

    id: str
    leaf_uuid: str
    text: str
    byte_offset: int


Event = Memory | Goal | Action | Triggered | Denied | Spawned | Summary


@dataclass(frozen=True, slots=True)
class Target:
    """What a tool call will touch, known when the call is made; becomes an edge later."""

    verb: str
    entity: Entity
    detail: str = ""
    via: str = vocabulary.VIA_TOOL


def shell_targets(command: str | Sequence[str], cwd: str | None, source: Source) -> list[Target]:
    """A shell command's targets: EXECUTES per program run, and the files it reads, writes or
    only names (READS / MODIFIES / MENTIONS, marked ``via=SHELL``), resolved where it ran."""
    line = command if isinstance(command, str) else shlex.join(command)
    detail = line[:CAP_DETAIL]
    targets = [Target(EXECUTES, e, detail) for e in canonical_commands(command)]
    home = source.home or guess_home(cwd)
    for use in files_in_command(line, cwd, source.projects, home):
        targets.append(Target(_SHELL_VERBS[use.access], use.entity, detail, SHELL))
    return targets


_SHELL_VERBS = {READ: READS, WRITE: MODIFIES, NAME: MENTIONS}
