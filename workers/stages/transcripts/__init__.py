"""Transcript parsers, one module per agent, behind a small pluggable registry.

Typical use by the ingestion job (all pure apart from reading the file)::

    agent = detect_agent(head_bytes, path)            # "claude-code" | "codex" | "gemini" | None
    parser = parser_for(agent)
    lines, next_offset = read_lines(f, stored_offset)  # or split_lines(buf, stored_offset)
    result = parser.parse(lines, ParserState.from_json(stored) if stored else None,
                          Source.of(path, projects))
    # write result.events / result.sessions, then store next_offset and result.state.to_json()

A parser module provides ``AGENT``, ``detect(head) -> bool`` (content),
``detect_path(path) -> bool`` (fallback when the content is not conclusive), ``new_state()`` and
``parse(lines, state, source) -> ParseResult``. Modules are imported lazily, so registering a
new agent (Gemini, aider…) is one :func:`register` call.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Protocol, cast

from workers.stages.transcripts.events import (
    Action,
    Denied,
    Event,
    Goal,
    Media,
    Memory,
    SessionInfo,
    Source,
    Spawned,
    Summary,
    Triggered,
)
from workers.stages.transcripts.lines import Line, Skipped, decode_line, read_lines, split_lines
from workers.stages.transcripts.state import ParseResult, ParserState, pending_actions

__all__ = [
    "Action",
    "Denied",
    "Event",
    "Goal",
    "Line",
    "Media",
    "Memory",
    "ParseResult",
    "ParserState",
    "SessionInfo",
    "Skipped",
    "Source",
    "Spawned",
    "Summary",
    "TranscriptParser",
    "Triggered",
    "decode_line",
    "detect_agent",
    "parser_for",
    "pending_actions",
    "read_lines",
    "register",
    "registered_agents",
    "split_lines",
]


class TranscriptParser(Protocol):
    """What a parser module provides."""

    AGENT: str

    def detect(self, head: bytes) -> bool: ...

    def detect_path(self, path: str) -> bool: ...

    def new_state(self) -> ParserState: ...

    def parse(
        self, lines: Iterable[Line], state: ParserState | None, source: Source | str
    ) -> ParseResult: ...


# agent name → module path; order is detection order (most specific content checks first).
_REGISTRY: dict[str, str] = {
    "codex": "workers.stages.transcripts.codex",
    "gemini": "workers.stages.transcripts.gemini",  # before Claude Code: both write "sessionId"
    "claude-code": "workers.stages.transcripts.claude_code",
    "aider": "workers.stages.transcripts.aider",
}


def register(agent: str, module: str) -> None:
    """Add (or replace) the parser module for ``agent``."""
    _REGISTRY[agent] = module


def registered_agents() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def parser_for(agent: str) -> TranscriptParser:
    """The parser module for ``agent``; KeyError for an agent nobody registered."""
    return cast(TranscriptParser, _load(_REGISTRY[agent]))


def detect_agent(head: bytes, path: str) -> str | None:
    """Which agent wrote a transcript: from its first bytes, else from where it lives."""
    for agent in _REGISTRY:
        if parser_for(agent).detect(head):
            return agent
    normalized = path.replace("\\", "/")
    for agent in _REGISTRY:
        if parser_for(agent).detect_path(normalized):
            return agent
    return None


def _load(module: str) -> ModuleType:
    return importlib.import_module(module)
