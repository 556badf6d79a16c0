"""The arq side shared by every process: queue names, Redis connections, job ids, enqueueing."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import blake3
from arq import ArqRedis, create_pool
from arq.connections import RedisSettings
from arq.jobs import Job, JobStatus

from memoryd.errors import MemorydError

# Heavy work (indexing, ingestion) and interactive queries live on separate queues, so a
# search answers while a cold index is still running.
JOBS_QUEUE = "memoryd:jobs"
QUERY_QUEUE = "memoryd:queries"
# A process serving the queues refreshes its key; clients look for one before waiting on jobs.
WORKER_KEY_PREFIX = "memoryd:worker:"
WORKER_KEY_TTL = 10


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
        raise MemorydError(f"cannot reach Redis at {url}: {exc}") from None


async def live_workers(redis: ArqRedis) -> int:
    return len([key async for key in redis.scan_iter(match=f"{WORKER_KEY_PREFIX}*")])


def _stat_signature(root: Path, rel: str) -> str:
    """size and mtime identify a file version cheaply; a missing file gets a unique token so a
    delete after a re-create is never taken for a job already done."""
    try:
        info = (root / rel).stat()
    except OSError:
        return f"gone:{uuid.uuid4().hex}"
    return f"{info.st_size}:{info.st_mtime_ns}"


def index_job_id(project_id: str, root: Path, paths: Sequence[str]) -> str:
    """The id carries each file's version: a later change is a new job, never a refused duplicate;
    the same unchanged batch asked for twice is one job."""
    hasher = blake3.blake3(project_id.encode())
    for rel in sorted(paths):
        hasher.update(f"\x1f{rel}\x1e{_stat_signature(root, rel)}".encode("utf-8", "surrogatepass"))
    return f"index:{project_id}:{hasher.hexdigest()[:32]}"


async def enqueue_index(
    redis: ArqRedis,
    project_id: str,
    root: Path,
    paths: Sequence[str],
    batch: int,
    fresh: bool = False,
) -> list[tuple[Job, int]]:
    """Enqueue `index_files` jobs of up to `batch` files; returns each job with its file count.
    `fresh` (an explicit sync) always runs, so its report describes this run, not a kept one."""
    jobs = []
    for start in range(0, len(paths), batch):
        part = list(paths[start : start + batch])
        job_id = index_job_id(project_id, root, part)
        if fresh:
            job_id += f":{uuid.uuid4().hex[:12]}"
        job = await redis.enqueue_job(
            "index_files", project_id, str(root), part, _job_id=job_id, _queue_name=JOBS_QUEUE
        )
        # None: the same job is queued or its result is kept; wait on that one instead.
        jobs.append((job or Job(job_id, redis, _queue_name=JOBS_QUEUE), len(part)))
    return jobs


async def wait_for(job: Job, timeout: float | None) -> Any:
    """A job's result; its exception is re-raised with the job's own message."""
    try:
        return await job.result(timeout=timeout, poll_delay=0.05)
    except TimeoutError:
        raise MemorydError(
            f"job {job.job_id} did not finish within {timeout:.0f}s; is a worker running?"
        ) from None


async def job_done(job: Job) -> bool:
    return await job.status() in (JobStatus.complete, JobStatus.not_found)


async def call(redis: ArqRedis, function: str, *args: Any, timeout: float = 120.0) -> Any:
    """Run a query job (search, status…) on whichever process serves the database."""
    job = await redis.enqueue_job(
        function,
        *args,
        _job_id=f"q:{function}:{os.getpid()}:{uuid.uuid4().hex}",
        _queue_name=QUERY_QUEUE,
    )
    assert job is not None  # fresh unique id: never refused
    return await wait_for(job, timeout)


async def queue_depth(redis: ArqRedis, queue: str = JOBS_QUEUE) -> int:
    return int(await redis.zcard(queue))
