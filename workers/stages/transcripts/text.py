"""Text as transcripts are stored: cleaned, redacted and capped; times in one form."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from memoryd import vocabulary
from workers.stages.entities import (
    Entity,
)
from workers.stages.redact import SecretMemory, redact
from workers.stages.transcripts.events import CAP_DETAIL, Target

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


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
