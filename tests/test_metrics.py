"""Prometheus metrics: real jobs through a real arq worker on the in-process stack (private
Redis, embedded SurrealDB, the model), then a scrape of the endpoint over HTTP."""

from __future__ import annotations

import asyncio
import shutil
import urllib.request
from pathlib import Path

import pytest
from arq import Retry, Worker
from arq.worker import func

# Until pyproject.toml lists prometheus-client, a fresh install skips here instead of failing
# to collect.
pytest.importorskip("prometheus_client", reason="prometheus-client is not installed")

from prometheus_client.parser import text_string_to_metric_families

from memoryd import jobs, projects, queue
from memoryd.daemon import metrics
from memoryd.daemon.runtime import Runtime
from memoryd.errors import Failure, MemorydError
from memoryd.version import version
from tests.conftest import git_init
from tests.fixtures import SMALL
from workers import queries, registry
from workers.indexing import index_files
from workers.ingest import ingest_transcript

TEST_QUEUE = "memoryd:metrics-test"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def instrumented_worker(rt: Runtime) -> Worker:
    """A worker like the daemon's, on a queue of its own, with every job instrumented."""
    functions = [
        func(registry.job(fn, fn.__name__), name=fn.__name__, max_tries=1)
        for fn in (index_files, ingest_transcript, queries.session)
    ]
    return Worker(
        functions=functions,  # type: ignore[arg-type]
        queue_name=TEST_QUEUE,
        redis_settings=queue.redis_settings(rt.settings.queue_url),
        ctx={
            "store": rt.store,
            "embedder": rt.embedder,
            "settings": rt.settings,
            "search": rt.search,
        },
        burst=True,  # run what is queued, then return
        handle_signals=False,
        poll_delay=0.05,
        keep_result=60,
    )


async def test_job_queue_embedding_and_lag_metrics_after_real_jobs(
    stack: Runtime, tmp_path: Path
) -> None:
    rt = stack
    assert rt.redis is not None and rt.store is not None and rt.embedder is not None
    metrics.instrument_embedder(rt.embedder)

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "retry.py").write_text(
        "def backoff(attempt: int) -> float:\n    return min(60.0, 0.5 * 2**attempt)\n"
    )
    (repo / "queue.py").write_text(
        "class Queue:\n    def __init__(self):\n        self.items = []\n\n"
        "    def push(self, item):\n        self.items.append(item)\n"
    )
    git_init(repo)
    project = projects.resolve(repo)
    await projects.register(rt.redis, project)
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    transcript = transcripts / SMALL.name
    shutil.copyfile(SMALL, transcript)
    size = transcript.stat().st_size

    endpoint = metrics.serve_http(0, "127.0.0.1")
    try:
        assert endpoint.host == "127.0.0.1" and endpoint.port > 0
        sampler = metrics.Sampler(rt.redis, rt.store, [transcripts], queues=[TEST_QUEUE])
        before = scrape(endpoint.url)

        index_job = await rt.redis.enqueue_job(
            "index_files", project.id, str(project.root), ["queue.py", "retry.py"],
            _queue_name=TEST_QUEUE,
        )  # fmt: skip
        await rt.redis.enqueue_job("ingest_transcript", str(transcript), _queue_name=TEST_QUEUE)
        # A real failure: a job given no path raises (a directory is skipped with a note now).
        await rt.redis.enqueue_job("ingest_transcript", None, _queue_name=TEST_QUEUE)
        # A user error answered as data: ran fine, did not do what was asked.
        await rt.redis.enqueue_job("session", "no-such-session", _queue_name=TEST_QUEUE)

        await sampler.sample_once()
        queued = scrape(endpoint.url)
        assert value(queued, "memoryd_queue_depth", queue=TEST_QUEUE) == 4
        assert value(queued, "memoryd_queue_oldest_job_age_seconds", queue=TEST_QUEUE) >= 0
        assert value(queued, "memoryd_ingest_lag_bytes", source=str(transcripts)) == size
        assert value(queued, "memoryd_ingest_lag_files", source=str(transcripts)) == 1

        worker = instrumented_worker(rt)
        try:
            await asyncio.wait_for(worker.async_run(), 120)
        finally:
            await worker.close()
        assert index_job is not None
        report = await queue.wait_for(index_job, 10)
        assert report["indexed"] == 2 and report["owed"] == report["chunks"] > 0
        # The chunks' vectors come from the embed job it queued (the daemon's queue runs it).
        embedded = await queue.embedded_later(rt.redis, report, 120)
        assert embedded > 0

        await sampler.sample_once()
        after = scrape(endpoint.url)
    finally:
        await endpoint.close()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("memoryd_jobs_total", job="index_files", outcome="ok") == 1
    assert delta("memoryd_jobs_total", job="ingest_transcript", outcome="ok") == 1
    assert delta("memoryd_jobs_total", job="ingest_transcript", outcome="error") == 1
    assert delta("memoryd_jobs_total", job="session", outcome="rejected") == 1
    assert delta("memoryd_job_duration_seconds_count", job="index_files") == 1
    assert delta("memoryd_job_duration_seconds_count", job="ingest_transcript") == 2
    assert delta("memoryd_job_duration_seconds_sum", job="index_files") > 0
    assert delta("memoryd_job_queue_wait_seconds_count", job="index_files") == 1
    assert value(after, "memoryd_jobs_in_progress", job="index_files") == 0
    # The model embedded at least the index job's chunks, and the transcript's texts.
    assert delta("memoryd_embedded_texts_total") > embedded
    assert delta("memoryd_embed_seconds_total") > 0
    assert value(after, "memoryd_embed_texts_per_second") > 0
    assert value(after, "memoryd_info", version=version(), model=rt.embedder.model) == 1
    assert value(after, "memoryd_queue_depth", queue=TEST_QUEUE) == 0
    assert value(after, "memoryd_ingest_lag_bytes", source=str(transcripts)) == 0
    assert value(after, "memoryd_ingest_lag_files", source=str(transcripts)) == 0
    assert value(after, "process_resident_memory_bytes") > 0


async def test_start_runs_the_sampler_and_stops_cleanly(stack: Runtime) -> None:
    assert await metrics.start(None) is None  # off by default: no port, no endpoint
    endpoint = await metrics.start(0, redis=stack.redis, interval=0.05)
    assert endpoint is not None
    try:
        metrics.QUEUE_DEPTH.labels(jobs.JOBS_QUEUE).set(-1)
        for _ in range(100):  # the sampler task refreshes it within a few intervals
            samples = scrape(endpoint.url)
            if value(samples, "memoryd_queue_depth", queue=jobs.JOBS_QUEUE) >= 0:
                break
            await asyncio.sleep(0.05)
        assert value(samples, "memoryd_queue_depth", queue=jobs.JOBS_QUEUE) >= 0
        assert ("memoryd_queue_depth", frozenset({("queue", jobs.QUERY_QUEUE)})) in samples
        with pytest.raises(MemorydError, match=r"cannot serve metrics on 127\.0\.0\.1"):
            metrics.serve_http(endpoint.port)  # taken: a clear error, not a traceback
    finally:
        await endpoint.close()
    assert endpoint.sampler_task is None
    with pytest.raises(OSError):
        urllib.request.urlopen(endpoint.url, timeout=2)


def test_outcomes_and_ages() -> None:
    assert metrics.outcome_of(None, {"results": []}) == "ok"
    assert metrics.outcome_of(None, Failure("NotFound", "no such session")) == "rejected"
    assert metrics.outcome_of(Retry(defer=1)) == "retry"
    assert metrics.outcome_of(asyncio.CancelledError()) == "cancelled"
    assert metrics.outcome_of(ValueError("x")) == "error"
    assert metrics.oldest_age_seconds(None, 10_000) == 0
    assert metrics.oldest_age_seconds(4_000, 10_000) == 6
    assert metrics.oldest_age_seconds(20_000, 10_000) == 0  # deferred into the future


def test_ingest_lag_per_file() -> None:
    assert metrics.file_lag(100, 7, None, compressed=False) == 100
    assert metrics.file_lag(100, 7, {"offset": 60, "inode": 7}, compressed=False) == 40
    assert metrics.file_lag(100, 8, {"offset": 60, "inode": 7}, compressed=False) == 100
    assert metrics.file_lag(50, 7, {"offset": 60, "inode": 7}, compressed=False) == 50
    assert metrics.file_lag(100, 7, {"offset": 900, "size": 100}, compressed=True) == 0
    assert metrics.file_lag(120, 7, {"offset": 900, "size": 100}, compressed=True) == 120


def test_loopback_hosts() -> None:
    assert metrics.is_loopback("127.0.0.1") and metrics.is_loopback("::1")
    assert metrics.is_loopback("localhost") and metrics.is_loopback("[::1]")
    assert not metrics.is_loopback("0.0.0.0") and not metrics.is_loopback("10.0.0.5")
