"""The parsers' shared bookkeeping: ids, redaction, caps, calls and their outcomes, sessions."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from memoryd import vocabulary
from memoryd.ids import stable_id
from workers.stages.entities import (
    Entity,
    canonical_file,
    canonical_tool,
    guess_home,
)
from workers.stages.redact import SecretMemory
from workers.stages.transcripts.events import (
    CAP_DETAIL,
    CAP_GOAL,
    CAP_TEXT,
    ERROR,
    Denied,
    Event,
    Goal,
    Media,
    Memory,
    SessionInfo,
    Source,
    Spawned,
    Summary,
    Target,
    Triggered,
)
from workers.stages.transcripts.lines import Skipped
from workers.stages.transcripts.state import (
    ParseResult,
    ParserState,
    call_action,
    target_json,
    targets_from_json,
)
from workers.stages.transcripts.text import safe_entity, safe_target, safe_text

_GREETING = re.compile(
    r"(?:hi|hello|hey|hiya|howdy|hola|yo|greetings|good (?:morning|afternoon|evening))"
    r"(?: there| all| everyone)?[\s!.,:;)]*",
    re.IGNORECASE,
)


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

    @classmethod
    def for_parse(cls, agent: str, state: ParserState | None, source: Source | str) -> Emitter:
        """One parse call's emitter: on a copy of `state` (a parse never changes the caller's),
        or on a new state of `agent`."""
        src = source if isinstance(source, Source) else Source(source)
        return cls(state.copy() if state else ParserState(agent=agent), src)

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
            "targets": [target_json(safe_target(t, self.secrets)) for t in targets],
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
        targets = [t for t in targets_from_json(call["targets"]) if t.verb != replace_verb]
        targets += [safe_target(t, self.secrets) for t in extra]
        if denial:
            self._denied(call, targets, denial, message)
            return True
        for t in targets:
            self.events.append(call_action(call, t, outcome, exit_code))
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
            self.events.append(call_action(call, safe_target(t, self.secrets), outcome, exit_code))

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
