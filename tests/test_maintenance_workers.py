"""Maintenance across workers: schedules from config, one run per scheduled slot however many
workers schedule it, runs of a task never overlapping, and a run killed half-way."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from arq import ArqRedis
from arq.jobs import Job, JobStatus

from memoryd import jobs, queue
from memoryd.config import DEFAULT_SCHEDULE, Settings, load_settings, parse_schedule
from memoryd.daemon.runtime import Runtime
from memoryd.embedded import EmbeddedRedis
from memoryd.embedding import Embedder
from memoryd.errors import MemorydError
from memoryd.searchindex.index import STAMP
from memoryd.searchindex.indexsync import SEARCH_DIR
from memoryd.store import Store
from tests.conftest import (
    DECAY_REGISTERED,
    MEMORYD,
    SCHEDULE_VARIABLE,
    env_without,
    settings_for,
    wait_for_workers,
)
from workers.registry import cron_jobs


def test_cron_expressions_become_arq_schedules() -> None:
    assert parse_schedule("17 * * * *") == {
        "second": {0},
        "minute": {17},
        "hour": None,
        "day": None,
        "month": None,
        "weekday": None,
    }
    assert parse_schedule("*/20 3-5 1,15 * 1-5") == {
        "second": {0},
        "minute": {0, 20, 40},
        "hour": {3, 4, 5},
        "day": {1, 15},
        "month": None,
        "weekday": {0, 1, 2, 3, 4},  # arq counts from Monday = 0
    }
    assert parse_schedule("0 0 * * 0,7")["weekday"] == {6}  # Sunday, either way
    assert parse_schedule("*/20 * * * * *")["second"] == {0, 20, 40}
    for bad, needle in (
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "Value 60 out of range for 'minute'"),
        ("*/0 * * * *", "Invalid interval step value '0' for 'minute'"),
        ("5-1 * * * *", "Max range is less than min range in '5-1' for 'minute'"),
        ("x * * * *", "Invalid value 'x'"),
        ("*/2 25 * * *", "Value 25 out of range for 'hour'"),
    ):
        with pytest.raises(ValueError, match=needle):
            parse_schedule(bad)


def test_schedule_config_keeps_defaults_and_refuses_nonsense(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORYD_MAINTENANCE_SCHEDULE", '{"reembed": "*/10 * * * *"}')
    assert load_settings().maintenance_schedule == {
        **DEFAULT_SCHEDULE,
        "reembed": "*/10 * * * *",
    }
    monkeypatch.setenv("MEMORYD_MAINTENANCE_SCHEDULE", '{"vacuum": "off"}')
    with pytest.raises(MemorydError, match="unknown task vacuum; the tasks are decay, prune"):
        load_settings()
    monkeypatch.setenv("MEMORYD_MAINTENANCE_SCHEDULE", '{"prune": "every night"}')
    with pytest.raises(MemorydError, match="'every night': expected 5 fields"):
        load_settings()


def test_the_daemons_of_a_test_schedule_no_upkeep_unless_it_asks(data_dir: Path) -> None:
    """A scheduled decay or reembed whose slot fell inside a test changed what it compared
    (tests/conftest.py, QUIET_SCHEDULE): the settings a test's daemons read, in this process
    or from `env_without` in another, schedule nothing; DECAY_REGISTERED only decay."""
    assert cron_jobs(settings_for(data_dir).maintenance_schedule) == []
    assert cron_jobs(json.loads(env_without()[SCHEDULE_VARIABLE])) == []
    assert [job.name for job in cron_jobs(DECAY_REGISTERED)] == ["cron:decay"]


@pytest.mark.e2e
async def test_two_worker_processes_run_each_scheduled_slot_once(tmp_path: Path) -> None:
    """Both workers schedule decay every 2 seconds on one Redis. Each writes to its own
    embedded database (no SurrealDB server can be had here), so each run is recorded where it
    ran: every slot must be there exactly once, in one of the two."""
    server = EmbeddedRedis(tmp_path / "r")
    server.start()
    schedule = {"decay": "*/2 * * * * *", "prune": "off", "reembed": "off"}
    env = {**os.environ, "MEMORYD_MAINTENANCE_SCHEDULE": json.dumps(schedule)}
    names = ("w1", "w2")
    workers = [
        subprocess.Popen(
            [MEMORYD, "worker", "--data-dir", str(tmp_path / n), "--redis-url", server.url],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in names
    ]
    try:
        redis = await queue.connect(server.url)
        try:
            deadline = await wait_for_workers(redis, 2, 180)
            finished: set[str] = set()
            while len(finished) < 5:
                assert time.monotonic() < deadline, f"only {sorted(finished)} ran"
                await asyncio.sleep(0.5)
                finished = {
                    r.job_id
                    for r in await redis.all_job_results()
                    if r.job_id.startswith("cron:decay:")
                }
            # A worker that comes to a slot late (after its run) enqueues it as arq's own
            # scheduler does: refused, the slot's result is still there.
            for slot in sorted(finished):
                again = await redis.enqueue_job(
                    "cron:decay", _job_id=slot, _queue_name=jobs.JOBS_QUEUE
                )
                assert again is None, slot
        finally:
            await redis.aclose()
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
        server.stop()
    runs = []
    for name in names:
        store = await Store.open(f"surrealkv://{tmp_path / name / 'db'}", "memoryd", "memory")
        try:
            runs += await store.maintenance_runs("decay")
        finally:
            await store.close()
    slots = [run["job_id"] for run in runs]
    assert len(slots) == len(set(slots)), "a slot ran twice"
    assert finished <= set(slots)
    assert all(slot.startswith("cron:decay:") for slot in slots)
    # One run at a time: each starts after the one before it ended, whichever worker ran it.
    runs.sort(key=lambda r: r["started_at"])
    for before, after in itertools.pairwise(runs):
        assert after["started_at"] >= before["finished_at"]


async def test_a_run_finding_the_task_running_is_skipped_when_scheduled_and_waits_when_asked(
    data_dir: Path, embedder: Embedder
) -> None:
    rt = Runtime(settings_for(data_dir, maintenance_schedule=DECAY_REGISTERED), embedder)
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve()
        assert rt.redis is not None and rt.store is not None
        # A decay run in progress elsewhere holds the task's lock.
        held = rt.redis.lock(queue.MAINTENANCE_LOCK_PREFIX + "decay", timeout=60)
        assert await held.acquire(blocking=False)
        scheduled = await rt.redis.enqueue_job("cron:decay", _queue_name=jobs.JOBS_QUEUE)
        asked = await rt.redis.enqueue_job("decay", _queue_name=jobs.JOBS_QUEUE)
        assert scheduled is not None and asked is not None
        assert await queue.wait_for(scheduled, 60) == {
            "skipped": "another decay run was still going"
        }
        deadline = time.monotonic() + 60
        while await asked.status() != JobStatus.in_progress:
            assert time.monotonic() < deadline, "the asked-for run never started"
            await asyncio.sleep(0.05)
        assert not await queue.job_done(asked)  # waiting for the lock, not done
        assert await rt.store.maintenance_runs("decay") == []
        await held.release()
        assert (await queue.wait_for(asked, 60))["memories"] == 0
        [run] = await rt.store.maintenance_runs("decay")
        assert run["job_id"] == asked.job_id
    finally:
        await rt.close()


def _vectors(dump: dict[str, list[dict]]) -> dict[tuple[str, str], tuple[str | None, Any]]:
    """(table, key) -> (model, vector) of every row of the vector tables (stored packed)."""
    from memoryd.store import VECTOR_TABLES
    from memoryd.store.base import unpack_vector

    return {
        (table, str(row["id"].id)): (
            row.get("embedding_model"),
            unpack_vector(row.get("embedding")),
        )
        for table in VECTOR_TABLES
        for row in dump.get(table, [])
    }


async def _dump(data_dir: Path) -> dict[str, list[dict]]:
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        return await store.dump()
    finally:
        await store.close()


async def _kill_half_way(
    data_dir: Path,
    env: dict[str, str],
    enqueue: Callable[[ArqRedis], Awaitable[Job | None]],
    left: Callable[[dict], int],
    total: int,
) -> str:
    """Start the daemon (`memoryd run`) with `left(status) == total`, enqueue its job, SIGKILL
    it once its first batch is committed. Returns the job id. The daemon's private Redis
    is left running, as after a real crash."""
    from memoryd.embedded import socket_alive, stop_orphan

    daemon = subprocess.Popen(
        [MEMORYD, "run", "--data-dir", str(data_dir)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    socket = data_dir / "redis" / "redis.sock"
    try:
        deadline = time.monotonic() + 180
        while not socket_alive(socket):
            assert time.monotonic() < deadline and daemon.poll() is None, "no daemon"
            await asyncio.sleep(0.2)
        redis = await queue.connect(f"unix://{socket}")
        try:
            while await queue.live_workers(redis) == 0:
                assert time.monotonic() < deadline, "the daemon did not serve"
                await asyncio.sleep(0.2)
            assert left(await queue.call(redis, jobs.STATUS)) == total
            # Each batch commits the search indexes, which rewrites their stamp: watched from
            # here, without a round trip through the queue (a fast machine finishes the whole
            # run between two status answers), the first batch's commit is seen at once.
            stamp = data_dir / SEARCH_DIR / STAMP
            committed = stamp.read_bytes()
            job = await enqueue(redis)
            assert job is not None
            while stamp.read_bytes() == committed:
                assert time.monotonic() < deadline, "the run did not get going"
                await asyncio.sleep(0.001)
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(timeout=60)
            # Its heartbeat has not expired, but a dead pid on this host no longer counts: the
            # next start, right away, knows no worker is alive and frees the job.
            assert await queue.live_workers(redis) == 0
        finally:
            await redis.aclose()
    except BaseException:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=60)
        if socket_alive(socket):
            stop_orphan(socket)
        raise
    return job.job_id


async def _next_start_finishes(
    settings: Settings, job_id: str, embedder: Embedder | None
) -> tuple[Any, dict]:
    """Start again on the killed daemon's data dir (and the private Redis it left): the start
    frees the killed job and its lock, so the same job runs again. Its result, and the dump."""
    rt = Runtime(settings, embedder)
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve()
        assert rt.redis is not None and rt.store is not None
        result = await queue.wait_for(Job(job_id, rt.redis, _queue_name=jobs.JOBS_QUEUE), 600)
        return result, await rt.store.dump()
    finally:
        await rt.close()


@pytest.mark.e2e
async def test_a_reembed_killed_half_way_leaves_a_consistent_database_and_the_next_run_finishes(
    data_dir: Path, arq_indexed: Path, tmp_path: Path, embedder: Embedder
) -> None:
    import numpy as np
    import zstandard

    from memoryd.config import DEFAULT_MODEL
    from memoryd.embedding import CLS_MODEL
    from memoryd.store import VECTOR_TABLES
    from tests.conftest import copy_data_dir
    from tests.fixtures import SMALL
    from workers.ingest import EMBED_CHARS

    # Built with the default model: arq's tree indexed, then a session ingested.
    copy_data_dir(arq_indexed, data_dir)
    first = Runtime(settings_for(data_dir), embedder)
    try:
        await first.start_queue(exclusive=True)
        await first.serve()
        assert first.redis is not None and first.store is not None
        transcript = tmp_path / "session.jsonl"
        transcript.write_bytes(SMALL.read_bytes())
        [job] = await queue.enqueue_ingest(first.redis, [str(transcript)])
        await queue.wait_for(job, 300)
        dump = await first.store.dump()
    finally:
        await first.close()
    before = _vectors(dump)
    # A long memory text is stored as a head and a compressed blob: the whole text is embedded.
    blobs = {
        str(b["id"]): zstandard.ZstdDecompressor().decompress(b["data"]).decode()
        for b in dump.get("blob", [])
    }
    texts = {
        (table, str(row["id"].id)): (
            blobs[str(row["body"])] if row.get("body") else row[field] or ""
        )[:EMBED_CHARS]
        for table, field in VECTOR_TABLES.items()
        for row in dump[table]
    }
    embedded = {key for key, (model, _) in before.items() if model == DEFAULT_MODEL}

    # The daemon, now configured with the CLS model, migrates in batches of 2 and is killed.
    killed = await _kill_half_way(
        data_dir,
        {"MEMORYD_MODEL": CLS_MODEL, "MEMORYD_MAINTENANCE_BATCH": "2"},
        lambda redis: redis.enqueue_job("reembed", 10_000, _queue_name=jobs.JOBS_QUEUE),
        lambda status: sum(status["waiting_for_reembed"].values()),
        len(embedded),
    )

    # Half-way and consistent: every row still there, each with either its old vector or
    # the new model's vector of its text, never one labelled with the other model.
    halfway = _vectors(await _dump(data_dir))
    assert set(halfway) == set(before)
    moved = {key for key in embedded if halfway[key][0] == CLS_MODEL}
    assert 0 < len(moved) < len(embedded)
    assert {key for key in embedded if halfway[key][0] == DEFAULT_MODEL} == embedded - moved
    for key in set(before) - moved:
        assert halfway[key] == before[key], key
    cls = Embedder(CLS_MODEL, data_dir / "models")
    order = sorted(moved)
    for key, vector in zip(order, cls.embed([texts[key] for key in order]), strict=True):
        assert np.allclose(halfway[key][1], vector, atol=1e-3), key  # stored as half floats

    settings = settings_for(data_dir, model=CLS_MODEL)
    result, dump = await _next_start_finishes(settings, killed, None)  # loads the CLS model
    assert result["remaining"] == dict.fromkeys(VECTOR_TABLES, 0)
    final = _vectors(dump)
    assert {key for key, (model, _) in final.items() if model == CLS_MODEL} == embedded
    order = sorted(embedded)
    for key, vector in zip(order, cls.embed([texts[key] for key in order]), strict=True):
        assert np.allclose(final[key][1], vector, atol=1e-3), key


@pytest.mark.e2e
async def test_a_prune_killed_half_way_leaves_no_dangling_edge_and_the_next_run_finishes(
    data_dir: Path, arq_tree: Path, tmp_path: Path, embedder: Embedder
) -> None:
    import shutil
    from datetime import UTC, datetime, timedelta

    from memoryd import projects
    from tests.conftest import git, orphaned_by

    # Every file but one is deleted: its chunks are retired now, expired a retention later.
    tree = tmp_path / "tree"
    shutil.copytree(arq_tree, tree)
    first = Runtime(settings_for(data_dir), embedder)
    try:
        await first.start_queue(exclusive=True)
        await first.serve()
        assert first.redis is not None and first.store is not None
        project = projects.resolve(tree)
        for job, _ in await projects.sync(first.redis, project, 32):
            await queue.wait_for(job, 300)
        gone = [p.name for p in tree.glob("*.py") if p.name != "connections.py"]
        git(tree, "rm", "-q", *gone)
        for job, _ in await projects.sync(first.redis, project, 32):
            await queue.wait_for(job, 300)
        dump = await first.store.dump()
    finally:
        await first.close()
    chunks = {str(r["id"].id) for r in dump["code_chunk"]}
    expired = {str(r["id"].id) for r in dump["code_chunk"] if r.get("valid_until")}
    orphaned = orphaned_by(dump, {("code_chunk", key) for key in expired})
    assert len(expired) > 50 and orphaned
    at = (datetime.now(UTC) + timedelta(days=31)).isoformat()

    killed = await _kill_half_way(
        data_dir,
        {"MEMORYD_MAINTENANCE_BATCH": "1"},
        lambda redis: redis.enqueue_job("prune", at, _queue_name=jobs.JOBS_QUEUE),
        lambda status: status["counts"]["code_chunk"] - status["valid_chunks"],
        len(expired),
    )

    # Half-way: some expired chunks are gone, with their edges; no edge lost an end.
    halfway = await _dump(data_dir)
    left = {str(r["id"].id) for r in halfway["code_chunk"]}
    assert chunks - expired <= left and 0 < len(chunks - left) < len(expired)
    entities = {str(r["id"].id) for r in halfway["entity"]}
    for edge in halfway["defined_in"]:
        assert str(edge["in"].id) in left and str(edge["out"].id) in entities, edge["id"]
    assert {str(e["in"].id) for e in halfway["defined_in"]} == left

    settings = settings_for(data_dir, maintenance_batch=1)
    result, final = await _next_start_finishes(settings, killed, embedder)
    # The run again deletes exactly what the killed one left, then the orphaned entities.
    assert result["deleted"] == {
        "code_chunk": len(left - (chunks - expired)),
        "memory": 0,
        "entity": len(orphaned),
    }
    assert {str(r["id"].id) for r in final["code_chunk"]} == chunks - expired
    assert {str(r["id"].id) for r in final["entity"]} == {
        str(r["id"].id) for r in dump["entity"]
    } - orphaned


async def test_a_run_whose_redis_dies_leaves_no_task_unanswered(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The task that renews a run's lock met a dead Redis, died of it, and was cancelled after
    its end: asyncio printed "Task exception was never retrieved" with a traceback (four after
    one exit line, when repeated Redis deaths stopped the daemon). It says so in one line."""
    import gc

    from workers import locks, maintenance

    monkeypatch.setattr(locks, "LOCK_SECONDS", 0.3)
    unanswered: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: unanswered.append(context))
    service = EmbeddedRedis(data_dir)
    service.start()
    redis = await queue.connect(service.url)

    async def upkeep(ctx: dict[str, Any]) -> dict[str, Any]:
        await asyncio.to_thread(service.stop)
        while not any("lost its lock" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.05)
        return {"done": 1}

    try:
        run = maintenance.one_at_a_time(upkeep)
        assert await asyncio.wait_for(run({"redis": redis}), 30) == {"done": 1}
    finally:
        service.stop()
        await redis.aclose()
    gc.collect()
    await asyncio.sleep(0)
    assert [c.get("message") for c in unanswered] == []
    [line] = [r.getMessage() for r in caplog.records if "lost its lock" in r.getMessage()]
    assert line.startswith("upkeep: lost its lock (")
