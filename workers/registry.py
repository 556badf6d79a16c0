"""arq worker definitions: which functions run on which queue, with what limits."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from arq import Retry, Worker
from arq.connections import RedisSettings
from arq.cron import CronJob, cron
from arq.worker import func

from memoryd import metrics
from memoryd.config import SCHEDULE_OFF, Settings, parse_schedule
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


MAINTENANCE_TASKS = {
    "decay": maintenance.decay,
    "prune": maintenance.prune,
    "reembed": maintenance.reembed,
}
# Jobs are idempotent (deterministic ids, upserts), so a retry after a crash is safe.
JOB_FUNCTIONS = [
    func(job(fn), name=fn.__name__, max_tries=3)
    for fn in (index_files, ingest_transcript, *MAINTENANCE_TASKS.values())
]
# How long arq keeps the result of a scheduled run (by default it keeps none).
CRON_RESULT_SECONDS = 86400


def cron_jobs(schedule: dict[str, str]) -> list[CronJob]:
    """The scheduled upkeep. Every worker enqueues each run under the id arq derives from its
    slot (`cron:<task>:<unix ms>`); a second enqueue of an id is refused while the job or its
    result exists, so of the workers only one runs it. The result is kept for a day: with none
    kept (arq's default) a worker that comes to the slot late, after the run finished, enqueues
    it again, and it runs a second time once arq's 60 s in-progress mark of the first lapses.
    The tasks' own lock keeps runs of a task from overlapping."""
    return [
        cron(
            job(maintenance.scheduled(MAINTENANCE_TASKS[task]), f"cron:{task}"),
            name=f"cron:{task}",
            unique=True,
            keep_result=CRON_RESULT_SECONDS,
            **parse_schedule(spec),  # type: ignore[arg-type]
        )
        for task, spec in schedule.items()
        if spec != SCHEDULE_OFF
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
            cron_jobs=cron_jobs(settings.maintenance_schedule) if scheduled else None,
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
