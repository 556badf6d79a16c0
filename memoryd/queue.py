"""The arq side shared by every process: queue names, Redis connections, job ids, enqueueing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis.exceptions
from arq import ArqRedis, create_pool
from arq.connections import RedisSettings
from arq.constants import in_progress_key_prefix, result_key_prefix, retry_key_prefix
from arq.jobs import Job, JobResult, JobStatus, deserialize_result

from memoryd import jobs
from memoryd.errors import DaemonUnavailable, JobFailed, MemorydError, value_of
from memoryd.ids import stable_id
from memoryd.jobs import JOBS_QUEUE, JobSpec
from memoryd.liveness import holder

log = logging.getLogger(__name__)

# A process serving the queues refreshes its key; clients look for one before waiting on jobs.
WORKER_KEY_PREFIX = "memoryd:worker:"
WORKER_KEY_TTL = 10
# A repository watcher announces the roots it watches under this prefix (refreshed well within
# the TTL), so `doctor` run from another shell checks what the daemon watches.
WATCHING_KEY_PREFIX = "memoryd:watching:"
WATCHING_KEY_TTL = 30
# A maintenance task's run holds this lock (plus the task name) while it runs.
MAINTENANCE_LOCK_PREFIX = "memoryd:lock:"
# Set while capture is paused (`memoryd pause`): when it was paused; expires with `--for`.
PAUSED_KEY = "memoryd:paused"
# Transcripts a hook named before they existed (path -> when, epoch seconds): the transcript
# watcher queues each once it appears, and drops one that has not within EXPECTED_SECONDS.
EXPECTED_KEY = "memoryd:expected"
EXPECTED_SECONDS = 86400


def redis_settings(url: str) -> RedisSettings:
    try:
        settings = RedisSettings.from_dsn(url)
    except (RuntimeError, ValueError) as exc:
        raise MemorydError(f"invalid Redis URL {url!r}: {exc}") from None
    # Fail fast with a clear message instead of arq's long default retry loop.
    settings.conn_timeout = 2
    settings.conn_retries = 2
    settings.conn_retry_delay = 0.5
    return settings


async def connect(url: str) -> ArqRedis:
    try:
        return await create_pool(redis_settings(url), default_queue_name=JOBS_QUEUE)
    except MemorydError:
        raise
    except Exception as exc:  # ConnectionError, OSError, timeouts
        raise DaemonUnavailable(f"cannot reach Redis at {url}: {exc}") from None


# Redis's answers that say it refuses writes (MISCONF: its disk is full), not that a call was
# wrong. A script's or a pipeline's error quotes the answer inside its own text (up to a quote).
_REFUSAL = re.compile(r"\b(?:MISCONF|READONLY|OOM)\b[^'\"\n]*")


def server_lost(exc: BaseException) -> bool:
    """A Redis error that says the server is gone or refuses writes: the serving process
    reports that, once (memoryd/daemon/runtime.py)."""
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return True
    if isinstance(exc, redis.exceptions.WatchError):
        # redis-py raises a connection lost under WATCH (arq's enqueue_job) as a WatchError
        # raised while handling it; a watched key changed by another client has no such cause.
        return exc.__context__ is not None and server_lost(exc.__context__)
    return isinstance(exc, redis.exceptions.ResponseError) and bool(_REFUSAL.search(str(exc)))


def redis_reason(exc: BaseException) -> str:
    """Redis's own words, without the command: a pipeline's error quotes its arguments (job
    payloads, binary) and a script's wraps the answer in its own text."""
    text = str(exc)
    if refusal := _REFUSAL.search(text):
        return refusal.group(0)
    return text.partition("caused error: ")[2] or text


def worker_key(lock: Path) -> str:
    """A serving process's heartbeat key. Its value is the path of a lock file the process
    holds for as long as it lives, so a process killed on this host stops counting at once."""
    return f"{WORKER_KEY_PREFIX}{socket.gethostname()}:{lock.stem}"


def _dead_here(key: str, lock: str | None) -> bool:
    """A heartbeat of a process on this host whose lock nobody holds (killed moments ago: its
    key has not expired yet). Keys of other hosts live until they expire."""
    host = key.removeprefix(WORKER_KEY_PREFIX).partition(":")[0]
    if host != socket.gethostname() or not lock or not lock.startswith("/"):
        return False
    return holder(Path(lock)) is None


def watching_key() -> str:
    """A watcher's own key for the roots it announces."""
    return f"{WATCHING_KEY_PREFIX}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def announce_watching(redis: ArqRedis, key: str, roots: Sequence[Path]) -> None:
    await redis.set(key, json.dumps([str(r) for r in roots]), ex=WATCHING_KEY_TTL)


async def watched_roots(redis: ArqRedis) -> list[Path]:
    """The repository roots the running watchers announce."""
    keys = [key async for key in redis.scan_iter(match=f"{WATCHING_KEY_PREFIX}*")]
    values = await redis.mget(keys) if keys else []
    return sorted({Path(root) for value in values if value for root in json.loads(value)})


async def live_workers(redis: ArqRedis) -> int:
    keys = [key async for key in redis.scan_iter(match=f"{WORKER_KEY_PREFIX}*")]
    locks = await redis.mget(keys) if keys else []
    dead = [
        key
        for key, lock in zip(keys, locks, strict=True)
        if _dead_here(_text(key), _text(lock) if lock is not None else None)
    ]
    if dead:
        await redis.delete(*dead)
        for key, lock in zip(keys, locks, strict=True):
            if key in dead and lock is not None:
                Path(_text(lock)).unlink(missing_ok=True)  # the dead process's, on this host
    return len(keys) - len(dead)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# Per project, a hash of file -> the id of the index job queued for it and not started yet. A
# file whose job still waits needs no second job: that job reads the disk when it starts, after
# whatever event is being handled now. The job drops its marks as its first act (claim_files).
_QUEUED_PREFIX = "memoryd:queued:"
# Drop the marks that still name this job (a later job may have taken a file over since), and
# take the whole-project sync that adopted it, if one did (KEYS[2], see _ADOPT).
_CLAIM = """
for i, f in ipairs(ARGV) do
    if i > 1 and redis.call('HGET', KEYS[1], f) == ARGV[1] then redis.call('HDEL', KEYS[1], f) end
end
return redis.call('GETDEL', KEYS[2])
"""
# A whole-project sync leaves the files of jobs queued before it (say, before a crash) to those
# jobs, and counts their work as its own: the job of each file still marked (not started, as
# claiming is atomic with this) is told which sync it counts for. ARGV: the sync's run, the
# key's lifetime, then (file, job id) pairs; returns the files left to their jobs.
_ADOPT_PREFIX = "memoryd:adopted:"
_ADOPT = """
local held = {}
for i = 3, #ARGV, 2 do
    local job = ARGV[i + 1]
    if redis.call('HGET', KEYS[1], ARGV[i]) == job then
        redis.call('SET', KEYS[2] .. job, ARGV[1], 'EX', tonumber(ARGV[2]))
        table.insert(held, ARGV[i])
    end
end
return held
"""
# How long an adoption waits for its job: past any queue's wait, bounded.
_ADOPT_SECONDS = 7 * 24 * 3600


# An index job holds every plan of its files until it writes them: besides `batch` files, its
# files' bytes are bounded too (32 files of 2 MB each would be 64 MB). A larger file goes alone.
JOB_BYTES = 4 * 1024 * 1024


def _sizes(root: Path, paths: Sequence[str]) -> list[int]:
    """Sizes by stat, never a read (a file gone counts 0: its job records the deletion)."""
    sizes = []
    for path in paths:
        try:
            sizes.append(os.stat(root / path).st_size)
        except OSError:
            sizes.append(0)
    return sizes


def index_batches(
    paths: Sequence[str], sizes: Sequence[int], files: int, max_bytes: int
) -> list[list[str]]:
    """`paths` in order, in batches of at most `files` files and `max_bytes` bytes."""
    batches: list[list[str]] = []
    part: list[str] = []
    held = 0
    for path, size in zip(paths, sizes, strict=True):
        if part and (len(part) == files or held + size > max_bytes):
            batches.append(part)
            part, held = [], 0
        part.append(path)
        held += size
    if part:
        batches.append(part)
    return batches


# How long a job put ahead of the queue (below) lives unstarted: arq's default, which it would
# count from the backdated score instead.
_AHEAD_EXPIRES = timedelta(days=1)


async def _ahead(redis: ArqRedis, spec: JobSpec, count: int) -> list[dict[str, Any]]:
    """arq's options for `count` jobs of an explicit command, in order, ahead of every job
    queued before it: jobs an interrupted command left (kept by the append-only file) must
    not make the next command wait for all of them. Their scores are backdated to just before
    the queue's head; with nothing waiting, no options."""
    head = await redis.zrange(spec.queue, 0, 0, withscores=True)
    if not head:
        return [{}] * count
    first = min(int(head[0][1]), int(time.time() * 1000)) - count
    return [
        {
            "_defer_until": datetime.fromtimestamp((first + i) / 1000, UTC),
            "_expires": _AHEAD_EXPIRES,
        }
        for i in range(count)
    ]


async def enqueue_index(
    redis: ArqRedis,
    project_id: str,
    root: Path,
    paths: Sequence[str],
    batch: int,
    fresh: bool = False,
    generation: int = 0,
    progress: str | None = None,
    before: Callable[[int], Awaitable[None]] | None = None,
) -> list[tuple[Job, int]]:
    """Enqueue `index_files` jobs of up to `batch` files and JOB_BYTES bytes; returns each job
    with its file count.

    Files already waiting in a queued job are left to it (and never read here: a job's
    identity is a fresh id, not the files' content), so repeated events, reconciles and
    restarts do not pile up jobs for the same files. `fresh` (an explicit `memoryd index`)
    enqueues every file, so its report describes this run, ahead of what was queued before.
    `generation` > 0: a worker's
    follow-up for files that kept changing while it read them. `progress`: the whole-project
    sync the jobs belong to (each counts its files into it, and so do the jobs queued before
    that it leaves files to); `before` is told how many files the sync covers, before the
    first job is enqueued or adopted. While capture is paused nothing but an explicit request
    is queued."""
    if not fresh and await _left_alone(redis, f"{len(paths)} files of {project_id}"):
        return []
    wanted = list(dict.fromkeys(paths))
    # Every file counts in the sync: those left to jobs queued before it too (they count for
    # it once adopted, which is after it started, so none can finish uncounted).
    if before is not None:
        await before(len(wanted))
    if not fresh:
        waiting = await _waiting_marks(redis, project_id, wanted)
        held = set(waiting)
        if progress is not None and waiting:
            held = set(await _adopt(redis, project_id, progress, waiting))
        wanted = [p for p in wanted if p not in held]
    queued = []
    sizes = await asyncio.to_thread(_sizes, root, wanted)
    parts = index_batches(wanted, sizes, batch, JOB_BYTES)
    places = await _ahead(redis, jobs.INDEX_FILES, len(parts)) if fresh else [{}] * len(parts)
    for part, place in zip(parts, places, strict=True):
        job_id = f"index:{project_id}:{uuid.uuid4().hex}"
        # Marks first: a mark of a job that never got enqueued names no queued job, so it is
        # ignored; a job enqueued before its marks could start and miss dropping them.
        await redis.hset(_QUEUED_PREFIX + project_id, mapping=dict.fromkeys(part, job_id))
        extra: dict[str, Any] = {"generation": generation} if generation else {}
        if progress is not None:
            extra["progress"] = progress
        job = await enqueue(
            redis, jobs.INDEX_FILES, project_id, str(root), part, job_id=job_id, **extra, **place
        )
        assert job is not None  # a fresh id: never refused
        queued.append((job, len(part)))
    return queued


async def _waiting_marks(redis: ArqRedis, project_id: str, paths: list[str]) -> dict[str, str]:
    """file -> id of the queued job that will read it, for those of `paths` that have one."""
    if not paths:
        return {}
    marks = [
        _text(m) if m is not None else None
        for m in await redis.hmget(_QUEUED_PREFIX + project_id, paths)
    ]
    waiting = {
        job_id: await Job(job_id, redis, _queue_name=JOBS_QUEUE).status()
        in (JobStatus.queued, JobStatus.deferred)
        for job_id in {m for m in marks if m is not None}
    }
    return {
        p: mark for p, mark in zip(paths, marks, strict=True) if mark is not None and waiting[mark]
    }


async def _adopt(redis: ArqRedis, project_id: str, run: str, marks: dict[str, str]) -> list[str]:
    """The files of `marks` whose job has not started yet; each such job counts for `run`."""
    pairs = [x for path_job in marks.items() for x in path_job]
    keys = (_QUEUED_PREFIX + project_id, _ADOPT_PREFIX)
    held = await redis.eval(_ADOPT, 2, *keys, run, _ADOPT_SECONDS, *pairs)
    return [_text(p) for p in held]


async def claim_files(
    redis: ArqRedis, project_id: str, paths: Sequence[str], job_id: str
) -> str | None:
    """A starting index job takes its files off the queued marks (before it reads any).
    Returns the whole-project sync that adopted it (its work counts there), if one did."""
    keys = (_QUEUED_PREFIX + project_id, _ADOPT_PREFIX + job_id)
    run = await redis.eval(_CLAIM, 2, *keys, job_id, *paths)
    return None if run is None else _text(run)


async def enqueue(
    redis: ArqRedis, spec: JobSpec, *args: Any, job_id: str | None = None, **kwargs: Any
) -> Job | None:
    """The one place a job is put on a queue. None: arq refused the id (see enqueue_index)."""
    return await redis.enqueue_job(
        spec.name, *args, _job_id=job_id, _queue_name=spec.queue, **kwargs
    )


async def enqueue_embed(redis: ArqRedis, keys: list[str] | None = None) -> str:
    """An `embed_chunks` job (the second phase of indexing) for these chunks, or, with None,
    for every chunk that owes its vector; returns its id."""
    job_id = f"embed:{uuid.uuid4().hex}"
    job = await enqueue(redis, jobs.EMBED_CHUNKS, *([] if keys is None else [keys]), job_id=job_id)
    assert job is not None  # a fresh id: never refused
    return job_id


async def embedded_later(redis: ArqRedis, report: dict[str, Any], timeout: float | None) -> int:
    """Texts embedded by the `embed_chunks` job an index job queued (0 if it queued none),
    once that job is done: `report` is the index job's."""
    job_id = report.get("embed_job")
    if job_id is None:
        return 0
    done = await wait_for(Job(job_id, redis, _queue_name=JOBS_QUEUE), timeout)
    return int(done["embedded"])


def ingest_job_id(path: str) -> str:
    """A transcript only grows: its size and mtime name the work. Growth is a new job; a repeat
    of a queued, running or finished namesake would read nothing new."""
    try:
        info = os.stat(path)
        version = f"{info.st_size}:{info.st_mtime_ns}"
    except OSError:
        version = f"gone:{uuid.uuid4().hex}"
    return f"ingest:{stable_id(path)}:{version}"


async def pause(redis: ArqRedis, seconds: int | None = None) -> None:
    """Stop capture: watchers queue nothing, index and ingest jobs write nothing; queries go
    on. With `seconds`, capture resumes by itself then (and catches up as files change)."""
    if not await redis.exists(PAUSED_KEY):
        await redis.set(PAUSED_KEY, datetime.now(UTC).isoformat())
    if seconds:
        await redis.expire(PAUSED_KEY, seconds)
    else:
        await redis.persist(PAUSED_KEY)


async def paused_since(redis: ArqRedis) -> datetime | None:
    value = await redis.get(PAUSED_KEY)
    return datetime.fromisoformat(_text(value)) if value else None


async def _left_alone(redis: ArqRedis, what: str) -> bool:
    """Whether capture is paused; if so, one line says what a change would have queued."""
    if (since := await paused_since(redis)) is None:
        return False
    log.info("capture is paused (since %s): %s left alone", since.isoformat(), what)
    return True


async def resume(redis: ArqRedis) -> datetime | None:
    """Capture on again; returns when it was paused (None: it was not)."""
    since = await paused_since(redis)
    await redis.delete(PAUSED_KEY)
    return since


async def enqueue_ingest(
    redis: ArqRedis, paths: Sequence[str], fresh: bool = False, from_offset: int | None = None
) -> list[Job]:
    """`fresh` (an explicit `memoryd ingest`) always runs, so its report is about this run,
    and ahead of what was queued before. `from_offset`: a worker's follow-up slice of a huge
    transcript, named by where it starts. While capture is paused nothing but an explicit
    request is queued."""
    if not fresh and await _left_alone(redis, f"{len(paths)} transcripts"):
        return []
    queued = []
    places = await _ahead(redis, jobs.INGEST_TRANSCRIPT, len(paths)) if fresh else [{}] * len(paths)
    for path, place in zip(paths, places, strict=True):
        if from_offset is not None:
            job_id = f"ingest:{stable_id(path)}:from:{from_offset}"
        else:
            job_id = ingest_job_id(path) + (f":{uuid.uuid4().hex[:12]}" if fresh else "")
        job = await enqueue(redis, jobs.INGEST_TRANSCRIPT, path, job_id=job_id, **place)
        queued.append(job or Job(job_id, redis, _queue_name=JOBS_QUEUE))
    return queued


async def expect_transcripts(redis: ArqRedis, paths: Sequence[str]) -> None:
    """Remember transcripts that do not exist yet (a client's hook runs before its first
    write) for the watcher to queue once they appear. Nothing while capture is paused."""
    if paths and not await paused_since(redis):
        now = str(time.time())
        await redis.hset(EXPECTED_KEY, mapping=dict.fromkeys(paths, now))


async def expected_transcripts(redis: ArqRedis) -> dict[str, float]:
    """The transcripts hooks named before they existed, and since when."""
    found = await redis.hgetall(EXPECTED_KEY)
    return {_text(path): float(since) for path, since in found.items()}


async def drop_expected(redis: ArqRedis, paths: Sequence[str]) -> None:
    if paths:
        await redis.hdel(EXPECTED_KEY, *paths)


# How often a waiting client asks whether its job finished (arq polls: a result is seen half
# a period late on average). Measured against a running daemon, a search's round trip had a
# median of 103 ms polling every 50 ms, 85 ms every 10 ms and 87 ms every 2 ms (the rest is
# the worker's own 20 ms poll and the query): queries poll every 10 ms, long work every 50 ms.
QUERY_POLL_SECONDS = 0.01
WORK_POLL_SECONDS = 0.05


# Redis unreachable this long ends a serving process (memoryd/daemon/runtime.py) and a client's
# wait: a private Redis that died is back well within it.
REDIS_LOST_SECONDS = 10.0
# A wait looks this often at whether the serving that this command started in its own process
# has ended (Serving).
_WAIT_SLICE_SECONDS = 1.0


class Serving:
    """The queue served in this command's own process (memoryd/daemon/runtime.py): when that serving
    ends for good (Redis lost, or refusing writes), it says why here, and the command's waits
    end with that reason instead of waiting for jobs nobody can finish."""

    def __init__(self) -> None:
        self.ended: MemorydError | None = None


# Set by the task that starts serving; the waits of that task (the command) read it.
serving: ContextVar[Serving | None] = ContextVar("memoryd_serving", default=None)
# Set by a one-shot command whose jobs run on the queue another command serves (memoryd/client.py
# `connect`): when that queue is lost it returns once the data dir is served again (by this
# command or whoever took it first). The jobs waited for run again there: the private Redis
# keeps them in its append-only file.
handover: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "memoryd_handover", default=None
)


async def wait_for(job: Job, timeout: float | None, poll: float = WORK_POLL_SECONDS) -> Any:
    """A job's result. A user error it answered is raised again as its own class; a crash of
    the job as JobFailed with the job's own message. A lost connection is waited out for
    REDIS_LOST_SECONDS (a private Redis that died is being started again, and the job runs
    again), after a `handover` when another command served the queue; the end of this
    command's own serving ends the wait at once."""
    deadline = None if timeout is None else time.monotonic() + timeout
    lost_since = 0.0
    while True:
        if (own := serving.get()) is not None and own.ended is not None:
            raise own.ended
        left = _WAIT_SLICE_SECONDS if deadline is None else deadline - time.monotonic()
        try:
            result = await job.result(timeout=min(left, _WAIT_SLICE_SECONDS), poll_delay=poll)
        except TimeoutError:
            lost_since = 0.0  # Redis answered: a later loss is waited out afresh
            if deadline is not None and time.monotonic() >= deadline:
                raise DaemonUnavailable(
                    f"job {job.job_id} did not finish within {timeout:.0f}s; is a worker running?"
                ) from None
            continue
        except MemorydError:
            raise
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            if not lost_since and (take_over := handover.get()) is not None:
                await take_over()  # the pool connects again to the socket's new Redis
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since >= REDIS_LOST_SECONDS:
                raise DaemonUnavailable(
                    f"Redis unreachable for {REDIS_LOST_SECONDS:.0f}s while waiting for job "
                    f"{job.job_id} ({redis_reason(exc)})"
                ) from None
            await asyncio.sleep(poll)
            continue
        except Exception as exc:  # the job's own failure, already logged by the worker
            raise JobFailed(f"job {job.job_id} failed: {exc}") from None
        return value_of(result)


async def job_done(job: Job) -> bool:
    return await job.status() in (JobStatus.complete, JobStatus.not_found)


async def call(redis: ArqRedis, spec: JobSpec, *args: Any, timeout: float = 120.0) -> Any:
    """Run a job and wait for its answer (a query: search, status… on whichever process serves
    the database; or a maintenance task)."""
    job = await enqueue(
        redis, spec, *args, job_id=f"q:{spec.name}:{os.getpid()}:{uuid.uuid4().hex}"
    )
    assert job is not None  # fresh unique id: never refused
    return await wait_for(job, timeout, QUERY_POLL_SECONDS)


# arq counts a try when a job starts, and a job cut short by its worker's death or stop counts
# it too: three stops during one long ingest failed it for good ("max retries exceeded"), and
# its id (the transcript's size and time) was then refused until the file grew. A try cut
# short is given back. A job whose worker died under it this many times may be what kills it
# (memory): its tries count again, and arq's max_tries ends it.
ORPHANED_LIMIT = 10
ORPHANED_PREFIX = "memoryd:orphaned:"
# KEYS: retry counters; ARGV[1]: 1 to count each job as orphaned (ARGV[2]: the counters'
# prefix, ARGV[3]: the limit, ARGV[4]: their lifetime); ARGV[5]: the length of arq's prefix of
# the retry counters. Returns the jobs past the limit.
_GIVE_BACK = """
local past = {}
for _, key in ipairs(KEYS) do
    local job = string.sub(key, tonumber(ARGV[5]) + 1)
    local give = true
    if ARGV[1] == '1' then
        local orphaned = redis.call('INCR', ARGV[2] .. job)
        redis.call('EXPIRE', ARGV[2] .. job, ARGV[4])
        if orphaned > tonumber(ARGV[3]) then give = false; table.insert(past, job) end
    end
    if give and tonumber(redis.call('GET', key) or '0') > 0 then redis.call('DECR', key) end
end
return past
"""
# How long arq keeps a try counter (arq.worker sets it so).
_RETRY_KEY_SECONDS = 88400


async def give_back_tries(redis: ArqRedis, job_ids: Sequence[str], orphaned: bool) -> list[str]:
    """Give back the try of jobs cut short (by an orderly stop, or, `orphaned`, by a worker
    that died under them); returns the jobs orphaned past ORPHANED_LIMIT, whose try counts."""
    if not job_ids:
        return []
    keys = [retry_key_prefix + job_id for job_id in job_ids]
    args = [
        "1" if orphaned else "0",
        ORPHANED_PREFIX,
        ORPHANED_LIMIT,
        _RETRY_KEY_SECONDS,
        len(retry_key_prefix),
    ]
    return [_text(job) for job in await redis.eval(_GIVE_BACK, len(keys), *keys, *args)]


async def release_orphaned_jobs(redis: ArqRedis, died: bool = True) -> int:
    """Drop the in-progress marks of jobs whose worker is gone (and the maintenance locks
    they held), so they run again now rather than when the marks expire, with their tries
    given back. `died`: their worker died (counted towards ORPHANED_LIMIT); not when this
    process cancelled them itself for a Redis restart, which no job causes. Only safe when no
    worker is alive, which the caller checks. Returns the jobs freed."""
    marks = [_text(key) async for key in redis.scan_iter(match=f"{in_progress_key_prefix}*")]
    locks = [key async for key in redis.scan_iter(match=f"{MAINTENANCE_LOCK_PREFIX}*")]
    if marks or locks:
        await redis.delete(*marks, *locks)
    job_ids = [mark.removeprefix(in_progress_key_prefix) for mark in marks]
    for job_id in await give_back_tries(redis, job_ids, orphaned=died):
        log.warning(
            "job %s was cut short by a worker's death more than %d times: it may be the cause, "
            "so its tries count again",
            job_id,
            ORPHANED_LIMIT,
        )
    return len(marks)


async def oldest_job_age(redis: ArqRedis, queue: str = JOBS_QUEUE) -> float | None:
    """Seconds the oldest waiting job has waited (None when the queue is empty)."""
    oldest = await redis.zrange(queue, 0, 0, withscores=True)
    return max(0.0, time.time() - oldest[0][1] / 1000) if oldest else None


async def job_results(redis: ArqRedis) -> list[JobResult]:
    """The results arq keeps of finished jobs. arq's own `all_job_results` fails as a whole when
    one of them expires (a query's, after a minute) between its KEYS and its GETs: `status`
    then failed now and then on a busy daemon. One MGET reads them all at one moment, and a
    result gone by then is left out."""
    keys = await redis.keys(result_key_prefix + "*")
    results = []
    for key, value in zip(keys, await redis.mget(keys) if keys else [], strict=True):
        if value is not None:
            result = deserialize_result(value, deserializer=redis.job_deserializer)
            result.job_id = key[len(result_key_prefix) :].decode()
            results.append(result)
    return results


async def recent_outcomes(redis: ArqRedis, seconds: float = 3600) -> dict[str, int]:
    """Jobs that finished in the last `seconds`, by success (from the results arq keeps)."""
    since = datetime.now(UTC) - timedelta(seconds=seconds)
    counts = {"done": 0, "failed": 0}
    for result in await job_results(redis):
        if result.finish_time >= since:
            counts["done" if result.success else "failed"] += 1
    return counts


async def queue_depth(redis: ArqRedis, queue: str = JOBS_QUEUE) -> int:
    return int(await redis.zcard(queue))
