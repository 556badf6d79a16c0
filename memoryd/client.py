"""memoryd's one typed client API, used by the CLI, the MCP server and the hooks.

Every call is a job on the queue of the process that holds the database (the daemon), so a
client never loads the model or the database SDK itself. Results are the typed data of
memoryd/results.py; failures are the exceptions of memoryd/errors.py, of the class the worker
raised (NotFound, InvalidRequest…), or DaemonUnavailable when nothing serves the queue.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memoryd import channel, jobs
from memoryd.agent_shared import DEFAULT_BUDGET, Scope, resolve_scope
from memoryd.config import Settings
from memoryd.database.export import read_jsonl, write_jsonl
from memoryd.errors import NOT_RUNNING, DaemonUnavailable, value_of
from memoryd.liveness import SERVING_WAIT_SECONDS, holder
from memoryd.paths import config_file, daemon_lock_path, default_transcripts, serving_lock_path
from memoryd.results import (
    AnchorState,
    FileHistory,
    Forgotten,
    Impact,
    PinResult,
    ProjectInfo,
    ProjectProgress,
    RecentActivity,
    Record,
    Related,
    Remembered,
    SearchAnswer,
    SearchRequest,
    SessionReplay,
    Timeline,
)

# memoryd.queue (arq, the Redis client) is imported where work goes on the queue: a query over
# the daemon's channel (a CLI search, get, session…) never loads it.
if TYPE_CHECKING:
    from arq import ArqRedis

log = logging.getLogger(__name__)

# How a client puts a query to memoryd: over the queue, the daemon's channel, or (inside the
# daemon) straight to the query functions.
Ask = Callable[[jobs.JobSpec, tuple[Any, ...]], Awaitable[Any]]


class Client:
    """Calls into memoryd (see :func:`connect`). Queries go the way `ask` says (default: jobs on
    the queue of `redis`); work (indexing, ingestion, upkeep) always goes on the queue, which
    is connected when first needed."""

    def __init__(
        self,
        redis: ArqRedis | None,
        settings: Settings,
        timeout: float = 120.0,
        *,
        ask: Ask | None = None,
    ) -> None:
        self._redis = redis
        self._own_redis = False
        # The pid of the one-shot command whose queue this client uses (`connect`), if any.
        self.served_by: int | None = None
        self.settings = settings
        self.timeout = timeout
        self._ask = ask or self._ask_queue

    async def _ask_queue(self, spec: jobs.JobSpec, args: tuple[Any, ...]) -> Any:
        from memoryd import queue

        return await queue.call(await self.work_queue(), spec, *args, timeout=self.timeout)

    async def _call(self, spec: jobs.JobSpec, *args: Any) -> Any:
        return await self._ask(spec, args)

    async def work_queue(self) -> ArqRedis:
        """The queue's Redis, connected at the first call that needs it."""
        from memoryd import queue

        if self._redis is None:
            self._redis = await queue.connect(self.settings.queue_url)
            self._own_redis = True
        return self._redis

    @classmethod
    def over_channel(cls, settings: Settings, timeout: float = 120.0) -> Client:
        """A client of the daemon's query channel (memoryd/channel.py)."""
        path = settings.channel_socket

        async def ask(spec: jobs.JobSpec, args: tuple[Any, ...]) -> Any:
            return await channel.ask(path, spec.name, args, timeout)

        return cls(None, settings, timeout, ask=ask)

    @classmethod
    def answering(cls, redis: ArqRedis, settings: Settings, answer: channel.Answer) -> Client:
        """A client inside the daemon (the hook's work): queries go straight to `answer`."""

        async def ask(spec: jobs.JobSpec, args: tuple[Any, ...]) -> Any:
            return value_of(await answer(spec.name, args))

        return cls(redis, settings, ask=ask)

    async def close(self) -> None:
        if self._own_redis and self._redis is not None:
            await self._redis.aclose()
            self._redis, self._own_redis = None, False

    async def search(self, request: SearchRequest) -> SearchAnswer:
        """Hybrid search over what is valid now (or was valid `as_of`), in one query of the
        daemon whatever the kinds asked (see SearchRequest)."""
        return SearchAnswer.from_wire(await self._call(jobs.SEARCH, request.wire()))

    async def history(self, path: str) -> FileHistory:
        """Every session that touched the file, newest first, and its current chunks. A
        relative path is taken against this process's working directory."""
        result: FileHistory = await self._call(jobs.HISTORY, os.path.abspath(path))
        return result

    async def related(
        self,
        target: str,
        *,
        project: str | None = None,
        as_of: datetime | None = None,
        limit: int = 50,
        cwd: str | None = None,
    ) -> Related:
        """The code graph around a file path, `path#Name`, a symbol's name or a chunk id:
        definitions, callers and callees, importers and imports, bases and subclasses, files
        that change with it and the sessions that touched each. Paths are taken against `cwd`
        (default: this process's working directory)."""
        result: Related = await self._call(
            jobs.RELATED,
            target,
            cwd or os.getcwd(),
            project,
            as_of.isoformat() if as_of else None,
            limit,
        )
        return result

    async def impact(
        self,
        paths: list[str],
        *,
        depth: int = 2,
        as_of: datetime | None = None,
        limit: int = 50,
        cwd: str | None = None,
    ) -> Impact:
        """What depends on these files (reverse imports and calls, `depth` steps), the tests
        among them, and errors that followed earlier edits of them."""
        result: Impact = await self._call(
            jobs.IMPACT,
            paths,
            cwd or os.getcwd(),
            depth,
            as_of.isoformat() if as_of else None,
            limit,
        )
        return result

    async def session(self, session_id: str) -> SessionReplay:
        """A session replayed in file order; an id or a unique prefix of one."""
        result: SessionReplay = await self._call(jobs.SESSION, session_id)
        return result

    async def pin(self, memory_id: str, pinned: bool = True) -> PinResult:
        result: PinResult = await self._call(jobs.PIN, memory_id, pinned)
        return result

    async def ingest(self, paths: list[str]) -> list[dict[str, Any]]:
        """Ingest transcript files now; one report per file."""
        from memoryd import queue

        waiting = await queue.enqueue_ingest(await self.work_queue(), paths, fresh=True)
        return [await queue.wait_for(job, self.settings.job_timeout_seconds) for job in waiting]

    async def queue_ingest(self, paths: list[str]) -> None:
        """Ingest transcript files soon, without waiting (a hook must not block the agent);
        one that does not exist yet (a client's first hooks run before it writes) as soon as
        it appears (memoryd/watch/transcripts.py)."""
        from memoryd import queue

        redis = await self.work_queue()
        here = [p for p in paths if os.path.isfile(p)]
        await queue.enqueue_ingest(redis, here)
        await queue.expect_transcripts(redis, [p for p in paths if p not in here])

    async def maintenance(self, spec: jobs.JobSpec, dry_run: bool = False) -> dict[str, Any]:
        """Run decay, prune or reembed now (waiting for a scheduled run in progress)."""
        from memoryd import queue

        kwargs = {"dry_run": True} if dry_run and spec is jobs.PRUNE else {}
        job = await queue.enqueue(await self.work_queue(), spec, **kwargs)
        assert job is not None  # no job id given: never refused
        result: dict[str, Any] = await queue.wait_for(job, self.settings.job_timeout_seconds)
        return result

    async def export(self, out: IO[bytes], project: str | None = None) -> int:
        """Write the graph (or one project's part of it) to `out` as JSON lines
        (memoryd/database/export.py), a page per query, so no table is ever held whole; returns the
        rows written."""
        scope = await self._call(jobs.EXPORT_TABLES, project)
        return await write_jsonl(_Pages(self, scope["project"]), out, scope["tables"])

    async def import_file(self, path: Path, batch: int = 500) -> dict[str, int]:
        """Load an export (plain or zstd) into this daemon's database, a batch of rows per
        job, then the search indexes rebuilt; rows per table. Rows come without vectors:
        `reembed` gives them back."""
        from memoryd import queue

        counts: dict[str, int] = {}
        for table, lines in itertools.groupby(read_jsonl(path), key=lambda line: line["table"]):
            rows = (line["row"] for line in lines)
            while chunk := list(itertools.islice(rows, batch)):
                job = await queue.enqueue(await self.work_queue(), jobs.IMPORT_ROWS, table, chunk)
                assert job is not None  # no job id given: never refused
                done = await queue.wait_for(job, self.settings.job_timeout_seconds)
                counts[str(table)] = counts.get(str(table), 0) + done
        await self.reindex()  # the rows came in past the search indexes' writer
        return counts

    async def forget_scope(self, scope: str, value: str, dry_run: bool = False) -> dict[str, Any]:
        """Forget a session, project, path glob or everything before a time (see
        workers/privacy.py): rows removed per table (to remove, with `dry_run`)."""
        from memoryd import queue

        job = await queue.enqueue(await self.work_queue(), jobs.FORGET_SCOPE, scope, value, dry_run)
        assert job is not None  # no job id given: never refused
        result: dict[str, Any] = await queue.wait_for(job, self.settings.job_timeout_seconds)
        return result

    async def projects(self) -> list[ProjectInfo]:
        """The watched projects."""
        result: list[ProjectInfo] = await self._call(jobs.PROJECTS)
        return result

    async def scope(self, cwd: Path | None = None, project: str | None = None) -> Scope:
        """The project a call is about: `project` (id, name, root or "all"), else the watched
        project containing `cwd` (default: this process's working directory)."""
        return resolve_scope(await self.projects(), cwd or Path.cwd(), project)

    async def get(self, ids: list[str], max_chars: int = DEFAULT_BUDGET) -> list[Record]:
        """Full records (code chunks with path and lines, memories with session and seq) by
        the ids search returned, in order; together at most about `max_chars` of text."""
        result: list[Record] = await self._call(jobs.GET, list(ids), max_chars)
        return result

    async def timeline(
        self, anchor: str, before: int = 5, after: int = 5, max_chars: int = DEFAULT_BUDGET
    ) -> Timeline:
        """The events of a session around a memory (or a goal's prompt)."""
        result: Timeline = await self._call(jobs.TIMELINE, anchor, before, after, max_chars)
        return result

    async def recent_activity(
        self, project: str | None, since: datetime | None = None
    ) -> RecentActivity:
        """Sessions and goals active since `since` (default: 7 days ago) in a project (an id;
        None: every project), the files they modified, failures not followed by a success."""
        start = since or datetime.now(UTC) - timedelta(days=7)
        result: RecentActivity = await self._call(jobs.RECENT_ACTIVITY, project, start.isoformat())
        return result

    async def remember(
        self,
        text: str,
        kind: str = "note",
        files: list[str] | None = None,
        *,
        cwd: Path | None = None,
        project: str | None = None,
    ) -> Remembered:
        """Record an agent's decision, note or todo in the project's notes (pinned), linked to
        the files it names. Relative paths are taken against `cwd` (default: this process's)."""
        where = cwd or Path.cwd()
        result: Remembered = await self._call(
            jobs.REMEMBER, text, kind, list(files or []), str(where.resolve()), project
        )
        return result

    async def anchors(self, ids: list[str]) -> dict[str, list[AnchorState]]:
        """Whether the code these memories point at is what they saw: per memory id (as search
        and get give them) that has anchors, one state per file or symbol it names:
        `current`, `changed` (`since`, `lines`), `deleted` or `unknown` (memoryd/anchors.py;
        `anchor_text` prints them). Memories that point at no code are left out."""
        result: dict[str, list[AnchorState]] = await self._call(jobs.ANCHORS, list(ids))
        return result

    async def then_modified(self, ids: list[str], most: int = 3) -> dict[str, list[str]]:
        """Per memory id: the files its session then modified (after it, in order, at most
        `most`); memories whose session modified nothing after them are left out."""
        result: dict[str, list[str]] = await self._call(jobs.THEN_MODIFIED, list(ids), most)
        return result

    async def forget(self, ids: list[str]) -> Forgotten:
        """Delete memories (or goals) with their edges, from the database and every index."""
        result: Forgotten = await self._call(jobs.FORGET, list(ids))
        return result

    async def file_context(self, project: str, cwd: str, path: str, session: str) -> dict[str, Any]:
        """Earlier sessions of `project` that edited `path` (goal, when, the failures that
        followed and what fixed them) and the notes linked to it; empty when there are none."""
        result: dict[str, Any] = await self._call(jobs.FILE_CONTEXT, project, cwd, path, session)
        return result

    async def error_context(self, project: str, text: str, session: str) -> dict[str, Any]:
        """Where the error of a failure's output was seen before in `project` and what fixed
        it; empty when it is new."""
        result: dict[str, Any] = await self._call(jobs.ERROR_CONTEXT, project, text, session)
        return result

    async def hook(
        self, agent: str, command: str, stdin: str, cwd: str, max_chars: object = None
    ) -> str:
        """What an agent's hook prints for its JSON `stdin` (memoryd/agent/hooks.py); `max_chars`:
        the hook process's own `hook_max_chars`, if it has one."""
        result: str = await self._call(jobs.HOOK, agent, command, stdin, cwd, max_chars)
        return result

    async def injections(self, limit: int = 50) -> list[dict[str, str]]:
        """What the hooks injected into agents' sessions lately, newest first: agent,
        session, at, event and the text itself."""
        result: list[dict[str, str]] = await self._call(jobs.INJECTIONS, limit)
        return result

    async def daily_stats(self, days: int = 365) -> list[dict[str, Any]]:
        """memoryd's numbers a day over the last `days` days (memories, chunks, database_mb,
        jobs), oldest first."""
        result: list[dict[str, Any]] = await self._call(jobs.DAILY_STATS, days)
        return result

    async def reindex(self) -> dict[str, Any]:
        """Rebuild the search indexes from the database; rows indexed per table."""
        from memoryd import queue

        job = await queue.enqueue(await self.work_queue(), jobs.REINDEX)
        assert job is not None  # no job id given: never refused
        result: dict[str, Any] = await queue.wait_for(job, self.settings.job_timeout_seconds)
        return result

    async def index_progress(self) -> list[ProjectProgress]:
        """Each project and how far its last whole-project index got."""
        result: list[ProjectProgress] = await self._call(jobs.INDEX_PROGRESS)
        return result

    async def pause(self, seconds: int | None = None) -> None:
        """Stop capture (for `seconds`, or until resume); search goes on."""
        from memoryd import queue

        await queue.pause(await self.work_queue(), seconds)

    async def resume(self, catch_up: bool = False) -> dict[str, Any]:
        """Capture on again. `catch_up`: read what the transcripts gained meanwhile; else it
        is skipped (the cursors of transcripts changed since the pause move to their ends)."""
        from memoryd import queue

        redis = await self.work_queue()
        since = await queue.resume(redis)
        if since is None:
            return {"paused_since": None, "caught_up": 0, "skipped": 0}
        changed: list[str] = await self._call(jobs.CHANGED_TRANSCRIPTS, since.timestamp())
        if catch_up:
            # Fresh jobs: a job of the same file and size that ran during the pause (and
            # left the file alone) would otherwise stand for this one.
            waiting = await queue.enqueue_ingest(redis, changed, fresh=True)
            for job in waiting:
                await queue.wait_for(job, self.settings.job_timeout_seconds)
            return {"paused_since": since.isoformat(), "caught_up": len(changed), "skipped": 0}
        job = await queue.enqueue(redis, jobs.SKIP_TRANSCRIPTS, changed)
        assert job is not None  # no job id given: never refused
        skipped = await queue.wait_for(job, self.settings.job_timeout_seconds)
        return {"paused_since": since.isoformat(), "caught_up": 0, "skipped": skipped}

    async def daemon_running(self) -> bool:
        from memoryd import queue

        return await queue.live_workers(await self.work_queue()) > 0

    async def status(self) -> dict[str, Any]:
        """Where memoryd keeps its data, whether the daemon runs, the queue, and the
        database's own account (rows per table, projects, maintenance, transcript lag). The
        daemon reads the queue's part (over the channel, this process loads no Redis client),
        and says what it remembers: its own config and `--repo`s, not this process's."""
        info = await self._call(jobs.STATUS)
        return {**local_status(self.settings), **info}


def remembered(settings: Settings) -> dict[str, Any]:
    """What `settings` say memoryd remembers: agents, transcript folders, repos, filters."""
    return {
        "agents": {agent: settings.follows(agent) for agent in default_transcripts()},
        "transcripts": [str(p) for p in settings.transcript_roots],
        "repos": [str(p) for p in settings.repos if settings.remembers(p)],
        "exclude": settings.exclude,
        "include": settings.include,
    }


def local_status(settings: Settings) -> dict[str, Any]:
    """The part of `status` this process knows without the daemon: where things are, and
    what its own config remembers (the daemon's answer replaces that with its own)."""
    s = settings
    return {
        "data_dir": str(s.data_dir),
        "config_file": str(config_file()),
        "redis": s.queue_url,
        "redis_mode": "embedded" if s.embedded_redis else "external",
        "surreal": s.database_url,
        "surreal_mode": "embedded" if s.embedded_db else "server",
        "remembered": remembered(s),
    }


class _Pages:
    """The daemon's tables as memoryd.database.export reads them: each page one query job."""

    def __init__(self, client: Client, project: str | None) -> None:
        self.client = client
        self.project = project

    async def table_names(self) -> list[str]:
        raise AssertionError("the export names its tables")

    async def rows_after(self, table: str, after: str | None, batch: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = await self.client._call(
            jobs.EXPORT_PAGE, table, after, batch, self.project
        )
        return rows


# What starts the queue, the database and a worker in this process for the length of a block
# (memoryd/daemon/runtime.py's `serving_here`): the served queue, or None when another process took
# the data dir first. Handed in by the one-shot commands: the client never starts one itself.
Serve = Callable[[Settings], contextlib.AbstractAsyncContextManager["ArqRedis | None"]]


@contextlib.asynccontextmanager
async def connect(settings: Settings, *, serve: Serve | None = None) -> AsyncIterator[Client]:
    """A client of the running daemon: over its channel when it listens in this data dir, else
    over the queue a live worker serves. `serve` (one-shot CLI commands): when no daemon runs,
    serve the data dir in this process for the length of the block instead of failing; when
    one is starting (or another command serves the data dir), wait for it, bounded, and never
    take the database from it; when the command that served it ends first, go on serving it
    here (`queue.handover`). Agents' processes (MCP, hooks) never do that: a daemon in an
    agent's process tree would die with the session and fight the service for the database."""
    async with contextlib.AsyncExitStack() as held:
        memoryd = await _reach(settings, serve, held)
        held.push_async_callback(memoryd.close)
        if serve is not None and (owner := memoryd.served_by) is not None:
            from memoryd import queue

            async def take_over() -> None:
                log.warning(
                    "%s, the command that served data dir %s, stopped before this command's "
                    "jobs ended: they go on",
                    _memoryd(owner),
                    settings.data_dir,
                )
                successor = await _reach(settings, serve, held)
                await successor.close()  # its own connection: the jobs' pool connects again

            token = queue.handover.set(take_over)
            held.callback(queue.handover.reset, token)
        yield memoryd


async def _reach(
    settings: Settings, serve: Serve | None, held: contextlib.AsyncExitStack
) -> Client:
    """A client of whatever serves the data dir now, or (with `serve`) of its serving started
    in this process and held by `held`."""
    waiting = _Waiting(settings)
    while True:
        if channel.listening(settings.channel_socket):
            return Client.over_channel(settings)
        redis = await _daemon_queue(settings)
        if redis is not None:
            memoryd = Client(redis, settings)
            memoryd._own_redis = True
            if settings.embedded_redis and holder(daemon_lock_path(settings.data_dir)) is None:
                # Another one-shot command serves it, for the length of its own work.
                memoryd.served_by = holder(serving_lock_path(settings.data_dir))
            return memoryd
        if serve is None:
            raise DaemonUnavailable(NOT_RUNNING)
        if (owner := holder(serving_lock_path(settings.data_dir))) is None:
            served = await held.enter_async_context(serve(settings))
            if served is not None:
                return Client(served, settings)
            continue  # another process took it first: wait for that one
        await waiting.step(owner)


def _memoryd(pid: int) -> str:
    """A memoryd process as messages name it (a lock just taken has no pid written yet: -1)."""
    return f"memoryd (pid {pid})" if pid > 0 else "memoryd"


# How often a command waiting for a daemon that is starting looks again.
_POLL_SECONDS = 0.2


class _Waiting:
    """A one-shot command's bounded wait for the process serving the data dir (a daemon that
    is starting) to answer; said once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limit = SERVING_WAIT_SECONDS
        self.deadline: float | None = None

    async def step(self, owner: int) -> None:
        import asyncio

        now = time.monotonic()
        daemon = holder(daemon_lock_path(self.settings.data_dir))
        data_dir = self.settings.data_dir
        who = (
            f"{_memoryd(daemon)} is starting with data dir {data_dir}"
            if daemon is not None
            else f"{_memoryd(owner)}, another command, serves data dir {data_dir}"
        )
        if self.deadline is None:
            self.deadline = now + self.limit
            log.warning("%s: waiting for it (at most %.0fs)", who, self.limit)
        elif now > self.deadline:
            raise DaemonUnavailable(f"{who}, and did not answer within {self.limit:.0f}s")
        await asyncio.sleep(_POLL_SECONDS)


async def _daemon_queue(settings: Settings) -> ArqRedis | None:
    """A connection to the queue a live worker serves, or None when nothing serves it. An
    external Redis that cannot be reached is an error (nothing here could start it)."""
    from memoryd import queue

    if settings.embedded_redis and not channel.listening(settings.redis_socket):
        return None
    try:
        redis = await queue.connect(settings.queue_url)
    except DaemonUnavailable:
        if settings.embedded_redis:
            return None  # the socket of a private Redis that is gone
        raise
    if await queue.live_workers(redis) == 0:
        await redis.aclose()
        return None
    return redis
