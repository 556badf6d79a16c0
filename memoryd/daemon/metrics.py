"""Prometheus metrics: off by default; when enabled, one HTTP endpoint on loopback.

What is measured, and where the numbers come from:
- jobs by name and outcome, their duration and time spent queued: `instrument()` wraps a job
  function (arq's own hooks see neither the function name nor the outcome);
- embedding throughput: `instrument_embedder()` times each call of the loaded model;
- queue depth, age of the oldest job, ingest lag: a `Sampler` task reads Redis and the
  transcript cursors every few seconds, so a scrape never waits on either;
- MCP tool calls and hooks by name and outcome, and their latency: recorded into Redis by
  those processes (memoryd/daemon/agent_metrics.py) and read by the same `Sampler`.

Counting is always on (an increment costs nanoseconds); only the endpoint is opt-in. All series
live in this module's own registry, so nothing a library registers globally leaks into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from wsgiref.simple_server import WSGIServer

from arq import Retry
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from memoryd.daemon import agent_metrics
from memoryd.errors import Failure
from memoryd.jobs import JOBS_QUEUE, QUERY_QUEUE
from memoryd.version import version

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # memory, CPU, open files of this process

# Queries take milliseconds; an index job over a cold tree can take many minutes.
_DURATION_BUCKETS = (0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600, 1800)

JOBS = Counter(
    "memoryd_jobs",
    "Jobs that ended, by job function and outcome (ok, rejected, error, retry, cancelled).",
    ["job", "outcome"],
    registry=REGISTRY,
)
JOB_DURATION = Histogram(
    "memoryd_job_duration_seconds",
    "Time a job ran, by job function.",
    ["job"],
    buckets=_DURATION_BUCKETS,
    registry=REGISTRY,
)
JOB_WAIT = Histogram(
    "memoryd_job_queue_wait_seconds",
    "Time from enqueueing to the start of a job's run, by job function.",
    ["job"],
    buckets=_DURATION_BUCKETS,
    registry=REGISTRY,
)
JOBS_RUNNING = Gauge(
    "memoryd_jobs_in_progress",
    "Jobs running now in this process, by job function.",
    ["job"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "memoryd_queue_depth",
    "Jobs in a queue, waiting or running (arq keeps a job in its queue until it ends).",
    ["queue"],
    registry=REGISTRY,
)
QUEUE_OLDEST = Gauge(
    "memoryd_queue_oldest_job_age_seconds",
    "How long the oldest job of a queue has been due (0 for an empty queue).",
    ["queue"],
    registry=REGISTRY,
)
INGEST_LAG = Gauge(
    "memoryd_ingest_lag_bytes",
    "Transcript bytes on disk not ingested yet, by transcript folder.",
    ["source"],
    registry=REGISTRY,
)
INGEST_LAG_FILES = Gauge(
    "memoryd_ingest_lag_files",
    "Transcript files with bytes not ingested yet, by transcript folder.",
    ["source"],
    registry=REGISTRY,
)
EMBEDDED_TEXTS = Counter(
    "memoryd_embedded_texts", "Texts embedded by the model.", registry=REGISTRY
)
EMBED_SECONDS = Counter(
    "memoryd_embed_seconds", "Time spent in the model computing embeddings.", registry=REGISTRY
)
EMBED_RATE = Gauge(
    "memoryd_embed_texts_per_second",
    "Throughput of the most recent embedding call (rate(texts)/rate(seconds) for a window).",
    registry=REGISTRY,
)
SAMPLE_ERRORS = Counter(
    "memoryd_metrics_sample_errors",
    "Failed attempts to sample queue depth or ingest lag.",
    registry=REGISTRY,
)
BUILD = Info("memoryd", "memoryd version and the embedding model in use.", registry=REGISTRY)


# -- jobs -------------------------------------------------------------------------------------


def outcome_of(error: BaseException | None, result: Any = None) -> str:
    """How a job ended, as a label. A job that answers a user error (a Failure) ran fine but
    did not do what was asked: "rejected", kept apart from crashes."""
    if error is None:
        return "rejected" if isinstance(result, Failure) else "ok"
    if isinstance(error, Retry):
        return "retry"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"  # shutdown or arq's job timeout: arq runs the job again
    return "error"


def queue_wait_seconds(enqueue_time: datetime | None, now: datetime) -> float | None:
    """Seconds between enqueueing and the start of this run (None when unknown)."""
    if enqueue_time is None:
        return None
    if enqueue_time.tzinfo is None:
        enqueue_time = enqueue_time.replace(tzinfo=UTC)
    return max(0.0, (now - enqueue_time).total_seconds())


JobFunction = Callable[..., Awaitable[Any]]


def instrument(function: JobFunction, name: str | None = None) -> JobFunction:
    """Wrap an arq job function: count it by outcome, time it, record its queue wait.
    Wrap outermost (`instrument(portable_errors(fn))`) so the outcome is what arq sees."""
    job = name or function.__name__

    @functools.wraps(function)
    async def run(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        # A retry is a new run with its own wait; count only the first try's queue wait, so
        # arq's retry back-off does not read as a slow queue.
        if ctx.get("job_try", 1) == 1:
            wait = queue_wait_seconds(ctx.get("enqueue_time"), datetime.now(UTC))
            if wait is not None:
                JOB_WAIT.labels(job).observe(wait)
        running = JOBS_RUNNING.labels(job)
        running.inc()
        started = time.perf_counter()
        error: BaseException | None = None
        result: Any = None
        try:
            result = await function(ctx, *args, **kwargs)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            running.dec()
            JOB_DURATION.labels(job).observe(time.perf_counter() - started)
            JOBS.labels(job, outcome_of(error, result)).inc()

    return run


# -- embeddings --------------------------------------------------------------------------------


class _Embedder(Protocol):
    model: str

    def embed(
        self, texts: Sequence[str], cancelled: threading.Event | None = None
    ) -> list[list[float]]: ...


def observe_embed(count: int, seconds: float) -> None:
    if count <= 0:
        return
    EMBEDDED_TEXTS.inc(count)
    EMBED_SECONDS.inc(seconds)
    if seconds > 0:
        EMBED_RATE.set(count / seconds)


def instrument_embedder(embedder: _Embedder) -> _Embedder:
    """Time every `embed` call of this loaded model (idempotent), and name it as the model
    served (also when a model already timed is served again, as the tests share one)."""
    BUILD.info({"version": version(), "model": embedder.model})
    if getattr(embedder.embed, "_memoryd_timed", False):
        return embedder
    plain = embedder.embed

    @functools.wraps(plain)
    def embed(texts: Sequence[str], cancelled: threading.Event | None = None) -> list[list[float]]:
        started = time.perf_counter()
        vectors = plain(texts, cancelled)
        observe_embed(len(vectors), time.perf_counter() - started)
        return vectors

    embed._memoryd_timed = True  # type: ignore[attr-defined]
    embedder.embed = embed  # type: ignore[method-assign]
    return embedder


# -- sampled gauges ----------------------------------------------------------------------------


def oldest_age_seconds(score_ms: float | None, now_ms: float) -> float:
    """Age of a queue's first job from its arq score (the time it is due, in ms). A job
    deferred into the future is not late: 0."""
    if score_ms is None:
        return 0.0
    return max(0.0, (now_ms - score_ms) / 1000)


def file_lag(size: int, inode: int, cursor: dict[str, Any] | None, compressed: bool) -> int:
    """Bytes of one transcript not ingested yet, by the rules the ingest job reads by: a new
    or replaced file is read from the start; an archive (offsets count decompressed bytes) is
    read whole once, so it is done exactly when its size is the one recorded."""
    if cursor is None:
        return size
    if compressed:
        return 0 if cursor.get("size") == size else size
    offset = int(cursor.get("offset") or 0)
    if cursor.get("inode") not in (None, inode) or offset > size:
        return size
    return size - offset


def _stat_transcripts(root: Path) -> list[tuple[str, int, int]]:
    # Imported here: metrics must not pull in watchdog for processes that only count jobs.
    from memoryd.watch.transcripts import transcript_files

    found = []
    for path in transcript_files([root]) if root.exists() else []:
        with contextlib.suppress(OSError):  # rotated away between listing and stat
            info = os.stat(path)
            found.append((path, info.st_size, info.st_ino))
    return found


class _Cursors(Protocol):
    async def transcript_cursor(self, path: str) -> dict[str, Any] | None: ...


async def ingest_lag(store: _Cursors, roots: Iterable[Path]) -> dict[str, tuple[int, int]]:
    """For each transcript folder: (bytes not ingested, files with bytes not ingested)."""
    lag: dict[str, tuple[int, int]] = {}
    for root in roots:
        total = files = 0
        for path, size, inode in await asyncio.to_thread(_stat_transcripts, root):
            behind = file_lag(
                size, inode, await store.transcript_cursor(path), path.endswith(".zst")
            )
            total += behind
            files += behind > 0
        lag[str(root)] = (total, files)
    return lag


class _AgentCalls:
    """The agent layer's calls (MCP, hooks), as the Sampler last read them from Redis."""

    def __init__(self) -> None:
        self.stats: list[agent_metrics.CallStats] = []

    def collect(self) -> Iterable[Metric]:
        calls = CounterMetricFamily(
            "memoryd_agent_calls",
            "MCP tool calls and hook runs that ended, by surface (mcp, hook), call and outcome.",
            labels=["surface", "call", "outcome"],
        )
        latency = HistogramMetricFamily(
            "memoryd_agent_call_seconds",
            "How long MCP tool calls and hook runs took, by surface and call.",
            labels=["surface", "call"],
        )
        for s in self.stats:
            calls.add_metric([s.surface, s.name, "ok"], s.ok)
            calls.add_metric([s.surface, s.name, "error"], s.error)
            buckets = [(str(b), n) for b, n in zip(agent_metrics.BUCKETS, s.buckets, strict=True)]
            latency.add_metric([s.surface, s.name], [*buckets, ("+Inf", s.count)], s.seconds)
        yield calls
        yield latency


AGENT_CALLS = _AgentCalls()
REGISTRY.register(AGENT_CALLS)  # type: ignore[arg-type]


class Sampler:
    """Refreshes the gauges that need Redis or the database, off the scrape path."""

    def __init__(
        self,
        redis: Any,
        store: _Cursors | None = None,
        transcript_roots: Iterable[Path] = (),
        queues: Sequence[str] = (JOBS_QUEUE, QUERY_QUEUE),
    ) -> None:
        self.redis = redis
        self.store = store
        self.roots = list(transcript_roots)
        self.queues = list(queues)
        self._last_error = ""

    async def sample_queues(self) -> None:
        now_ms = time.time() * 1000
        for name in self.queues:
            QUEUE_DEPTH.labels(name).set(await self.redis.zcard(name))
            first = await self.redis.zrange(name, 0, 0, withscores=True)
            QUEUE_OLDEST.labels(name).set(
                oldest_age_seconds(first[0][1] if first else None, now_ms)
            )

    async def sample_lag(self) -> None:
        if self.store is None:
            return  # a watcher alone has no database; the worker side reports lag
        for source, (behind, files) in (await ingest_lag(self.store, self.roots)).items():
            INGEST_LAG.labels(source).set(behind)
            INGEST_LAG_FILES.labels(source).set(files)

    async def sample_once(self) -> None:
        await self.sample_queues()
        await self.sample_lag()
        AGENT_CALLS.stats = await agent_metrics.read(self.redis)

    async def run(self, interval: float = 15.0) -> None:
        """Sample until cancelled. Failures are counted and logged once per distinct cause, so a
        Redis restart does not flood the log every few seconds."""
        while True:
            try:
                await self.sample_once()
                self._last_error = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                SAMPLE_ERRORS.inc()
                cause = f"{type(exc).__name__}: {exc}"
                if cause != self._last_error:
                    log.warning("metrics sampling failed: %s", cause)
                    self._last_error = cause
            await asyncio.sleep(interval)


# -- the endpoint ------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Endpoint:
    """A running metrics endpoint and its sampler; `close()` stops both."""

    server: WSGIServer
    thread: threading.Thread
    sampler_task: asyncio.Task[None] | None = field(default=None)

    @property
    def host(self) -> str:
        return str(self.server.server_address[0])

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def close(self) -> None:
        if self.sampler_task is not None:
            self.sampler_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sampler_task
            self.sampler_task = None
        await asyncio.to_thread(self.server.shutdown)
        self.server.server_close()
        self.thread.join(5)


def serve_http(port: int, host: str = "127.0.0.1") -> Endpoint:
    """Serve /metrics on host:port (port 0: any free port; read it back from `.port`)."""
    if not is_loopback(host):
        # Allowed (a container must listen beyond its own loopback to be scraped), but the
        # metrics name paths and projects: say that they are now reachable from elsewhere.
        log.warning("metrics endpoint listens on %s: reachable from other machines", host)
    try:
        server, thread = start_http_server(port, addr=host, registry=REGISTRY)
    except OSError as exc:
        from memoryd.errors import MemorydError

        raise MemorydError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); "
            "choose another metrics_port"
        ) from None
    return Endpoint(server, thread)


async def start(
    port: int | None,
    host: str = "127.0.0.1",
    redis: Any = None,
    store: _Cursors | None = None,
    transcript_roots: Iterable[Path] = (),
    interval: float = 15.0,
) -> Endpoint | None:
    """Start the endpoint and its sampler when `port` is set (None: metrics off)."""
    if port is None:
        return None
    endpoint = serve_http(port, host)
    if redis is not None:
        sampler = Sampler(redis, store, transcript_roots)
        endpoint.sampler_task = asyncio.create_task(sampler.run(interval))
    log.info("metrics on %s", endpoint.url)
    return endpoint
