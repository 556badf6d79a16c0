"""arq worker definitions: which functions run on which queue, with what limits."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from arq import Retry, Worker
from arq.connections import RedisSettings
from arq.cron import cron
from arq.worker import func

from memoryd import metrics
from memoryd.config import Settings
from memoryd.errors import MemorydError
from memoryd.queue import JOBS_QUEUE, QUERY_QUEUE
from workers import maintenance, queries
from workers.indexing import index_files
from workers.ingest import ingest_transcript

log = logging.getLogger(__name__)


class JobError(Exception):
    """A job's failure as plain text: database and library errors do not survive pickling,
    and the client waiting on the job needs the message."""


def portable_errors(function: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(function)
    async def run(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await function(ctx, *args, **kwargs)
        except (MemorydError, JobError, Retry):
            raise
        except Exception as exc:
            log.exception("job %s failed", function.__name__)
            raise JobError(f"{type(exc).__name__}: {exc}") from None

    return run


def job(function: Callable[..., Awaitable[Any]], name: str | None = None) -> Any:
    """A job as the worker runs it: metrics outermost (they count the outcome arq sees),
    then errors made portable."""
    return metrics.instrument(portable_errors(function), name)


# Jobs are idempotent (deterministic ids, upserts), so a retry after a crash is safe.
JOB_FUNCTIONS = [
    func(job(fn), name=fn.__name__, max_tries=3)
    for fn in (
        index_files,
        ingest_transcript,
        maintenance.decay,
        maintenance.prune,
        maintenance.reembed,
    )
]
# Scheduled upkeep; arq gives each run a unique job id, so one worker runs it, not all.
CRON_JOBS = [
    cron(job(maintenance.decay, "cron:decay"), name="cron:decay", minute={17}, unique=True),
    cron(
        job(maintenance.prune, "cron:prune"), name="cron:prune", hour={3}, minute={41}, unique=True
    ),
    cron(
        job(maintenance.reembed, "cron:reembed"),
        name="cron:reembed",
        minute=set(range(0, 60, 5)),
        unique=True,
    ),
]
QUERY_FUNCTIONS = [
    func(job(fn), name=fn.__name__, max_tries=1)
    for fn in (
        queries.search,
        queries.status,
        queries.register_project,
        queries.stored_paths,
        queries.history,
        queries.session,
        queries.pin,
    )
]


def build_workers(
    ctx: dict[str, Any], redis_settings: RedisSettings, settings: Settings, scheduled: bool = True
) -> list[Worker]:
    """The two in-process workers: heavy jobs, and interactive queries that must not wait."""
    common: dict[str, Any] = {
        "redis_settings": redis_settings,
        "ctx": ctx,
        "handle_signals": False,  # the daemon owns signals and shuts down in order
    }
    return [
        Worker(
            functions=JOB_FUNCTIONS,  # type: ignore[arg-type]
            cron_jobs=CRON_JOBS if scheduled else None,
            queue_name=JOBS_QUEUE,
            max_jobs=2,
            job_timeout=settings.job_timeout_seconds,
            keep_result=3600,
            poll_delay=0.05,
            **common,
        ),
        Worker(
            functions=QUERY_FUNCTIONS,  # type: ignore[arg-type]
            queue_name=QUERY_QUEUE,
            max_jobs=4,
            job_timeout=120,
            keep_result=60,
            poll_delay=0.02,
            **common,
        ),
    ]
