"""What transcript parsers produce, the state they carry between batches, and the bookkeeping
both parsers share.

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

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from memoryd import vocabulary
from memoryd.ids import stable_id
from workers.stages.entities import (
    NAME,
    READ,
    WRITE,
    Entity,
    Project,
    ProjectsLike,
    as_projects,
    canonical_commands,
    canonical_file,
    canonical_tool,
    files_in_command,
    guess_home,
)
from workers.stages.redact import SecretMemory, redact
from workers.stages.transcripts.lines import Skipped

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


@dataclass
class ParserState:
    """Everything a parser must remember between batches. JSON-serialisable via ``to_json``.

    ``sessions``: per session id, the :class:`SessionInfo` fields plus ``has_goal``.
    ``pending``: per transcript call id, a call whose result has not been seen.
    ``links``: namespaced lookups (``shell:<id>``/``proc:<n>`` → call id, ``chain:<uuid>`` →
    sidechain root, ``spawn:<hash>`` → Task call id). ``context``: per-agent scalars.
    ``secrets``: fingerprints of the secret values redacted so far in this transcript, so a
    value found once is redacted wherever it appears again, in later batches too. The state is
    stored in the cursor row, in the database: it holds fingerprints only, never a value (see
    :class:`~workers.stages.redact.SecretMemory`). One transcript file is one session, or a session
    with its inline subagents: remembering per file covers the session.
    """

    agent: str
    seq: int = 0
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    version: int = STATE_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ParserState:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def copy(self) -> ParserState:
        """A deep copy (via JSON types), so a parse never mutates the caller's state."""
        return ParserState(
            agent=self.agent,
            seq=self.seq,
            sessions={k: dict(v) for k, v in self.sessions.items()},
            pending={k: _deep(v) for k, v in self.pending.items()},
            links=dict(self.links),
            context=_deep(self.context),
            secrets=dict(self.secrets),
            version=self.version,
        )


def _deep(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class ParseResult:
    events: tuple[Event, ...]
    state: ParserState
    skipped: tuple[Skipped, ...] = ()
    sessions: tuple[SessionInfo, ...] = ()

    @property
    def pending(self) -> tuple[Action, ...]:
        return tuple(pending_actions(self.state))


def pending_actions(state: ParserState) -> list[Action]:
    """Verb edges of calls still waiting for a result, with outcome ``"pending"``."""
    out: list[Action] = []
    for call in state.pending.values():
        for target in _targets_from_json(call["targets"]):
            out.append(_action(call, target, PENDING, None))
    return out


# --------------------------------------------------------------------------------------------
# Shared helpers


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_GREETING = re.compile(
    r"(?:hi|hello|hey|hiya|howdy|hola|yo|greetings|good (?:morning|afternoon|evening))"
    r"(?: there| all| everyone)?[\s!.,:;)]*",
    re.IGNORECASE,
)


def clean_text(text: str) -> str:
    """Strip terminal colour codes and NULs; normalise newlines."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.replace("\x00", "").replace("\r\n", "\n")


def safe_text(text: str, cap: int, memory: SecretMemory | None = None) -> str:
    """Redact and cap text for storage (``memory``: values found before in the transcript).

    Only about twice the cap is redacted (a MB of tool output costs no more than 8 KB); a
    secret cut by that first trim can only sit beyond ``cap`` and is dropped by the second.
    """
    text = clean_text(text)
    if len(text) > cap:
        return redact(text[: cap * 2], memory)[:cap].rstrip() + " …[truncated]"
    return redact(text, memory)


def norm_time(value: Any) -> str | None:
    """ISO-8601 (any offset) or epoch seconds/ms → ``YYYY-MM-DDTHH:MM:SS.mmmZ``; else None."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, int | float):
            secs = value / 1000 if value > 1e11 else value
            dt = datetime.fromtimestamp(secs, UTC)
        else:
            dt = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
            dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _target_json(t: Target) -> dict[str, Any]:
    return {"verb": t.verb, "entity": asdict(t.entity), "detail": t.detail, "via": t.via}


def _targets_from_json(items: list[dict[str, Any]]) -> list[Target]:
    return [
        Target(
            t["verb"],
            Entity(**t["entity"]),
            t.get("detail", ""),
            t.get("via") or vocabulary.VIA_TOOL,
        )
        for t in items
    ]


def _action(call: dict[str, Any], target: Target, outcome: str, exit_code: int | None) -> Action:
    memory_id = call["memory_id"]
    return Action(
        id=vocabulary.edge(target.verb).row_id(memory_id, target.entity.kind, target.entity.key),
        verb=target.verb,
        memory_id=memory_id,
        session_id=call["session_id"],
        entity=target.entity,
        tool=call["tool"],
        event_time=call.get("event_time"),
        outcome=outcome,
        exit_code=exit_code,
        detail=target.detail,
        via=target.via,
    )


def safe_target(t: Target, memory: SecretMemory | None = None) -> Target:
    """A target with its entity and detail redacted (details hold command lines)."""
    entity = safe_entity(t.entity, memory)
    return Target(t.verb, entity, safe_text(t.detail, CAP_DETAIL, memory), t.via)


def safe_entity(e: Entity, memory: SecretMemory | None = None) -> Entity:
    """Redact the parts of an entity that keep free text (raw alias; URL key; error name)."""
    raw = safe_text(e.raw, CAP_DETAIL, memory)
    key = redact(e.key, memory) if e.kind == vocabulary.URL else e.key
    name = safe_text(e.name, 200, memory)
    if (raw, key, name) == (e.raw, e.key, e.name):
        return e
    return replace(e, raw=raw, key=key, name=name)


class Emitter:
    """Builds events for one parse call and keeps :class:`ParserState` up to date.

    Both parsers use it, so ids, redaction, caps, call/outcome bookkeeping and session
    tracking are defined once.
    """

    def __init__(self, state: ParserState, source: Source) -> None:
        self.state = state
        self.source = source
        self.projects = source.projects
        self.events: list[Event] = []
        self.skipped: list[Skipped] = []
        self._touched: list[str] = []
        # Shares the state's dict: what is found is saved with the state.
        self.secrets = SecretMemory(source.path, state.secrets)
        state.secrets = self.secrets.fingerprints

    def safe(self, text: str, cap: int) -> str:
        """Redacted and capped, with what this transcript revealed before."""
        return safe_text(text, cap, self.secrets)

    # -- sessions ---------------------------------------------------------------------------

    def session(self, session_id: str, **fields: Any) -> dict[str, Any]:
        """Create or update a session. ``cwd`` is kept from the first record that has one (the
        session's start directory); ``event_time`` widens started/ended; other fields are set
        when given a value."""
        s = self.state.sessions.get(session_id)
        if s is None:
            s = {"session_id": session_id, "agent": self.state.agent, "has_goal": False}
            s["source_path"] = self.source.path
            self.state.sessions[session_id] = s
        ts = fields.pop("event_time", None)
        if ts:
            if not s.get("started_at") or ts < s["started_at"]:
                s["started_at"] = ts
            if not s.get("ended_at") or ts > s["ended_at"]:
                s["ended_at"] = ts
        cwd = fields.pop("cwd", None)
        if cwd and not s.get("cwd"):
            s["cwd"] = cwd
            s["project_id"] = self._project_of(cwd)
        for k, v in fields.items():
            if v is not None and v != "":
                s[k] = v
        if session_id not in self._touched:
            self._touched.append(session_id)
        return s

    def _project_of(self, cwd: str) -> str | None:
        for p in self.projects:
            if cwd == p.root or cwd.startswith(p.root.rstrip("/") + "/"):
                return p.id
        return None

    def file(self, path: str | None, cwd: str | None) -> Entity | None:
        """The file entity a tool's path argument names, ``~`` expanded with the writer's home."""
        home = self.source.home or guess_home(cwd)
        return canonical_file(path, cwd, self.projects, home=home)

    def has_goal(self, session_id: str) -> bool:
        return bool(self.state.sessions.get(session_id, {}).get("has_goal"))

    # -- memories and goals -----------------------------------------------------------------

    def memory(
        self,
        session_id: str,
        kind: str,
        content: str,
        *,
        key: tuple[str, ...],
        event_time: str | None,
        offset: int,
        cap: int = CAP_TEXT,
        source_id: str | None = None,
        tool: str | None = None,
        call_id: str | None = None,
        media: tuple[Media, ...] = (),
    ) -> Memory | None:
        """Emit a memory; empty content (with no media) is not worth one."""
        text = self.safe(content, cap).strip()
        if not text and not media:
            return None
        mem = Memory(
            id=self.memory_id(session_id, *key),
            session_id=session_id,
            kind=kind,
            content=text,
            event_time=event_time,
            seq=self.state.seq,
            byte_offset=offset,
            source_id=source_id,
            tool=tool,
            call_id=call_id,
            media=media,
        )
        self.state.seq += 1
        self.events.append(mem)
        return mem

    def memory_id(self, session_id: str, *key: str) -> str:
        return stable_id(self.state.agent, session_id, *key)

    def goal(self, session_id: str, intent: str, memory: Memory | None) -> None:
        """Record the session's goal, once per session. A prompt that only greets (``hello``)
        is none: the request comes in the next prompt."""
        text = self.safe(intent, CAP_GOAL).strip()
        if not text or memory is None or self.has_goal(session_id) or _GREETING.fullmatch(text):
            return
        self.state.sessions[session_id]["has_goal"] = True
        goal_id = stable_id("goal", memory.id)
        self.events.append(Goal(goal_id, session_id, text, memory.id, memory.event_time))

    def summary(self, leaf_uuid: str, text: str, offset: int) -> None:
        clean = self.safe(text, CAP_GOAL).strip()
        if leaf_uuid and clean:
            self.events.append(Summary(stable_id("summary", leaf_uuid), leaf_uuid, clean, offset))

    # -- calls and outcomes -----------------------------------------------------------------

    def call(
        self,
        call_id: str,
        *,
        session_id: str,
        memory_id: str,
        tool: str,
        event_time: str | None,
        targets: Iterable[Target],
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Register a tool call; its edges are emitted when :meth:`resolve` learns the outcome.
        ``extra``: parser-specific JSON data kept with the pending call."""
        self.state.pending[call_id] = {
            # A parser's extras may hold free text (a Task's description): the state is stored.
            "extra": {
                k: self.safe(v, CAP_DETAIL) if isinstance(v, str) else v
                for k, v in (extra or {}).items()
            },
            "session_id": session_id,
            "memory_id": memory_id,
            "tool": tool,
            "event_time": event_time,
            "targets": [_target_json(safe_target(t, self.secrets)) for t in targets],
        }

    def resolve(
        self,
        call_id: str,
        outcome: str,
        *,
        exit_code: int | None = None,
        error: Entity | None = None,
        message: str = "",
        denial: str | None = None,
        replace_verb: str | None = None,
        extra: Iterable[Target] = (),
    ) -> bool:
        """Close a pending call: emit its edges with ``outcome``, or Denied edges when
        ``denial`` is given, plus Triggered when it failed. ``replace_verb`` drops the call's
        own targets of that verb in favour of ``extra`` (authoritative ones from the result).
        Returns False when the call is unknown or already resolved (a later, weaker signal)."""
        call = self.state.pending.pop(call_id, None)
        if call is None:
            return False
        targets = [t for t in _targets_from_json(call["targets"]) if t.verb != replace_verb]
        targets += [safe_target(t, self.secrets) for t in extra]
        if denial:
            self._denied(call, targets, denial, message)
            return True
        for t in targets:
            self.events.append(_action(call, t, outcome, exit_code))
        if outcome == ERROR:
            self.triggered(call, error, exit_code, message)
        return True

    def _denied(
        self, call: dict[str, Any], targets: list[Target], reason: str, message: str
    ) -> None:
        entities = [t.entity for t in targets] or [
            safe_entity(canonical_tool(call["tool"]), self.secrets)
        ]
        seen: set[tuple[str, str]] = set()
        for e in entities:
            if (e.kind, e.key) in seen:
                continue
            seen.add((e.kind, e.key))
            self.events.append(
                Denied(
                    id=vocabulary.DENIED.row_id(call["memory_id"], e.kind, e.key),
                    memory_id=call["memory_id"],
                    session_id=call["session_id"],
                    entity=e,
                    tool=call["tool"],
                    event_time=call.get("event_time"),
                    reason=reason,
                    message=self.safe(message, CAP_DETAIL),
                )
            )

    def triggered(
        self,
        call: dict[str, Any],
        error: Entity | None,
        exit_code: int | None,
        message: str,
    ) -> None:
        if error is None:
            return
        error = safe_entity(error, self.secrets)
        self.events.append(
            Triggered(
                id=vocabulary.TRIGGERED.row_id(call["memory_id"], error.key),
                memory_id=call["memory_id"],
                session_id=call["session_id"],
                error=error,
                tool=call["tool"],
                event_time=call.get("event_time"),
                exit_code=exit_code,
                # the failure as it appeared (the line its signature was read from), not the
                # whole output: the memory holds that
                message=error.raw or self.safe(message, CAP_DETAIL),
            )
        )

    def edges(
        self,
        *,
        session_id: str,
        memory_id: str,
        tool: str,
        event_time: str | None,
        targets: Iterable[Target],
        outcome: str,
        exit_code: int | None = None,
    ) -> None:
        """Emit edges whose outcome a result event states directly (Codex exec/patch ends)."""
        call = {"session_id": session_id, "memory_id": memory_id, "tool": tool}
        call["event_time"] = event_time
        for t in targets:
            self.events.append(_action(call, safe_target(t, self.secrets), outcome, exit_code))

    def spawned(
        self,
        *,
        session_id: str,
        memory_id: str,
        child_session_id: str,
        agent_id: str | None,
        event_time: str | None,
        agent_type: str | None = None,
        description: str | None = None,
    ) -> None:
        self.events.append(
            Spawned(
                id=vocabulary.SPAWNED.row_id(memory_id, child_session_id),
                memory_id=memory_id,
                session_id=session_id,
                child_session_id=child_session_id,
                agent_id=agent_id,
                event_time=event_time,
                agent_type=agent_type,
                description=self.safe(description, CAP_DETAIL) if description else None,
            )
        )

    # -- reporting --------------------------------------------------------------------------

    def skip(self, offset: int, reason: str, excerpt: str = "") -> None:
        # A reason may quote the record (its type, an exception's text): it is logged.
        self.skipped.append(Skipped(offset, self.safe(reason, 300), self.safe(excerpt, 80)))

    def result(self) -> ParseResult:
        sessions = tuple(self._session_info(sid) for sid in self._touched)
        return ParseResult(tuple(self.events), self.state, tuple(self.skipped), sessions)

    def _session_info(self, session_id: str) -> SessionInfo:
        data = self.state.sessions[session_id]
        fields = {k: v for k, v in data.items() if k in SessionInfo.__dataclass_fields__}
        return SessionInfo(**fields)
