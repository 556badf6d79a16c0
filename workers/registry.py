"""arq worker definitions: which functions run on which queue, with what limits. This module is
the job table memoryd/daemon/runtime.py's JOB_TABLE names: the serving process loads it by that
name."""

from __future__ import annotations

import functools
import logging
from typing import Any, cast

from arq import Retry, Worker
from arq.connections import RedisSettings
from arq.cron import CronJob, cron
from arq.worker import Function, func

from memoryd import jobs, queue
from memoryd.channel import Answer
from memoryd.config import SCHEDULE_OFF, Settings, parse_schedule
from memoryd.daemon import metrics
from memoryd.daemon.metrics import JobFunction
from memoryd.errors import Failure, InvalidRequest, JobFailed, MemorydError
from memoryd.jobs import JOBS_QUEUE, QUERY_QUEUE, JobSpec
from workers import action_context, forget, maintenance, notes, privacy, queries, transfer
from workers import graph_views as codegraph_views
from workers.cochange import update_cochange
from workers.context import JobContext
from workers.counts import Counted
from workers.indexing import index_files
from workers.ingest import ingest_transcript
from workers.stages.reader import Reader
from workers.vectors import embed_chunks

log = logging.getLogger(__name__)


def portable_errors(function: JobFunction) -> JobFunction:
    """One error channel across the queue: a user error becomes a Failure value (an answer,
    not a crash for arq to log), anything else a JobFailed with the message as plain text
    (database and library errors do not survive pickling, and the waiting client needs it)."""

    @functools.wraps(function)
    async def run(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
        try:
            return await function(ctx, *args, **kwargs)
        except JobFailed:
            raise
        except MemorydError as exc:
            return Failure.of(exc)
        except Retry:
            raise
        except Exception as exc:
            if queue.server_lost(exc):
                # Redis is gone or refuses writes: the serving process says so in one line
                # (memoryd/daemon/runtime.py). Not a failure of the job, which stays queued to run
                # again.
                raise Retry(defer=1) from None
            log.exception("job %s failed", function.__name__)
            raise JobFailed(f"{type(exc).__name__}: {exc}") from None

    return run


def job(function: JobFunction, name: str) -> JobFunction:
    """A job as the worker runs it: metrics outermost (they count the outcome arq sees),
    then errors made portable."""
    return metrics.instrument(portable_errors(function), name)


# What runs each declared job (memoryd/jobs.py); tests/test_jobs.py checks none is missing.
FUNCTIONS: dict[JobSpec, JobFunction] = {
    jobs.INDEX_FILES: index_files,
    jobs.EMBED_CHUNKS: embed_chunks,
    jobs.INGEST_TRANSCRIPT: ingest_transcript,
    jobs.DECAY: maintenance.decay,
    jobs.PRUNE: maintenance.prune,
    jobs.REEMBED: maintenance.reembed,
    jobs.REINDEX: maintenance.reindex,
    jobs.COCHANGE: update_cochange,
    jobs.SEARCH: queries.search,
    jobs.STATUS: queries.status,
    jobs.REGISTER_PROJECT: queries.register_project,
    jobs.STORED_PATHS: queries.stored_paths,
    jobs.HISTORY: queries.history,
    jobs.RELATED: codegraph_views.related_job,
    jobs.IMPACT: codegraph_views.impact_job,
    jobs.SESSION: queries.session,
    jobs.PIN: queries.pin,
    jobs.IMPORT_ROWS: transfer.import_rows,
    jobs.FORGET_SCOPE: privacy.forget_scope,
    jobs.SKIP_TRANSCRIPTS: privacy.skip_transcripts,
    jobs.CHANGED_TRANSCRIPTS: privacy.changed_transcripts,
    jobs.EXPORT_TABLES: transfer.export_tables,
    jobs.EXPORT_PAGE: transfer.export_page,
    jobs.PROJECTS: queries.projects,
    jobs.GET: queries.get,
    jobs.TIMELINE: queries.timeline,
    jobs.RECENT_ACTIVITY: queries.recent_activity,
    jobs.REMEMBER: notes.remember,
    jobs.ANCHORS: queries.anchors,
    jobs.THEN_MODIFIED: queries.then_modified,
    jobs.FORGET: forget.forget,
    jobs.INDEX_PROGRESS: queries.index_progress,
    jobs.HOOK: queries.hook,
    jobs.INJECTIONS: queries.injections,
    jobs.DAILY_STATS: queries.daily_stats,
    jobs.FILE_CONTEXT: action_context.file_context,
    jobs.ERROR_CONTEXT: action_context.error_context,
}


def job_context(shared: dict[str, Any]) -> JobContext:
    """The context every job receives: what the serving process shares (the store, the model,
    the search indexes, the settings, Redis), a reader process, the status counts, and the
    query functions by name (for work that asks several: the hooks)."""
    ctx = cast(JobContext, {**shared, "reader": Reader(), "status_counts": Counted()})
    ctx["queries"] = query_answer(ctx)
    return ctx


async def close_context(ctx: JobContext) -> None:
    await ctx["reader"].close()


def query_answer(ctx: JobContext) -> Answer:
    """How the daemon answers the query channel (memoryd/channel.py): the query jobs, run as
    the query worker runs them, on the same context."""
    wrapped = {spec.name: job(fn, spec.name) for spec, fn in FUNCTIONS.items() if spec.is_query}

    async def answer(name: str, args: tuple[Any, ...]) -> Any:
        function = wrapped.get(name)
        if function is None:
            return Failure.of(InvalidRequest(f"no query {name!r}"))
        return await function(ctx, *args)

    return answer


def functions(queue: str) -> list[Function]:
    return [
        func(job(fn, spec.name), name=spec.name, max_tries=spec.max_tries)
        for spec, fn in FUNCTIONS.items()
        if spec.queue == queue
    ]


# Heavy jobs at once. Three: while one job writes, the others read their files (in the
# reader's process) and wait at the database; with two, a first index of kafka left a core idle
# (lexical index in 61.8 s, 53.1 s with three).
HEAVY_JOBS = 3
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
            job(maintenance.scheduled(FUNCTIONS[jobs.MAINTENANCE[task]]), f"cron:{task}"),
            name=f"cron:{task}",
            # arq's default for a cron job is one try: a run cut short by a stop or a Redis
            # restart ("cancelled, will be run again") then failed as "max retries exceeded".
            max_tries=jobs.MAINTENANCE[task].max_tries,
            unique=True,
            keep_result=CRON_RESULT_SECONDS,
            **parse_schedule(spec),  # type: ignore[arg-type]
        )
        for task, spec in schedule.items()
        if spec != SCHEDULE_OFF
    ]


def build_workers(
    ctx: JobContext, redis_settings: RedisSettings, settings: Settings, scheduled: bool = True
) -> list[Worker]:
    """The two in-process workers: heavy jobs, and interactive queries that must not wait."""
    common: dict[str, Any] = {
        "redis_settings": redis_settings,
        "ctx": ctx,
        "handle_signals": False,  # the daemon owns signals and shuts down in order
    }
    return [
        Worker(
            functions=functions(JOBS_QUEUE),  # type: ignore[arg-type]
            cron_jobs=cron_jobs(settings.maintenance_schedule) if scheduled else None,
            queue_name=JOBS_QUEUE,
            max_jobs=HEAVY_JOBS,
            job_timeout=settings.job_timeout_seconds,
            keep_result=3600,
            poll_delay=0.05,
            **common,
        ),
        Worker(
            functions=functions(QUERY_QUEUE),  # type: ignore[arg-type]
            queue_name=QUERY_QUEUE,
            max_jobs=4,
            job_timeout=120,
            keep_result=60,
            poll_delay=0.02,
            **common,
        ),
    ]
