"""The arq side shared by every process: queue names, Redis connections, job ids, enqueueing."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import blake3
from arq import ArqRedis, create_pool
from arq.connections import RedisSettings
from arq.constants import in_progress_key_prefix
from arq.jobs import Job, JobStatus

from memoryd import jobs
from memoryd.errors import DaemonUnavailable, Failure, JobFailed, MemorydError
from memoryd.ids import stable_id
from memoryd.jobs import JOBS_QUEUE, JobSpec

# A process serving the queues refreshes its key; clients look for one before waiting on jobs.
WORKER_KEY_PREFIX = "memoryd:worker:"
WORKER_KEY_TTL = 10
# A maintenance task's run holds this lock (plus the task name) while it runs.
MAINTENANCE_LOCK_PREFIX = "memoryd:lock:"


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


def worker_key() -> str:
    """This process's heartbeat key: host and pid, so a dead process on this host is known."""
    return f"{WORKER_KEY_PREFIX}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _dead_here(key: str) -> bool:
    """A heartbeat of a process on this host that no longer exists (killed moments ago: its
    key has not expired yet). Keys of other hosts live until they expire."""
    host, _, rest = key.removeprefix(WORKER_KEY_PREFIX).partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        pass
    return False


async def live_workers(redis: ArqRedis) -> int:
    keys = [key async for key in redis.scan_iter(match=f"{WORKER_KEY_PREFIX}*")]
    dead = [key for key in keys if _dead_here(key.decode() if isinstance(key, bytes) else key)]
    if dead:
        await redis.delete(*dead)
    return len(keys) - len(dead)


# Files up to this size are hashed for their job id; bigger ones (skipped by the worker unless
# configured otherwise) are identified by size and mtime, so a 50 MB file is never read here.
_HASH_LIMIT = 4_000_000


def _version(root: Path, rel: str) -> str:
    """What identifies this version of a file in a job id: blake3 of its content (size and mtime
    for special or very large files, "gone" for a missing one). Never blocks on a FIFO."""
    path = root / rel
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "gone"
    except OSError as exc:  # permission denied, symlink loop, a directory
        return f"error:{exc.errno}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _HASH_LIMIT:
            return f"stat:{info.st_mode}:{info.st_size}:{info.st_mtime_ns}"
        hasher = blake3.blake3()
        while block := os.read(fd, 1 << 20):
            hasher.update(block)
        return hasher.hexdigest()[:32]
    except OSError as exc:
        return f"error:{exc.errno}"
    finally:
        os.close(fd)


def index_job_id(project_id: str, root: Path, paths: Sequence[str]) -> str:
    """The id carries each file's content hash: a later change is a new id. The same unchanged
    batch asked for twice while the first job still waits in the queue is one job."""
    hasher = blake3.blake3(project_id.encode())
    for rel in sorted(paths):
        hasher.update(f"\x1f{rel}\x1e{_version(root, rel)}".encode("utf-8", "surrogatepass"))
    return f"index:{project_id}:{hasher.hexdigest()[:32]}"


async def enqueue_index(
    redis: ArqRedis,
    project_id: str,
    root: Path,
    paths: Sequence[str],
    batch: int,
    fresh: bool = False,
    generation: int = 0,
) -> list[tuple[Job, int]]:
    """Enqueue `index_files` jobs of up to `batch` files; returns each job with its file count.
    `fresh` (an explicit sync) always runs, so its report describes this run, not a kept one.
    `generation` > 0: a worker's follow-up for files that kept changing while it read them.

    arq refuses an id while a job with it is queued, running, or its result is kept. Only a job
    that has not started yet reads the disk after this call, so only then is the refusal
    harmless; a running or finished namesake may have read an older state (A -> B -> A), and a
    new generation of the id is enqueued instead. A change is never dropped."""
    jobs = []
    for start in range(0, len(paths), batch):
        part = list(paths[start : start + batch])
        if fresh:
            job_id = f"index:{project_id}:{uuid.uuid4().hex}"
        else:
            job_id = await asyncio.to_thread(index_job_id, project_id, root, part)
        job = await _enqueue(redis, job_id, project_id, root, part, generation)
        if job is None:
            waiting = Job(job_id, redis, _queue_name=JOBS_QUEUE)
            if await waiting.status() in (JobStatus.queued, JobStatus.deferred):
                job = waiting
            else:
                job_id = f"{job_id}:{uuid.uuid4().hex[:12]}"
                job = await _enqueue(redis, job_id, project_id, root, part, generation)
                assert job is not None  # fresh unique id: never refused
        jobs.append((job, len(part)))
    return jobs


async def _enqueue(
    redis: ArqRedis, job_id: str, project_id: str, root: Path, part: list[str], generation: int
) -> Job | None:
    extra = {"generation": generation} if generation else {}
    return await enqueue(
        redis, jobs.INDEX_FILES, project_id, str(root), part, job_id=job_id, **extra
    )


async def enqueue(
    redis: ArqRedis, spec: JobSpec, *args: Any, job_id: str | None = None, **kwargs: Any
) -> Job | None:
    """The one place a job is put on a queue. None: arq refused the id (see enqueue_index)."""
    return await redis.enqueue_job(
        spec.name, *args, _job_id=job_id, _queue_name=spec.queue, **kwargs
    )


def ingest_job_id(path: str) -> str:
    """A transcript only grows: its size and mtime name the work. Growth is a new job; a repeat
    of a queued, running or finished namesake would read nothing new."""
    try:
        info = os.stat(path)
        version = f"{info.st_size}:{info.st_mtime_ns}"
    except OSError:
        version = f"gone:{uuid.uuid4().hex}"
    return f"ingest:{stable_id(path)}:{version}"


async def enqueue_ingest(
    redis: ArqRedis, paths: Sequence[str], fresh: bool = False, from_offset: int | None = None
) -> list[Job]:
    """`fresh` (an explicit `memoryd ingest`) always runs, so its report is about this run.
    `from_offset`: a worker's follow-up slice of a huge transcript, named by where it starts."""
    queued = []
    for path in paths:
        if from_offset is not None:
            job_id = f"ingest:{stable_id(path)}:from:{from_offset}"
        else:
            job_id = ingest_job_id(path) + (f":{uuid.uuid4().hex[:12]}" if fresh else "")
        job = await enqueue(redis, jobs.INGEST_TRANSCRIPT, path, job_id=job_id)
        queued.append(job or Job(job_id, redis, _queue_name=JOBS_QUEUE))
    return queued


async def wait_for(job: Job, timeout: float | None) -> Any:
    """A job's result. A user error it answered is raised again as its own class; a crash of
    the job as JobFailed with the job's own message."""
    try:
        result = await job.result(timeout=timeout, poll_delay=0.05)
    except TimeoutError:
        raise DaemonUnavailable(
            f"job {job.job_id} did not finish within {timeout:.0f}s; is a worker running?"
        ) from None
    except MemorydError:
        raise
    except Exception as exc:  # the job's own failure, already logged by the worker
        raise JobFailed(f"job {job.job_id} failed: {exc}") from None
    if isinstance(result, Failure):
        raise result.exception()
    return result


async def job_done(job: Job) -> bool:
    return await job.status() in (JobStatus.complete, JobStatus.not_found)


async def call(redis: ArqRedis, spec: JobSpec, *args: Any, timeout: float = 120.0) -> Any:
    """Run a job and wait for its answer (a query: search, status… on whichever process serves
    the database; or a maintenance task)."""
    job = await enqueue(
        redis, spec, *args, job_id=f"q:{spec.name}:{os.getpid()}:{uuid.uuid4().hex}"
    )
    assert job is not None  # fresh unique id: never refused
    return await wait_for(job, timeout)


async def release_orphaned_jobs(redis: ArqRedis) -> int:
    """Drop the in-progress marks of jobs whose worker is gone (and the maintenance locks
    they held), so they run again now rather than when the marks expire. Only safe when no
    worker is alive, which the caller checks. Returns the jobs freed."""
    jobs = [key async for key in redis.scan_iter(match=f"{in_progress_key_prefix}*")]
    locks = [key async for key in redis.scan_iter(match=f"{MAINTENANCE_LOCK_PREFIX}*")]
    if jobs or locks:
        await redis.delete(*jobs, *locks)
    return len(jobs)


async def oldest_job_age(redis: ArqRedis, queue: str = JOBS_QUEUE) -> float | None:
    """Seconds the oldest waiting job has waited (None when the queue is empty)."""
    oldest = await redis.zrange(queue, 0, 0, withscores=True)
    return max(0.0, time.time() - oldest[0][1] / 1000) if oldest else None


async def recent_outcomes(redis: ArqRedis, seconds: float = 3600) -> dict[str, int]:
    """Jobs that finished in the last `seconds`, by success (from the results arq keeps)."""
    since = datetime.now(UTC) - timedelta(seconds=seconds)
    counts = {"done": 0, "failed": 0}
    for result in await redis.all_job_results():
        if result.finish_time >= since:
            counts["done" if result.success else "failed"] += 1
    return counts


async def queue_depth(redis: ArqRedis, queue: str = JOBS_QUEUE) -> int:
    return int(await redis.zcard(queue))
