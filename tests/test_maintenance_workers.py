"""Maintenance across workers: schedules from config, one run per scheduled slot however many
workers schedule it, and runs of a task never overlapping."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from arq.jobs import JobStatus

from memoryd import queue
from memoryd.config import DEFAULT_SCHEDULE, load_settings, parse_schedule
from memoryd.errors import MemorydError
from memoryd.runtime import Runtime
from memoryd.services import EmbeddedRedis
from memoryd.store import Store
from tests.conftest import MEMORYD, settings_for

# Nothing else scheduled, and decay not before next New Year: the tests start runs themselves.
QUIET = {"decay": "0 0 1 1 *", "prune": "off", "reembed": "off"}


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
    assert parse_schedule("50/5 * * * * *")["second"] == {50, 55}
    for bad, needle in (
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "minute field '60': '60' is outside 0-59"),
        ("*/0 * * * *", "'*/0' is outside 0-59"),
        ("5-1 * * * *", "'5-1' is outside 0-59"),
        ("x * * * *", "minute field 'x'"),
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
            deadline = time.monotonic() + 180
            while await queue.live_workers(redis) < 2:
                assert time.monotonic() < deadline, "workers did not come up"
                await asyncio.sleep(0.5)
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
                    "cron:decay", _job_id=slot, _queue_name=queue.JOBS_QUEUE
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
    data_dir: Path,
) -> None:
    rt = Runtime(settings_for(data_dir, maintenance_schedule=QUIET))
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve()
        assert rt.redis is not None and rt.store is not None
        # A decay run in progress elsewhere holds the task's lock.
        held = rt.redis.lock(queue.MAINTENANCE_LOCK_PREFIX + "decay", timeout=60)
        assert await held.acquire(blocking=False)
        scheduled = await rt.redis.enqueue_job("cron:decay", _queue_name=queue.JOBS_QUEUE)
        asked = await rt.redis.enqueue_job("decay", _queue_name=queue.JOBS_QUEUE)
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
