"""Query jobs: run on the process that holds the database, answer the CLI through the queue."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from memoryd import agent_shared as agent
from memoryd import queue, views
from memoryd.agent import hooks
from memoryd.agent_shared import check_budget
from memoryd.anchors import action_states, anchor_states, anchor_text
from memoryd.client import Client, remembered
from memoryd.daemon import metrics
from memoryd.database.compact import DB_DIR, size
from memoryd.errors import InvalidRequest, NotFound
from memoryd.ids import split_file_key
from memoryd.jobs import JOBS_QUEUE, QUERY_QUEUE
from memoryd.results import SearchRequest, SearchResult
from memoryd.searchindex import search as search_module
from memoryd.store import key_of, plain
from memoryd.vocabulary import MODIFIES
from workers.action_context import edited_with
from workers.context import JobContext
from workers.counts import Counted
from workers.notes import notes_session_id
from workers.stages.entities import canonical_file


async def search(ctx: JobContext, request: dict[str, Any]) -> dict[str, Any]:
    """A SearchRequest (its `wire` form), answered with its SearchAnswer's."""
    settings = ctx["settings"]
    narrowed = bool(settings.exclude or settings.include)
    await ctx["search"].catch_up()

    async def narrow(results: list[SearchResult]) -> list[SearchResult]:
        return await _remembered(ctx, results)

    answer = await search_module.search(
        ctx["store"],
        ctx["embedder"],
        ctx["search"].index,
        SearchRequest.from_wire(request),
        narrow if narrowed else None,  # rows stored before the config's rule was set
    )
    return answer.wire()


async def _remembered(ctx: JobContext, results: list[SearchResult]) -> list[SearchResult]:
    """Hits the config keeps out (`exclude`, `include`) left out: code by its file, memories
    and goals by the folder their session ran in (rows stored before the rule was set)."""
    store, settings = ctx["store"], ctx["settings"]
    roots = {p["id"]: p["root"] for p in await store.projects()}
    sessions = {r.session for r in results if r.session}
    cwd = {plain(row["id"]): row.get("cwd") for row in await store.session_rows(sorted(sessions))}
    return [
        r
        for r in results
        if settings.remembers(
            f"{roots.get(r.project or '', '')}/{r.path}" if r.path else cwd.get(r.session or "")
        )
    ]


# Skipped files `memoryd status` lists (a tree can have thousands: the first ones say enough).
STATUS_SKIPPED_FILES = 50


STATUS_PARTS = (
    "live_workers",
    "paused_since",
    "jobs",
    "queries",
    "oldest_job_age",
    "last_hour",
    "projects",
    "skipped_files",
    "schema_version",
    "maintenance",
)


async def status(ctx: JobContext) -> dict[str, Any]:
    store = ctx["store"]
    settings, model = ctx["settings"], ctx["embedder"].model

    async def count() -> dict[str, Any]:
        backlog = await store.vector_backlog(model)
        # A scan too (an index on the model would hold every chunk): counted with the rest.
        chunks = await store.vectors_by_project(model)
        return {
            "counts": await store.counts(),
            "valid_chunks": sum(n["valid"] for n in chunks.values()),
            "transcript_lag": {
                root: {"bytes": behind, "files": files}
                for root, (behind, files) in (
                    await metrics.ingest_lag(store, settings.transcript_roots)
                ).items()
            },
            "database_bytes": await asyncio.to_thread(size, settings.data_dir / DB_DIR)
            if settings.embedded_db
            else None,
            "waiting_for_reembed": {t: n for t, (n, _) in backlog.items()},
            "waiting_for_first_vector": {t: first for t, (_, first) in backlog.items()},
            "chunk_vectors": chunks,
        }

    counted = ctx.get("status_counts") or Counted()
    redis = ctx["redis"]
    # Counted alone: how long it takes decides whether it is counted afresh next time.
    counts = await counted.get(count)
    chunks = counts.pop("chunk_vectors")
    # Each other part is a round trip of its own (Redis or the database): asked at once.
    parts = dict(
        zip(
            STATUS_PARTS,
            await asyncio.gather(
                queue.live_workers(redis),
                queue.paused_since(redis),
                queue.queue_depth(redis, JOBS_QUEUE),
                queue.queue_depth(redis, QUERY_QUEUE),
                queue.oldest_job_age(redis),
                queue.recent_outcomes(redis),
                project_progress(store, chunks, ctx["embedder"].rate()),
                store.skipped_files(STATUS_SKIPPED_FILES),
                store.schema_version(),
                store.last_maintenance(),
            ),
            strict=True,
        )
    )
    since = parts["paused_since"]
    # The day's reading for the plots over time (`memoryd ui`): a row a day, replaced.
    db_bytes = counts["database_bytes"]
    await store.record_day(
        counts["counts"].get("memory", 0),
        counts["valid_chunks"],
        None if db_bytes is None else round(db_bytes / 1e6, 1),
        sum(parts["last_hour"].values()),
    )
    return {
        # The queue's account, read here: a client asking over the channel needs no Redis.
        "daemon_running": parts["live_workers"] > 0,
        "paused_since": since.isoformat() if since else None,
        "queue": {
            "jobs": parts["jobs"],
            "queries": parts["queries"],
            "oldest_job_age_seconds": parts["oldest_job_age"],
            "last_hour": parts["last_hour"],
        },
        **counts,
        "projects": parts["projects"],
        "skipped_files": parts["skipped_files"],
        "schema_version": parts["schema_version"],
        "maintenance": {task: plain(run) for task, run in parts["maintenance"].items()},
        "model": model,
        "database": store.url,
        # This process's config and `--repo`s: what the daemon watches.
        "remembered": remembered(settings),
    }


async def register_project(
    ctx: JobContext,
    project_id: str,
    fields: dict[str, Any],
    run: str | None = None,
    files_total: int = 0,
) -> str:
    """Record a project; `run`: a whole-project sync of `files_total` files starts."""
    if not ctx["settings"].remembers(fields["root"]):
        raise InvalidRequest(f"{fields['root']} is excluded by the config (`exclude`/`include`)")
    await ctx["store"].upsert_project(project_id, fields)
    if run is not None:
        await ctx["store"].start_progress(project_id, run, files_total)
    return project_id


async def index_progress(ctx: JobContext) -> list[dict[str, Any]]:
    """Each project with the progress of its last whole-project sync."""
    embedder = ctx["embedder"]
    chunks = await ctx["store"].vectors_by_project(embedder.model)
    return await project_progress(ctx["store"], chunks, embedder.rate())


async def project_progress(
    store: Any, chunks: dict[str, dict[str, int]], rate: float | None
) -> list[dict[str, Any]]:
    """`chunks`: per project id, valid chunks, those with their vector and those owing it
    (`Store.vectors_by_project`); `rate`: the model's texts per second of late (None: too few
    batches to say). Every project's owed chunks go through the one model, in the order their
    jobs were queued, so a project's time left is given as that of every owed chunk: a bound
    that holds whichever comes first."""
    progress = await store.index_progress()
    owed = sum(n["owed"] for n in chunks.values())
    left = round(owed / rate) if owed and rate else None
    projects = []
    for p in await store.projects():
        counted = chunks.get(p["id"], {})
        project_owed = counted.get("owed", 0)
        projects.append(
            {
                "id": p["id"],
                "name": p["name"],
                "root": p["root"],
                "index": plain(progress[p["id"]]) if p["id"] in progress else None,
                "vectors_done": counted.get("done", 0),
                "vectors_owed": project_owed,
                # Which embedding pass the project's chunks wait for (None: none waits).
                "vector_pass": "full" if project_owed else None,
                "vectors_seconds_left": left if project_owed else None,
            }
        )
    return projects


async def stored_paths(ctx: JobContext, project_id: str) -> list[str]:
    """Paths the index knows for a project, so a sync can retire the ones gone from disk."""
    return await ctx["store"].indexed_paths(project_id)


async def history(ctx: JobContext, path: str) -> dict[str, Any]:
    """A file's history; `path` is absolute (the client resolved it against its own cwd)."""
    store = ctx["store"]
    projects = [(p["id"], p["root"]) for p in await store.projects()]
    entity = canonical_file(path, None, projects)
    if entity is None:
        raise InvalidRequest(f"not a file path: {path!r}")
    rel = split_file_key(entity.key)[1] if entity.project_id else None
    return await views.history(store, entity.kind, entity.key, entity.project_id, rel)


async def session(ctx: JobContext, session_id: str) -> dict[str, Any]:
    return await views.session(ctx["store"], session_id)


async def pin(ctx: JobContext, memory_id: str, pinned: bool) -> dict[str, Any]:
    """Pinned memories keep importance 1 and are never pruned."""
    if not await ctx["store"].set_pinned("memory", memory_id, pinned):
        raise NotFound(f"no memory {memory_id!r}")
    return {"memory": memory_id, "pinned": pinned}


async def projects(ctx: JobContext) -> list[dict[str, Any]]:
    return [
        {"id": p["id"], "name": p["name"], "root": p["root"]} for p in await ctx["store"].projects()
    ]


async def get(ctx: JobContext, ids: list[str], max_chars: int) -> list[dict[str, Any]]:
    """Full records by id, in the order asked, each cut to an equal share of `max_chars`
    (code at whole lines). An id found nowhere raises NotFound naming it."""
    if not ids:
        raise InvalidRequest("no ids given")
    share = max(agent.MIN_BUDGET, check_budget(max_chars) // len(ids))
    wanted = [agent.parse_id(i) for i in ids]
    store = ctx["store"]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for table, fetch, shape in (
        ("code_chunk", store.chunks_by_key, _chunk_record),
        ("memory", store.memories_by_key, _memory_record),
        ("goal", store.goals_by_key, _goal_record),
    ):
        keys = [key for t, key in wanted if t in (None, table)]
        for row in await fetch(keys) if keys else []:
            found[(table, key_of(row["id"]))] = shape(plain(row), share)
    records, missing = [], []
    for given, (table, key) in zip(ids, wanted, strict=True):
        match = [found[(t, key)] for t in agent.TABLE_PREFIXES if (t, key) in found]
        match = [m for m in match if table is None or agent.parse_id(m["id"])[0] == table]
        if match:
            records.append(match[0])
        else:
            missing.append(given)
    if missing:
        raise NotFound(f"no record {', '.join(repr(m) for m in missing)}")
    memories = [agent.parse_id(r["id"])[1] for r in records if r["kind"] not in ("code", "goal")]
    store.later(store.bump_access("memory", memories, datetime.now(UTC)), "memory reads")
    states = await anchor_states(store, memories)
    for record in records:
        record["anchor"] = anchor_text(states.get(agent.parse_id(record["id"])[1], [])) or None
    return records


async def anchors(ctx: JobContext, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """How the anchors of these memories (ids as search and get give them) stand now: per
    memory that points at code, one state per file or symbol (memoryd/anchors.py)."""
    keys = {agent.parse_id(i)[1]: i for i in ids}
    states = await anchor_states(ctx["store"], list(keys))
    return {keys[key]: [dict(s) for s in found] for key, found in states.items()}


def _chunk_record(row: dict[str, Any], share: int) -> dict[str, Any]:
    text, last, cut = agent.clip_lines(row["content"], row["start_line"], share)
    name, parent = row.get("name"), row.get("parent_name")
    return {
        "id": agent.qualified("code_chunk", row["id"]),
        "kind": "code",
        "project": row.get("project"),
        "path": row["path"],
        "language": row.get("language"),
        "name": f"{parent}.{name}" if name and parent else name or parent,
        "start_line": row["start_line"],
        "end_line": last,
        "chunk_end_line": row["end_line"],
        "valid": row.get("valid_until") is None,
        "text": text,
        "truncated": cut,
    }


def _memory_record(row: dict[str, Any], share: int) -> dict[str, Any]:
    text, cut = agent.clip(row["content"], share)
    return {
        "id": agent.qualified("memory", row["id"]),
        "kind": row["kind"],
        "project": row.get("project"),
        "session": row["session"],
        "seq": row["seq"],
        "tool": row.get("tool"),
        "event_time": row.get("event_time"),
        "pinned": row.get("pinned"),
        "valid": row.get("valid_until") is None,
        "text": text,
        "truncated": cut,
    }


def _goal_record(row: dict[str, Any], share: int) -> dict[str, Any]:
    text, cut = agent.clip(row["intent"], share)
    return {
        "id": agent.qualified("goal", row["id"]),
        "kind": "goal",
        "project": row.get("project"),
        "session": row["session"],
        "seq": row.get("seq"),
        "event_time": row.get("event_time"),
        "valid": True,
        "text": text,
        "truncated": cut,
    }


async def timeline(
    ctx: JobContext, anchor: str, before: int, after: int, max_chars: int
) -> dict[str, Any]:
    """The memories of the anchor's session from `before` events before it to `after` after
    it; each event's text gets an equal share of `max_chars`. The anchor is a memory or a goal
    (its prompt)."""
    if before < 0 or after < 0:
        raise InvalidRequest("before and after count events: 0 or more")
    store = ctx["store"]
    table, key = agent.parse_id(anchor)
    rows = []
    if table in (None, "memory"):
        rows = await store.memories_by_key([key])
    if not rows and table in (None, "goal"):
        goals = await store.goals_by_key([key])
        if goals and goals[0].get("memory") is not None:
            rows = await store.memories_by_key([key_of(goals[0]["memory"])])
    if not rows:
        raise NotFound(f"no memory or goal {anchor!r}")
    row = plain(rows[0])
    window = await store.memory_window(row["session"], row["seq"] - before, row["seq"] + after)
    share = max(agent.MIN_BUDGET // 2, check_budget(max_chars) // max(1, len(window)))
    return {
        "session": row["session"],
        "project": row.get("project"),
        "anchor": agent.qualified("memory", row["id"]),
        "anchor_seq": row["seq"],
        "events": [
            {
                "id": agent.qualified("memory", key_of(m["id"])),
                "seq": m["seq"],
                "kind": m["kind"],
                "tool": m.get("tool"),
                "event_time": plain(m.get("event_time")),
                "text": agent.clip(m["content"], share)[0],
            }
            for m in window
        ],
    }


async def then_modified(ctx: JobContext, ids: list[str], most: int) -> dict[str, list[str]]:
    """The files each memory's session then modified (successfully, after it, in order; at
    most `most` each; project-relative paths): what a prompt led to. Memories whose session
    modified nothing after them are left out."""
    store = ctx["store"]
    keys = {agent.parse_id(i)[1]: i for i in ids}
    memories = [plain(m) for m in await store.memories_by_key(list(keys))]
    outcomes = await store.session_outcomes(sorted({m["session"] for m in memories}))
    edits = sorted(
        (plain(a) for a in outcomes if a["verb"] == MODIFIES.name and a.get("outcome") == "ok"),
        key=_order,
    )
    found: dict[str, list[str]] = {}
    for m in memories:
        paths = [
            split_file_key(a["target"])[1] if a.get("project") else a["target"]
            for a in edits
            if a["session"] == m["session"] and (a.get("seq") or 0) > m["seq"]
        ]
        if paths:
            found[keys[m["id"]]] = list(dict.fromkeys(paths))[:most]
    return found


# Sessions and agents' notes a recent-activity answer looks at, at most.
RECENT_SESSIONS = 20
RECENT_NOTES = 20
NO_EDITS = {"files": [], "more": 0}


async def recent_activity(ctx: JobContext, project: str | None, since: str) -> dict[str, Any]:
    """What happened lately: the sessions active since `since` with their goals, the files
    they modified, failures not followed by a success, and the notes agents left for the
    project (with `project` only: a note belongs to its project)."""
    store = ctx["store"]
    start = datetime.fromisoformat(since)
    sessions = [plain(s) for s in await store.recent_sessions(project, start, RECENT_SESSIONS)]
    outcomes = [plain(o) for o in await store.session_outcomes([s["session"] for s in sessions])]
    notes = (
        [plain(n) for n in await store.recent_notes(notes_session_id(project), start, RECENT_NOTES)]
        if project
        else []
    )
    files = file_changes(outcomes)
    modified = session_edits(outcomes)
    # How each file stands against what its last edit left, and each note against its code.
    edits = [f.pop("last_edit") for f in files]
    for change, state in zip(files, await action_states(store, edits), strict=True):
        change["anchor"] = (anchor_text([state]) or None) if state else None
    states = await anchor_states(store, [n["id"] for n in notes])
    return {
        "project": project,
        "since": plain(start),
        "sessions": [
            {
                k: s.get(k)
                for k in ("session", "agent", "project", "git_branch", "started_at", "ended_at")
            }
            | {"goals": s.get("goals") or [], "modified": modified.get(s["session"], NO_EDITS)}
            for s in sessions
        ],
        "files": files,
        "failures": open_failures(outcomes),
        "notes": [
            {
                "id": agent.qualified("memory", n["id"]),
                "kind": n["kind"],
                "text": n["content"],
                "event_time": n.get("event_time"),
                "anchor": anchor_text(states.get(n["id"], [])) or None,
            }
            for n in notes
        ],
    }


def _order(action: dict[str, Any]) -> tuple[str, str, int]:
    return (action.get("event_time") or "", action["session"], action.get("seq") or 0)


def file_changes(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Files successfully modified, the most recently changed first; `sessions`: how many
    sessions modified each; `last_edit`: the action of the last edit."""
    changes: dict[str, dict[str, Any]] = {}
    sessions: dict[str, set[str]] = {}
    for a in sorted(actions, key=_order):
        if a["verb"] != MODIFIES.name or a.get("outcome") != "ok":
            continue
        path = split_file_key(a["target"])[1] if a.get("project") else a["target"]
        entry = changes.setdefault(
            a["target"], {"file": path, "project": a.get("project"), "edits": 0, "sessions": 0}
        )
        entry["edits"] += 1
        sessions.setdefault(a["target"], set()).add(a["session"])
        entry["sessions"] = len(sessions[a["target"]])
        entry["last_at"] = a.get("event_time")
        entry["last_session"] = a["session"]
        entry["last_edit"] = a
    return sorted(changes.values(), key=lambda c: (c["last_at"] or "", c["file"]), reverse=True)


def session_edits(actions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The files each session modified successfully, named as the pre-edit hook names a
    session's other files (edited_with): the briefing's line of the newest session then says
    what the next work most likely goes on with, which its file list, ranked by how many
    sessions came back to a file, can leave out."""
    edits: dict[tuple[str, str], dict[str, Any]] = {}
    for a in sorted(actions, key=_order):
        if a["verb"] != MODIFIES.name or a.get("outcome") != "ok":
            continue
        path = split_file_key(a["target"])[1] if a.get("project") else a["target"]
        entry = edits.setdefault(
            (a["session"], a["target"]), {"path": path, "edits": 0, "first_at": a.get("event_time")}
        )
        entry["edits"] += 1
    by_session: dict[str, list[dict[str, Any]]] = {}
    for (session, _), entry in edits.items():
        by_session.setdefault(session, []).append(entry)
    return {session: edited_with(files) for session, files in by_session.items()}


def open_failures(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last failure on each target (a command, a file) with no success on that target
    after it, newest first."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for a in sorted(actions, key=_order):
        if a.get("outcome") in ("ok", "error"):
            last[(a["verb"], a["target"])] = a
    failures = [a for a in last.values() if a["outcome"] == "error"]
    fields = (
        "verb",
        "target",
        "target_kind",
        "tool",
        "exit_code",
        "message",
        "detail",
        "event_time",
        "session",
        "seq",
    )
    return [{f: a.get(f) for f in fields} for a in sorted(failures, key=_order, reverse=True)]


async def hook(
    ctx: JobContext, agent: str, command: str, stdin: str, cwd: str, max_chars: object = None
) -> str:
    """An agent's hook, answered here with the client API on this process's own queries."""
    memoryd = Client.answering(ctx["redis"], ctx["settings"], ctx["queries"])
    return await hooks.run(memoryd, agent, command, stdin, cwd, max_chars)


async def injections(ctx: JobContext, limit: int) -> list[dict[str, str]]:
    """What the hooks injected into sessions lately, newest first (memoryd/agent/hooks.py)."""
    return await asyncio.to_thread(hooks.injections, ctx["settings"], limit)


async def daily_stats(ctx: JobContext, days: int) -> list[dict[str, Any]]:
    """The rows a day `status` records (memories, chunks, database MB, jobs), oldest first."""
    rows: list[dict[str, Any]] = await ctx["store"].daily_stats(days)
    return rows
