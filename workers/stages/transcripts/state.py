"""What a parser remembers between batches of one transcript, and the verb edges of calls
still waiting for their result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from memoryd import vocabulary
from workers.stages.entities import (
    Entity,
)
from workers.stages.transcripts.events import (
    PENDING,
    STATE_VERSION,
    Action,
    Event,
    SessionInfo,
    Target,
)
from workers.stages.transcripts.lines import Skipped


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
        for target in targets_from_json(call["targets"]):
            out.append(call_action(call, target, PENDING, None))
    return out


def target_json(t: Target) -> dict[str, Any]:
    return {"verb": t.verb, "entity": asdict(t.entity), "detail": t.detail, "via": t.via}


def targets_from_json(items: list[dict[str, Any]]) -> list[Target]:
    return [
        Target(
            t["verb"],
            Entity(**t["entity"]),
            t.get("detail", ""),
            t.get("via") or vocabulary.VIA_TOOL,
        )
        for t in items
    ]


def call_action(
    call: dict[str, Any], target: Target, outcome: str, exit_code: int | None
) -> Action:
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
