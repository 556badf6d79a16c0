"""The `ingest_transcript` job: complete lines from the stored offset -> parser -> graph rows.

`rows_for` is pure (parse result in, rows out); `ingest_transcript` does the reading, embedding
and the one-transaction write of rows plus the new offset.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import stat
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import zstandard

from memoryd import queue, vocabulary
from memoryd.anchors import anchor_actions
from memoryd.embedding import embed_off_loop
from memoryd.ids import entity_id
from memoryd.scan import not_regular
from memoryd.store import Ref
from memoryd.watch.transcripts import rewritten_whole
from workers.context import JobContext
from workers.resolutions import resolve_sessions
from workers.stages.entities import Entity, canonical_tool
from workers.stages.transcripts import (
    Action,
    Denied,
    Goal,
    Memory,
    ParseResult,
    ParserState,
    SessionInfo,
    Source,
    Spawned,
    Summary,
    Triggered,
    detect_agent,
    parser_for,
    read_lines,
    split_lines,
)
from workers.stages.transcripts.text import norm_time

log = logging.getLogger(__name__)

EMBED_CHARS = 2000
# Bytes parsed per transaction. The engine allocates ~15x a batch's bytes while it writes one
# (full-text postings of up to 4 KB tool results), so a batch is kept small.
BATCH_BYTES = 1024 * 1024
HEAD_BYTES = 64 * 1024
# Longest a single ingest job reads before handing the rest of the file to a follow-up job.
JOB_SLICE_SECONDS = 300.0


def when(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _project(project_id: str | None) -> Ref | None:
    return Ref("project", project_id) if project_id else None


def entity_row(entity: Entity, seen: datetime) -> dict[str, Any]:
    """An entity's row as a job writes it (seen now; its form as written is an alias)."""
    return {
        "id": Ref("entity", entity_id(entity.kind, entity.key)),
        "kind": entity.kind,
        "key": entity.key,
        "name": entity.name,
        "project": _project(entity.project_id),
        "aliases": [entity.raw] if entity.raw else [],
        "first_seen": seen,
        "last_seen": seen,
    }


def _session_row(info: SessionInfo) -> dict[str, Any]:
    parent = Ref("session", info.parent_session_id) if info.parent_session_id else None
    return {
        "id": Ref("session", info.session_id),
        "data": {
            "agent": info.agent,
            "external_id": info.external_id,
            "cwd": info.cwd,
            "project": _project(info.project_id),
            "git_branch": info.git_branch or None,
            "parent": parent,
            "agent_id": info.agent_id,
            "agent_type": info.agent_type,
            "description": info.description,
            "version": info.version,
            "warmup": info.warmup,
            "started_at": when(info.started_at),
            "ended_at": when(info.ended_at),
            "source": info.source_path,
        },
    }


def _verb_edge(event: Action | Triggered | Denied) -> tuple[str, Entity, dict[str, Any]]:
    """The edge table, target entity and edge-specific fields of a tool call's outcome."""
    if isinstance(event, Action):
        fields = {"outcome": event.outcome, "exit_code": event.exit_code, "detail": event.detail}
        fields["via"] = event.via  # vocabulary.VIA_TOOL, or VIA_SHELL: read off a command line
        return vocabulary.edge(event.verb).table, event.entity, fields
    if isinstance(event, Triggered):
        return (
            vocabulary.TRIGGERED.table,
            event.error,
            {"exit_code": event.exit_code, "message": event.message},
        )
    return vocabulary.DENIED.table, event.entity, {"reason": event.reason, "message": event.message}


@dataclass(slots=True)
class Rows:
    """Rows for one transaction, by table; `embed` lists (row, text) still needing a vector."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    embed: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def add(self, table: str, row: dict[str, Any]) -> dict[str, Any]:
        self.tables.setdefault(table, []).append(row)
        return row

    def count(self, table: str) -> int:
        return len(self.tables.get(table, []))


def rows_for(result: ParseResult, path: str) -> Rows:
    """Turn parsed events into graph rows."""
    rows = Rows()
    now = datetime.now(UTC)
    entities: dict[str, dict[str, Any]] = {}

    def entity(e: Entity, seen: datetime | None) -> Ref:
        row = entity_row(e, seen or now)
        key = row["id"].key
        if key in entities:
            # Seen again in this batch: the earliest and latest sightings, whatever the order,
            # so that how a transcript was cut into batches changes nothing.
            known = entities[key]
            known["aliases"] = sorted({*known["aliases"], *row["aliases"]})
            known["first_seen"] = min(known["first_seen"], row["first_seen"])
            known["last_seen"] = max(known["last_seen"], row["last_seen"])
        else:
            entities[key] = row
        return row["id"]

    added: set[tuple[str, str]] = set()

    def edge(table: str, edge_id: str, source: Ref, target: Ref, **fields: Any) -> None:
        # One edge per id: two commands of one message naming the same file make one MENTIONS
        # edge in the database, and the report counts what is stored.
        if (table, edge_id) in added:
            return
        added.add((table, edge_id))
        rows.add(
            f"edge_{table}", {"id": Ref(table, edge_id), "in": source, "out": target, **fields}
        )

    for info in result.sessions:
        rows.add("sessions", _session_row(info))
    for event in result.events:
        if isinstance(event, Memory):
            at = when(event.event_time)
            row = rows.add(
                "memories",
                {
                    "id": Ref("memory", event.id),
                    "session": Ref("session", event.session_id),
                    "kind": event.kind,
                    "content": event.content,
                    "tool": event.tool,
                    "call_id": event.call_id,
                    "source_id": event.source_id,
                    "media": [{"media_type": m.media_type, "size": m.size} for m in event.media],
                    "event_time": at,
                    "ingestion_time": now,
                    "valid_from": at or now,
                    "seq": event.seq,
                    "source": {"path": path, "offset": event.byte_offset},
                    "embedding": None,
                    "embedding_model": None,
                },
            )
            if event.kind in vocabulary.EMBEDDED_MEMORY_KINDS and event.content.strip():
                rows.embed.append((row, event.content[:EMBED_CHARS]))
        elif isinstance(event, Goal):
            row = rows.add(
                "goals",
                {
                    "id": Ref("goal", event.id),
                    "session": Ref("session", event.session_id),
                    "intent": event.intent,
                    "memory": Ref("memory", event.memory_id),
                    "event_time": when(event.event_time),
                    "embedding": None,
                    "embedding_model": None,
                },
            )
            rows.embed.append((row, event.intent[:EMBED_CHARS]))
            edge(
                vocabulary.HAS_GOAL.table,
                event.id,
                Ref("session", event.session_id),
                Ref("goal", event.id),
            )
        elif isinstance(event, Action | Triggered | Denied):
            at = when(event.event_time)
            table, target, fields = _verb_edge(event)
            edge(
                table,
                event.id,
                Ref("memory", event.memory_id),
                entity(target, at),
                session=Ref("session", event.session_id),
                tool=event.tool,
                event_time=at,
                **fields,
            )
        elif isinstance(event, Spawned):
            edge(
                vocabulary.SPAWNED.table,
                event.id,
                Ref("memory", event.memory_id),
                Ref("session", event.child_session_id),
                agent_id=event.agent_id,
                agent_type=event.agent_type,
                detail=event.description or "",
                event_time=when(event.event_time),
            )
        elif isinstance(event, Summary):
            rows.add(
                "summaries",
                {"id": Ref("summary", event.id), "leaf_uuid": event.leaf_uuid, "text": event.text},
            )
    rows.tables["entities"] = list(entities.values())
    return rows


def _acting_sessions(rows: Rows) -> set[str]:
    """The sessions of a batch's tool-call outcomes (the edges that name their session)."""
    verbs = (*vocabulary.ACTION_VERBS, vocabulary.TRIGGERED.name)
    tables = [f"edge_{vocabulary.edge(verb).table}" for verb in verbs]
    return {row["session"].key for table in tables for row in rows.tables.get(table, [])}


@dataclass(slots=True)
class IngestReport:
    path: str
    agent: str | None = None
    lines: int = 0
    skipped: int = 0
    sessions: int = 0
    memories: int = 0
    goals: int = 0
    edges: Counter[str] = field(default_factory=Counter)
    # The sessions this run wrote to, in order: what `memoryd session` takes next.
    session_ids: list[str] = field(default_factory=list)
    restarted: bool = False
    note: str | None = None
    seconds: float = 0.0

    def add(self, rows: Rows, result: ParseResult, lines: int) -> None:
        self.lines += lines
        self.skipped += len(result.skipped)
        self.sessions += rows.count("sessions")
        self.memories += rows.count("memories")
        self.goals += rows.count("goals")
        for row in [*rows.tables.get("sessions", []), *rows.tables.get("memories", [])]:
            ref = row["id"] if "session" not in row else row["session"]
            if ref.key not in self.session_ids:
                self.session_ids.append(ref.key)
        for name, table_rows in rows.tables.items():
            if name.startswith("edge_"):
                self.edges[name.removeprefix("edge_")] += len(table_rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            name: (dict(v) if isinstance(v := getattr(self, name), Counter) else v)
            for name in self.__slots__
        }


def _read_batch(path: str, offset: int, compressed: bool) -> tuple[list[Any], int]:
    if compressed:
        # An archive is immutable: read it whole (cold Codex threads are small).
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        return split_lines(data[offset:], offset)
    with open(path, "rb") as f:
        return read_lines(f, offset, max_bytes=BATCH_BYTES)


def _head(path: str, compressed: bool) -> bytes:
    with open(path, "rb") as f:
        if compressed:
            return zstandard.ZstdDecompressor().stream_reader(f).read(HEAD_BYTES)
        return f.read(HEAD_BYTES)


def _subagent_meta(path: str) -> dict[str, Any] | None:
    from workers.stages.transcripts.claude_code import subagent_meta_path

    meta = subagent_meta_path(path)
    if not meta:
        return None
    try:
        loaded = json.loads(Path(meta).read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _locks(ctx: JobContext) -> dict[str, asyncio.Lock]:
    return ctx.setdefault("transcript_locks", {})


async def ingest_transcript(ctx: JobContext, path: str) -> dict[str, Any]:
    """Ingest what was appended to a transcript since the stored offset."""
    lock = _locks(ctx).setdefault(path, asyncio.Lock())
    async with lock:  # two jobs for one file in this worker would only repeat each other
        return (await _ingest(ctx, path)).as_dict()


async def _ingest(ctx: JobContext, path: str) -> IngestReport:
    started = time.perf_counter()
    store, embedder = ctx["store"], ctx["embedder"]
    report = IngestReport(path)
    if "redis" in ctx and await queue.paused_since(ctx["redis"]):
        report.note = "capture is paused (`memoryd resume`)"
        return report
    cursor = await store.transcript_cursor(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        if (link := _link_to_nothing(path)) is None:  # gone: a deleted transcript
            report.note = f"transcript unreadable ({exc.strerror}); its memories stay"
            log.info("ingest %s: %s", path, report.note)
            return report
        # A symlink to nothing or a loop: there, but never readable as it is.
        report.note = f"unreadable: {exc.strerror or exc}; skipped"
        log.warning("ingest %s: %s", path, report.note)
        await store.skip_transcript_file(path, link.st_ino, report.note)
        return report
    if not stat.S_ISREG(info.st_mode):  # a FIFO would hold the read until someone writes
        report.note = f"{not_regular(info.st_mode)}; skipped"
        log.warning("ingest %s: %s", path, report.note)
        await store.skip_transcript_file(path, info.st_ino, report.note)
        return report
    compressed = path.endswith(".zst")
    offset, saved = 0, None
    if cursor is not None and rewritten_whole(path):
        # Rewritten in place on every update: read again from the start whenever its size
        # moved, with the kept parser state, which knows what was already emitted.
        if cursor["size"] == info.st_size:
            report.note = "up to date"
            return report
        saved = cursor.get("state")
    elif cursor is not None:
        # An archive's offset counts decompressed bytes: it is the same file if unchanged.
        size = info.st_size
        continues = cursor["size"] == size if compressed else cursor["offset"] <= size
        if cursor["inode"] == info.st_ino and continues:
            offset, saved = cursor["offset"], cursor.get("state")
        else:
            report.restarted = True
            log.info("ingest %s: file replaced or truncated; reading again from the start", path)
    # An archive is read whole once; a plain file only past its offset.
    if (saved is not None) if compressed else offset >= info.st_size:
        report.note = "up to date"
        return report
    try:
        agent = (cursor or {}).get("agent") if saved else None
        agent = agent or detect_agent(await asyncio.to_thread(_head, path, compressed), path)
        report.agent = agent
        if agent is None or not ctx["settings"].follows(agent):
            report.note = (
                "not a transcript format memoryd knows; skipped"
                if agent is None
                else f"{agent} transcripts are not followed (config `agents`); skipped"
            )
            log.warning("ingest %s: %s", path, report.note)
            await ctx["search"].write_transcript_batch(
                {}, _cursor(path, info, None, info.st_size, None, 0, report.note)
            )
            return report
        parser = parser_for(agent)
        projects = [(p["id"], p["root"]) for p in await store.projects()]
        source = source_for(path, agent, projects, info)
        state = ParserState.from_json(saved["parser"]) if saved else None
        skipped_before = (cursor or {}).get("lines_skipped", 0) if saved else 0
        while True:
            lines, next_offset = await asyncio.to_thread(_read_batch, path, offset, compressed)
            if not lines:
                break
            result = await _remembered(
                ctx, await asyncio.to_thread(parser.parse, lines, state, source)
            )
            rows = await asyncio.to_thread(rows_for, result, path)
            await _embed(embedder, rows)
            state = result.state
            for skip in result.skipped:
                log.warning(
                    "ingest %s: skipped line at byte %d: %s", path, skip.offset, skip.reason
                )
            skipped_before += len(result.skipped)
            saved_state = {"parser": state.to_json()}
            await ctx["search"].write_transcript_batch(
                rows.tables,
                _cursor(path, info, agent, next_offset, saved_state, skipped_before, None),
            )
            # A failure and its fix may come in different batches: each batch looks again at
            # the sessions it acted in.
            acting = _acting_sessions(rows)
            await resolve_sessions(store, acting)
            # The hash of each file the batch read, and each its sessions edited once the index
            # has that version (memoryd/anchors.py): an edit indexed later gets it with a later
            # batch of its session. Bookkeeping no answer waits for: it doubled the time of an
            # ingest job on a loaded machine (52 s to 106 s for a 201-memory transcript).
            reads = [row["id"].key for row in rows.tables.get(f"edge_{vocabulary.READS.table}", [])]
            store.later(anchor_actions(store, acting, reads), "action anchors")
            report.add(rows, result, len(lines))
            offset = next_offset
            if offset < info.st_size and time.perf_counter() - started > JOB_SLICE_SECONDS:
                # A huge transcript is read in slices: each job ends well inside the job
                # timeout, and the next slice starts from the offset just committed.
                await queue.enqueue_ingest(ctx["redis"], [path], from_offset=offset)
                report.note = f"continues from byte {offset} in a follow-up job"
                break
    except FileNotFoundError:
        report.note = "transcript vanished while being read; what was read is kept"
        log.info("ingest %s: %s", path, report.note)
    report.seconds = round(time.perf_counter() - started, 3)
    log.info(
        "ingest %s (%s): %d lines, %d memories, %d sessions, edges %s, %d skipped in %.2fs",
        path,
        report.agent,
        report.lines,
        report.memories,
        report.sessions,
        dict(report.edges),
        report.skipped,
        report.seconds,
    )
    return report


def is_forgotten(forgotten: set[str] | frozenset[str], session_id: str | None) -> bool:
    """A forgotten session, or a subagent of one ("<parent>:agent-…")."""
    return session_id is not None and (
        session_id in forgotten or session_id.partition(":")[0] in forgotten
    )


async def _remembered(ctx: JobContext, result: ParseResult) -> ParseResult:
    """The parse (and the parser's state) without the sessions `memoryd forget` removed (a
    transcript tailed or read again never brings them back) and those started in a folder
    the config keeps out (`exclude`, `include`)."""
    ids = {info.session_id for info in result.sessions}
    ids |= {sid for e in result.events if (sid := getattr(e, "session_id", None))}
    forgotten = await ctx["store"].forgotten_sessions(ids | {s.partition(":")[0] for s in ids})
    cwd = {info.session_id: info.cwd for info in result.sessions}
    cwd |= {k: v.get("cwd") for k, v in result.state.sessions.items()}
    excluded = {sid for sid in ids if not ctx["settings"].remembers(cwd.get(sid))}
    result = await _without_forgotten_rows(
        ctx, await _without_excluded_files(ctx, without_own_answers(result))
    )
    if not forgotten and not excluded:
        return result

    gone = functools.partial(is_forgotten, forgotten | excluded)
    # An excluded session keeps its entry in the parser's state: its folder is how the next
    # batch knows it (a Codex transcript names its folder once, at the start).
    scrubbed = scrub_state({"parser": result.state.to_json()}, gone, keep=frozenset(excluded))
    return replace(
        result,
        events=tuple(e for e in result.events if not gone(getattr(e, "session_id", None))),
        sessions=tuple(info for info in result.sessions if not gone(info.session_id)),
        state=ParserState.from_json(scrubbed["parser"]),
    )


async def _without_forgotten_rows(ctx: JobContext, result: ParseResult) -> ParseResult:
    """The parse without the memories and goals forgotten one by one (by id, path or time),
    and without the edges drawn from those memories."""
    rows = {Ref("memory", e.id) for e in result.events if isinstance(e, Memory)}
    rows |= {Ref("goal", e.id) for e in result.events if isinstance(e, Goal)}
    forgotten = await ctx["store"].forgotten_rows(rows)
    if not forgotten:
        return result
    memories = {ref.key for ref in forgotten if ref.table == "memory"}
    goals = {ref.key for ref in forgotten if ref.table == "goal"}

    def kept(event: object) -> bool:
        if isinstance(event, Memory):
            return event.id not in memories
        if isinstance(event, Goal) and event.id in goals:
            return False
        return getattr(event, "memory_id", None) not in memories

    return replace(result, events=tuple(e for e in result.events if kept(e)))


EXCLUDED_CONTENT = "[excluded]"
OWN_ANSWER = "[memoryd's own answer]"


async def _without_excluded_files(ctx: JobContext, result: ParseResult) -> ParseResult:
    """Actions on files the config keeps out keep their verb and target, not their content:
    the call, its results and the edge's detail (a diff, a command line) are emptied."""
    settings = ctx["settings"]
    if not settings.exclude and not settings.include:
        return result
    roots = {p["id"]: p["root"] for p in await ctx["store"].projects()}

    def hidden(entity: Entity) -> bool:
        if entity.kind != vocabulary.FILE:
            return False
        project, _, rel = entity.key.partition(":")
        path = f"{roots[project]}/{rel}" if entity.project_id in roots else entity.key
        return not settings.remembers(path)

    calls = {
        e.memory_id for e in result.events if isinstance(e, Action | Denied) and hidden(e.entity)
    }
    if not calls:
        return result
    call_ids = {e.call_id for e in result.events if isinstance(e, Memory) and e.id in calls}
    call_ids.discard(None)

    def emptied(event: Any) -> Any:
        if isinstance(event, Memory) and (event.id in calls or event.call_id in call_ids):
            return replace(event, content=EXCLUDED_CONTENT)
        if isinstance(event, Action) and event.memory_id in calls:
            return replace(event, detail="")
        return event

    return replace(result, events=tuple(emptied(e) for e in result.events))


def without_own_answers(result: ParseResult) -> ParseResult:
    """The answers of memoryd's own MCP tools keep their call, not their text: they are
    memories stored already, which stored again would come back in every later search for them
    (and so again in that search's answer)."""
    prefix = f"mcp:{vocabulary.MCP_SERVER}:"

    def emptied(event: Any) -> Any:
        if (
            isinstance(event, Memory)
            and event.kind == "tool_result"
            and event.tool is not None
            and canonical_tool(event.tool).key.startswith(prefix)
        ):
            return replace(event, content=OWN_ANSWER)
        return event

    return replace(result, events=tuple(emptied(e) for e in result.events))


def scrub_state(
    saved: dict[str, Any], gone: Callable[[str], bool], keep: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """A cursor's saved state without what it kept of forgotten sessions (their fields but
    those of `keep`, their calls waiting for a result)."""
    parser = dict(saved["parser"])
    parser["sessions"] = {
        k: v for k, v in parser["sessions"].items() if not gone(k) or is_forgotten(keep, k)
    }
    parser["pending"] = {
        k: v for k, v in parser["pending"].items() if not gone(v.get("session_id"))
    }
    # An earlier memoryd also kept each session's latest memory ("last"): it goes.
    return {"parser": parser}


def source_for(
    path: str, agent: str, projects: list[tuple[str, str]], info: os.stat_result
) -> Source:
    """What a parser is told of a transcript besides its lines: the projects, a Claude Code
    subagent's meta file, and when the file was last written, at what size (an archive's
    size is not its offsets)."""
    meta = _subagent_meta(path) if agent == "claude-code" else None
    written = None if path.endswith(".zst") else norm_time(info.st_mtime)
    return Source.of(path, projects, meta, (info.st_size, written) if written else None)


def _link_to_nothing(path: str) -> os.stat_result | None:
    """The symlink itself when `path` is one whose target cannot be read; None when nothing
    is at `path`."""
    try:
        return os.lstat(path)
    except OSError:
        return None


def _cursor(
    path: str,
    info: os.stat_result,
    agent: str | None,
    offset: int,
    state: dict[str, Any] | None,
    skipped: int,
    note: str | None,
) -> dict[str, Any]:
    return {
        "path": path,
        "agent": agent,
        "inode": info.st_ino,
        "offset": offset,
        "size": info.st_size,
        "state": state,
        "lines_skipped": skipped,
        "note": note,
    }


async def _embed(embedder: Any, rows: Rows) -> None:
    if not rows.embed:
        return
    vectors = await embed_off_loop(embedder, [text for _, text in rows.embed])
    for (row, _), vector in zip(rows.embed, vectors, strict=True):
        row["embedding"] = vector
        row["embedding_model"] = embedder.model
