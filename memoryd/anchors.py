"""Memories checked against the code: a memory that points at code carries anchors, each the
file or symbol entity it names and the hash of that code when the memory was made, and when
it is shown it says whether that code is `current`, `changed since <when> (<n> lines)` or
`file deleted`.

The hashes are the indexer's own (memoryd/store/code.py keeps every chunk's `content_hash`
and its file's `file_hash`, and keeps replaced chunks with their validity times), so checking
an anchor reads no file: a file's anchor is the `file_hash` of its chunks, a symbol's the
`content_hash` of the chunks that define it (DEFINED_IN). How many lines changed is the
difference between the chunks valid when the memory was made and those valid now.

:func:`anchor_states` is the one call that says how a memory's anchors stand (the hooks, the
MCP tools, `get` and search use it); :func:`anchor_text` is how they print it.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict

from memoryd.results import AnchorState, State
from memoryd.vocabulary import FILE

CURRENT: State = "current"
CHANGED: State = "changed"
DELETED: State = "deleted"
# The code was not indexed when the memory was made: nothing to compare with.
UNKNOWN: State = "unknown"
# A stale memory's ranking score is multiplied by this: below a current one of the same
# relevance, still found.
STALE_FACTOR = 0.5


class Anchor(TypedDict):
    """As stored on a memory (`anchors`): the entity's kind (file or symbol) and key, the hash
    of its code at `at` (None: not indexed then)."""

    kind: str
    key: str
    hash: str | None
    at: datetime | str


def code_hash(kind: str, chunks: Sequence[dict[str, Any]]) -> str | None:
    """The hash an anchor keeps of its code: the file's hash, or a symbol's chunk hashes."""
    if not chunks:
        return None
    if kind == FILE:
        return str(chunks[0]["file_hash"])
    return ",".join(sorted(str(c["content_hash"]) for c in chunks))


def _valid_now(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if "content" in r and r.get("valid_until") is None]


def make_anchors(
    targets: Sequence[tuple[str, str]], chunks: Sequence[Sequence[dict[str, Any]]], at: datetime
) -> list[Anchor]:
    """Anchors of (kind, key) targets from their chunks valid at `at` (`anchor_chunks`)."""
    return [
        Anchor(kind=kind, key=key, hash=code_hash(kind, _at(rows, at)), at=at)
        for (kind, key), rows in zip(targets, chunks, strict=True)
    ]


def _at(rows: Sequence[dict[str, Any]], at: datetime) -> list[dict[str, Any]]:
    """The chunk rows that were valid at `at`."""
    return [
        r
        for r in rows
        if "content" in r
        and _time(r["valid_from"]) <= at
        and (r.get("valid_until") is None or _time(r["valid_until"]) > at)
    ]


def _time(value: datetime | str) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def state_of(anchor: Anchor, rows: Sequence[dict[str, Any]]) -> AnchorState:
    """How `anchor` stands, from its chunks valid now and at its time (`anchor_chunks`)."""
    at = _time(anchor["at"])
    now = _valid_now(rows)
    file_gone = not now if anchor["kind"] == FILE else not rows[-1].get("file_chunks")
    if anchor["hash"] is None:
        return _state(anchor, DELETED if file_gone else UNKNOWN)
    if code_hash(anchor["kind"], now) == anchor["hash"]:
        return _state(anchor, CURRENT)
    then = _at(rows, at)
    replaced = [r for r in then if r.get("valid_until") is not None]
    added = [r for r in now if _time(r["valid_from"]) > at]
    times = [_time(r["valid_until"]) for r in replaced] + [_time(r["valid_from"]) for r in added]
    return _state(
        anchor,
        DELETED if file_gone else CHANGED,
        min(times).isoformat() if times else None,
        # The old chunks are gone once pruned: then how much changed is not known.
        _changed_lines(replaced, added) if then else None,
    )


def _state(
    anchor: Anchor, state: State, since: str | None = None, lines: int | None = None
) -> AnchorState:
    return AnchorState(
        key=anchor["key"], kind=anchor["kind"], state=state, since=since, lines=lines
    )


def _changed_lines(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> int:
    """Lines that differ between two sets of chunks (in line order): the larger of the lines
    removed and the lines added, so one line rewritten counts once."""
    before = [line for c in old for line in str(c["content"]).splitlines()]
    after = [line for c in new for line in str(c["content"]).splitlines()]
    removed = added = 0
    for line in difflib.unified_diff(before, after, lineterm="", n=0):
        if line.startswith("-") and not line.startswith("---"):
            removed += 1
        elif line.startswith("+") and not line.startswith("+++"):
            added += 1
    return max(removed, added)


async def anchor_states(store: Any, memory_keys: Sequence[str]) -> dict[str, list[AnchorState]]:
    """How the anchors of each memory stand now (memories with no anchors left out): one
    query for the anchors, one for their chunks."""
    stored = await store.memory_anchors(list(memory_keys))
    pairs = [(key, anchor) for key, anchors in stored.items() for anchor in anchors]
    rows = await store.anchor_chunks([(a["kind"], a["key"], _time(a["at"])) for _, a in pairs])
    states: dict[str, list[AnchorState]] = {}
    for (key, anchor), chunks in zip(pairs, rows, strict=True):
        states.setdefault(key, []).append(state_of(anchor, chunks))
    return states


def is_stale(states: Sequence[AnchorState]) -> bool:
    return any(s["state"] in (CHANGED, DELETED) for s in states)


def anchor_text(states: Sequence[AnchorState]) -> str:
    """`current`, `changed since 2026-11-28 11:40 (3 lines)` or `file deleted` for a memory's
    anchors (each named when there are several); empty when none can be checked."""
    known = [s for s in states if s["state"] != UNKNOWN]
    parts = []
    for s in known:
        if s["state"] == CHANGED:
            when = (s["since"] or "?")[:16].replace("T", " ")
            lines = f" ({s['lines']} lines)" if s["lines"] is not None else ""
            text = f"changed since {when}{lines}"
        else:
            text = "file deleted" if s["state"] == DELETED else CURRENT
        parts.append(f"{_short(s)} {text}" if len(known) > 1 else text)
    return "; ".join(parts)


def _short(state: AnchorState) -> str:
    """The path (and symbol) of an anchor without its project."""
    return state["key"].partition(":")[2] or state["key"]
