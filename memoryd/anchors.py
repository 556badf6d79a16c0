"""Memories checked against the code: a memory that points at code carries anchors, each the
file or symbol entity it names and the hash of that code when the memory was made, and when
it is shown it says whether that code is `current`, `changed since <when> (<n> lines)` or
`file deleted`.

The hashes come from the indexer's (memoryd/store/code.py keeps every chunk's `content_hash`,
and keeps replaced chunks with their validity times), so checking an anchor reads no file: a
file's anchor is one digest of the `content_hash`es of its chunks (:func:`chunks_digest`, as an
action's, below), a symbol's the `content_hash`es of the chunks that define it (DEFINED_IN).
How many lines changed is the difference between the chunks valid when the memory was made and
those valid now. (Notes anchored files by the chunks' `file_hash` until migration step 032.)

:func:`anchor_states` is the one call that says how a memory's anchors stand (the hooks, the
MCP tools, `get` and search use it); :func:`anchor_text` is how they print it.

Actions anchor too: a tool call's successful READS or MODIFIES of a file carries, on its edge,
`code_hash`, the hash of the file as the call saw or left it (:func:`anchor_actions`, at
ingest and in migration step 031), and :func:`action_states` says how that stands now. The
transcripts do not reliably hold the whole file a call read or left (a read may be a window,
an edit holds only the replaced lines, and each agent's transcript differs), so the hash comes
from the indexer's chunks valid at the call's time: for a read, those valid when it was made;
for an edit, the first version at or after the call (the call's time is when it was made,
before the file changed), i.e. what the edit left. A version's time is when the file came to
hold it (its mtime, workers/indexing.py), not when the indexer wrote it: a version read before
the call but written after it is not what the call left. That hash is a digest of the
chunks' own `content_hash`es, not the chunks' `file_hash`: a chunk that outlives a change of
its file has its `file_hash` rewritten to the new file's, so `file_hash` cannot say what the
file was at an earlier time; the chunks' own hashes can.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TypedDict

import blake3

from memoryd.results import AnchorState, State
from memoryd.vocabulary import FILE, MODIFIES, READS

CURRENT: State = "current"
CHANGED: State = "changed"
DELETED: State = "deleted"
# The code was not indexed when the memory was made: nothing to compare with.
UNKNOWN: State = "unknown"
# How anchor_text says DELETED.
GONE = "file deleted"
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
    """The hash an anchor keeps of its code: a file's digest, or a symbol's chunk hashes."""
    if not chunks:
        return None
    if kind == FILE:
        return chunks_digest(chunks)
    return ",".join(sorted(str(c["content_hash"]) for c in chunks))


def chunks_digest(chunks: Sequence[dict[str, Any]]) -> str | None:
    """A file's hash, a note's or an action's: one digest of the content hashes of its
    chunks."""
    if not chunks:
        return None
    joined = ",".join(sorted(str(c["content_hash"]) for c in chunks))
    return blake3.blake3(joined.encode()).hexdigest()


def rehashed(anchor: Anchor, rows: Sequence[dict[str, Any]]) -> str | None:
    """A note's file anchor of before step 032 (the chunks' `file_hash`) as a digest, its
    state kept: current stays current (the digest of the chunks now), a change stays a change
    (the digest of the chunks valid at its time, or, when the index holds none different from
    now's, the old hash, which no digest equals)."""
    now = _valid_now(rows)
    if anchor["hash"] is None or not now:
        return anchor["hash"]
    if str(now[0]["file_hash"]) == anchor["hash"]:
        return chunks_digest(now)
    then = chunks_digest(_at(rows, _time(anchor["at"])))
    return then if then is not None and then != chunks_digest(now) else anchor["hash"]


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
        # The old chunks are gone once pruned (or the index holds no change after the anchor's
        # time): then how much changed is not known.
        _changed_lines(replaced, added) if then and times else None,
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


def _acted_on(action: dict[str, Any]) -> bool:
    """A successful read or edit of a file of a project at a known time: what has an anchor."""
    return (
        action.get("verb") in (READS.name, MODIFIES.name)
        and action.get("outcome") == "ok"
        and action.get("target_kind", FILE) == FILE
        and bool(action.get("project"))
        and bool(action.get("event_time"))
    )


def action_version(
    verb: str, rows: Sequence[dict[str, Any]], at: datetime
) -> tuple[datetime, list[dict[str, Any]]] | None:
    """The time and chunks of the file as an action at `at` saw it (a read: the chunks valid
    then) or left it (an edit: the first version at or after the call, where
    chunks were added or retired). None when the index does not know it: the file was not
    indexed then, or the edit is not indexed yet."""
    when = at
    if verb == MODIFIES.name:
        bounds = [
            _time(t)
            for r in rows
            if "content" in r
            for t in (r["valid_from"], r.get("valid_until"))
            if t is not None and _time(t) >= at
        ]
        if not bounds:
            return None
        when = min(bounds)
    chunks = _at(rows, when)
    return (when, chunks) if chunks else None


async def anchor_actions(
    store: Any, sessions: Iterable[str], reads: Sequence[str] | None = None
) -> None:
    """Store `code_hash` on these sessions' reads and edits that have none yet and whose
    version the index now knows (an edit not yet indexed waits for a later batch of its
    session, or migration step 031). `reads`: only these reads (an ingest batch's own; every
    read of the sessions when None)."""
    actions = await store.unanchored_actions(sorted(sessions), reads)
    rows = await store.anchor_chunks([(FILE, a["target"], _time(a["event_time"])) for a in actions])
    hashes = []
    for action, chunks in zip(actions, rows, strict=True):
        version = action_version(action["verb"], chunks, _time(action["event_time"]))
        if version is not None:
            hashes.append({"id": action["id"], "hash": chunks_digest(version[1])})
    await store.set_code_hashes(hashes)


def action_state(action: dict[str, Any], rows: Sequence[dict[str, Any]]) -> AnchorState:
    """How the file an action read or edited stands now against what it saw or left: its
    stored `code_hash`, or (not stored yet) the same hash worked out from the index now."""
    at = _time(action["event_time"])
    version = action_version(action["verb"], rows, at)
    stored = action.get("code_hash")
    anchor = Anchor(
        kind=FILE,
        key=action["target"],
        hash=stored or (chunks_digest(version[1]) if version else None),
        at=version[0] if version else at,
    )
    if version is None and action["verb"] == MODIFIES.name and _valid_now(rows) and not stored:
        # Nothing indexed since the edit: what the index holds is what the edit left, or the
        # indexer has not read it yet (seconds); either way nothing later replaced it.
        return _state(anchor, CURRENT)
    return state_of(anchor, rows)


async def action_states(store: Any, actions: Sequence[dict[str, Any]]) -> list[AnchorState | None]:
    """For each action (a READS/MODIFIES edge as the views read it: `verb`, `outcome`,
    `target` (file key), `target_kind`, `project`, `event_time`, `code_hash`), how its file
    stands now; None for an action with no anchor (a command, a failed call, a file outside
    every project). One query for all."""
    anchored = [a for a in actions if _acted_on(a)]
    rows = await store.anchor_chunks(
        [(FILE, a["target"], _time(a["event_time"])) for a in anchored]
    )
    states = iter([action_state(a, r) for a, r in zip(anchored, rows, strict=True)])
    return [next(states) if _acted_on(a) else None for a in actions]


def is_stale(states: Sequence[AnchorState]) -> bool:
    return any(s["state"] in (CHANGED, DELETED) for s in states)


def anchor_text(states: Sequence[AnchorState]) -> str:
    """`current`, `changed since 2026-11-28 11:40 (3 lines)` or `file deleted` for a memory's
    anchors (each named when there are several); empty when none can be checked."""
    known = [s for s in states if s["state"] != UNKNOWN]
    parts = []
    for s in known:
        if s["state"] == CHANGED:
            when = f" since {s['since'][:16].replace('T', ' ')}" if s["since"] else ""
            lines = f" ({s['lines']} lines)" if s["lines"] is not None else ""
            text = f"changed{when}{lines}"
        else:
            text = GONE if s["state"] == DELETED else CURRENT
        parts.append(f"{_short(s)} {text}" if len(known) > 1 else text)
    return "; ".join(parts)


def _short(state: AnchorState) -> str:
    """The path (and symbol) of an anchor without its project."""
    return state["key"].partition(":")[2] or state["key"]
