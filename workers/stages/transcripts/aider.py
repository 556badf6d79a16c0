"""aider chat logs (``.aider.chat.history.md`` in the root of each repository aider works in).

Append-only Markdown (shared/docs/transcript-formats.md §4). ``# aider chat started at <time>``
starts a session (its id comes from the file and the marker's byte offset: aider writes no
ids); lines before the first marker belong to a session that started earlier. ``#### `` lines
are what the user typed (consecutive ones are one prompt; the first that is not a ``/command``
is the goal; a blank line ends it); ``> `` lines are aider's own output; other lines are the
model's reply.

Times: aider stamps only a session's start. An event's time is interpolated by its byte offset
between the last known point (a session's start, or the end of the previous batch) and the next
(the next session's start, or the end of the file when it was last written, from
``Source.written``), so a session that runs for days has events across those days, in file
order. Without a next point they keep the last known time.

Edges: ``> Applied edit to <path>`` → MODIFIES the file; ``> Added <path> to the chat`` →
READS it (it went into the model's context); a ``/run <command>`` prompt → EXECUTES its
programs and the files the command line touches (via="shell"). Paths are relative to the
repository: the folder holding the log. A group of lines becomes a memory when the next kind of
line starts (the group being read is kept in the parser state, capped).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from memoryd.ids import stable_id
from workers.stages.transcripts.emitter import Emitter
from workers.stages.transcripts.events import (
    CAP_TEXT,
    CAP_TOOL_INPUT,
    MODIFIES,
    OK,
    READS,
    Source,
    Target,
    shell_targets,
)
from workers.stages.transcripts.lines import Line
from workers.stages.transcripts.state import ParseResult, ParserState
from workers.stages.transcripts.text import norm_time

AGENT = "aider"
_START = re.compile(r"^# aider chat started at (\S+ \S+)")
_APPLIED = re.compile(r"^> Applied edit to (.+?)\s*$")
# not "> Added 6 lines of output to the chat." (a /run's output): that is no file
_ADDED = re.compile(r"^> Added (?!\d+ lines? of output to)(.+?) to the chat\.?\s*$")
_KINDS = {"####": "user_prompt", ">": "output"}


def new_state() -> ParserState:
    return ParserState(agent=AGENT)


def detect(head: bytes) -> bool:
    return head.startswith(b"# aider chat started at ") or b"\n# aider chat started at " in head


def detect_path(path: str) -> bool:
    return path.endswith(".aider.chat.history.md")


def parse(
    lines: Iterable[Line], state: ParserState | None = None, source: Source | str = ""
) -> ParseResult:
    em = Emitter.for_parse(AGENT, state, source)
    src = em.source
    ctx = em.state.context
    root = posixpath.dirname(src.path.replace("\\", "/")) or None
    placed: list[tuple[int, int]] = []  # (event index, byte offset) since the last known time
    for line in lines:
        if line.oversize:
            em.skip(line.offset, f"line of {line.oversize} bytes skipped")
            continue
        text = line.raw.decode("utf-8", errors="replace").rstrip()
        start = _START.match(text)
        if start:
            before = len(em.events)
            offset = (ctx.get("group") or {}).get("offset", line.offset)
            _close(em, ctx)  # what the user typed last, if the session ended there
            placed += [(i, offset) for i in range(before, len(em.events))]
            t = norm_time(start.group(1).replace(" ", "T"))
            _retime(em, ctx, placed, (line.offset, t) if t else None)
            sid = stable_id(AGENT, src.path, str(line.offset))
            ctx.update(session=sid, time=t, known=[line.offset, t] if t else None)
            em.session(sid, event_time=ctx["time"], cwd=root)
            continue
        if "session" not in ctx:  # the log starts inside an older session
            if text.startswith("-*-") or not text:
                continue  # an editor's mode line
            ctx.update(session=stable_id(AGENT, src.path, "0"), time=None, known=None)
            em.session(ctx["session"], cwd=root)
        before = len(em.events)
        _line(em, ctx, text, line.offset, root)
        placed += [(i, line.offset) for i in range(before, len(em.events))]
    _retime(em, ctx, placed, src.written)
    return em.result()


def _retime(
    em: Emitter, ctx: dict[str, Any], placed: list[tuple[int, int]], nxt: tuple[int, str] | None
) -> None:
    """Give the events placed since the last known time theirs, interpolated by byte offset up
    to the next known point; that point's time is the next stretch's start."""
    known = ctx.get("known")
    if not placed or not known or not nxt or nxt[0] <= known[0]:
        placed.clear()
        return
    (o0, t0), (o1, t1) = known, nxt
    start, end = _epoch(t0), max(_epoch(t0), _epoch(t1))
    for index, offset in placed:
        # (a line written after the stat lies past its size: it gets the time of the stat)
        when = norm_time(start + (end - start) * (min(offset, o1) - o0) / (o1 - o0))
        em.events[index] = replace(em.events[index], event_time=when)  # type: ignore[arg-type]
        em.session(ctx["session"], event_time=when)
    ctx["known"] = [placed[-1][1], em.events[placed[-1][0]].event_time]  # type: ignore[union-attr]
    ctx["time"] = ctx["known"][1]
    placed.clear()


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _line(em: Emitter, ctx: dict[str, Any], text: str, offset: int, root: str | None) -> None:
    prefix = "####" if text.startswith("####") else ">" if text.startswith(">") else ""
    kind = _KINDS.get(prefix, "assistant_message")
    body = text[len(prefix) :].removeprefix(" ")
    group = ctx.get("group")
    if not text:
        # a blank line ends what the user typed (each input is followed by one) and aider's
        # output; in a reply it is a paragraph break, and between groups it belongs to none
        if group is not None and group["kind"] != "assistant_message":
            _close(em, ctx)
        elif group is not None:
            group["text"] += "\n"
        return
    if group is None or group["kind"] != kind:
        _close(em, ctx)
        group = ctx["group"] = {"kind": kind, "offset": offset, "text": ""}
    if len(group["text"]) < CAP_TEXT:
        group["text"] += body + "\n"
    if kind == "output":
        _output_line(em, ctx, text, offset, root)


def _output_line(
    em: Emitter, ctx: dict[str, Any], text: str, offset: int, root: str | None
) -> None:
    for pattern, verb, what in ((_APPLIED, MODIFIES, "Applied edit to"), (_ADDED, READS, "Added")):
        m = pattern.match(text)
        entity = em.file(m.group(1), root) if m else None
        if entity is None:
            continue
        sid = ctx["session"]
        mem = em.memory(
            sid,
            "tool_call",
            f"{what} {m.group(1)}" if m else "",
            key=("off", str(offset)),
            event_time=ctx.get("time"),
            offset=offset,
            cap=CAP_TOOL_INPUT,
            tool="edit" if verb == MODIFIES else "add",
        )
        if mem is not None:
            em.edges(
                session_id=sid,
                memory_id=mem.id,
                tool=mem.tool or "",
                event_time=ctx.get("time"),
                targets=[Target(verb, entity, "edit" if verb == MODIFIES else "added")],
                outcome=OK,
            )


def _close(em: Emitter, ctx: dict[str, Any]) -> None:
    """Turn the group of lines just finished into a memory (aider's output makes none of its
    own: its edits and additions are edges)."""
    group = ctx.pop("group", None)
    if group is None or group["kind"] == "output" or not group["text"].strip():
        return
    sid, text, offset = ctx["session"], group["text"].strip(), group["offset"]
    mem = em.memory(
        sid,
        group["kind"],
        text,
        key=("off", str(offset)),
        event_time=ctx.get("time"),
        offset=offset,
    )
    if group["kind"] != "user_prompt" or mem is None:
        return
    if text.startswith("/run ") or text.startswith("!"):
        command = text.removeprefix("/run ").removeprefix("!").strip()
        em.edges(
            session_id=sid,
            memory_id=mem.id,
            tool="run",
            event_time=ctx.get("time"),
            targets=shell_targets(command, em.state.sessions[sid].get("cwd"), em.source),
            outcome=OK,  # aider logs no exit status
        )
    elif not text.startswith("/"):
        em.goal(sid, text, mem)
