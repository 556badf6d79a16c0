"""Indexing progress per project: files done of total, chunks, state, times and the last
error, stored by the jobs of a whole-project sync and shown by `status` and the client API."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from memoryd import client, projects, queue, scan
from memoryd.daemon.runtime import Runtime
from tests.conftest import MEMORYD
from workers.counts import Counted

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ"


async def test_a_sync_reports_its_progress_and_logs_once_when_done(
    stack: Runtime, arq_tree: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert stack.redis is not None and stack.store is not None
    project = projects.resolve(arq_tree)
    files = len(list(scan.walk(project.root)))
    caplog.set_level(logging.INFO, logger="workers.indexing")
    reports = [
        await queue.wait_for(job, 600) for job, _ in await projects.sync(stack.redis, project, 8)
    ]
    assert len(reports) == -(-files // 8) > 1  # several jobs count into one progress

    memoryd = client.Client(stack.redis, stack.settings)
    [entry] = await memoryd.index_progress()
    index = entry["index"]
    assert index is not None
    assert (entry["id"], entry["root"]) == (project.id, str(project.root))
    assert (index["state"], index["files_done"], index["files_total"]) == ("ready", files, files)
    assert index["chunks"] == sum(r["chunks"] for r in reports) > 0
    assert index["last_error"] is None
    assert datetime.fromisoformat(index["started_at"]) <= datetime.fromisoformat(
        index["finished_at"] or ""
    )
    done = [r.getMessage() for r in caplog.records if "initial index of" in r.getMessage()]
    assert len(done) == 1
    assert re.fullmatch(
        rf"initial index of {project.id} done: {files} files, {index['chunks']} chunks in \d+s",
        done[0],
    )
    # The time left for vectors follows the embedder's measured rate, which moves between reads.
    [listed] = (await memoryd.status())["projects"]
    assert {**listed, "vectors_seconds_left": None} == {**entry, "vectors_seconds_left": None}

    # A second sync starts over; every file is unchanged, so it writes no chunks.
    for job, _ in await projects.sync(stack.redis, project, 8):
        await queue.wait_for(job, 600)
    [again] = await memoryd.index_progress()
    assert again["index"] is not None
    assert again["index"]["state"] == "ready" and again["index"]["chunks"] == 0
    assert again["index"]["started_at"] > index["started_at"]


async def test_progress_counts_only_its_own_run_and_keeps_the_error(stack: Runtime) -> None:
    store = stack.store
    assert store is not None
    await store.start_progress("p1", "run-a", 5)
    assert await store.advance_progress("p1", "run-a", 2, 10, None) is None
    await store.start_progress("p1", "run-b", 3)
    # A late job of the replaced run counts for nothing.
    assert await store.advance_progress("p1", "run-a", 3, 99, None) is None
    assert await store.advance_progress("p1", "run-b", 2, 4, "cannot store a.py: refused") is None
    finished = await store.advance_progress("p1", "run-b", 1, 1, None)
    assert finished is not None
    assert (finished["state"], finished["files_done"], finished["chunks"]) == ("ready", 3, 5)
    assert finished["last_error"] == "cannot store a.py: refused"
    # Counted twice (a retried job): never past the total, and done only once.
    assert await store.advance_progress("p1", "run-b", 1, 0, None) is None

    await store.start_progress("p2", "run-c", 4)
    await store.fail_progress("p2", "run-c", "JobFailed: the database went away")
    assert await store.advance_progress("p2", "run-c", 4, 0, None) is None
    p2 = (await store.index_progress())["p2"]
    assert (p2["state"], p2["files_done"]) == ("failed", 4)
    assert p2["last_error"] == "JobFailed: the database went away"

    # Jobs finishing at once (the engine refuses one of two concurrent writes of a row):
    # every one counts, and exactly one sees the sync finish.
    await store.start_progress("p3", "run-e", 128)
    ends = await asyncio.gather(
        *(store.advance_progress("p3", "run-e", 2, 1, None) for _ in range(64))
    )
    assert sum(end is not None for end in ends) == 1
    p3 = (await store.index_progress())["p3"]
    assert (p3["state"], p3["files_done"], p3["chunks"]) == ("ready", 128, 64)

    await store.start_progress("empty", "run-d", 0)
    assert (await store.index_progress())["empty"]["state"] == "ready"


@pytest.mark.e2e
def test_index_prints_progress_lines_off_a_terminal(data_dir: Path, arq_tree: Path) -> None:
    done = subprocess.run(
        [MEMORYD, "index", str(arq_tree), "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MEMORYD_PROGRESS_SECONDS": "0.2"},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    lines = re.findall(
        rf"^indexing {report['project']}: (\d+)/{report['files']} files, \d+ chunks, \d+s$",
        done.stderr,
        re.M,
    )
    assert lines, done.stderr
    assert all(int(n) <= report["files"] for n in lines)
    assert [int(n) for n in lines] == sorted(int(n) for n in lines)

    status = subprocess.run(
        [MEMORYD, "status", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert status.returncode == 0, status.stderr
    n = report["files"]
    assert re.search(
        rf"^project +{report['project']}  {re.escape(str(arq_tree))}  ready {n}/{n} files, "
        rf"{report['chunks']} chunks, {WHEN} \.\. {WHEN}$",
        status.stdout,
        re.M,
    ), status.stdout


async def test_status_counts_a_big_database_in_the_background() -> None:
    """Row counts are scans: once counting is slow, status answers from the last count (saying
    how old it is) and counts again in the background when that is older than max_age."""
    calls: list[float] = []

    async def count(seconds: float) -> dict[str, int]:
        calls.append(seconds)
        await asyncio.sleep(seconds)
        return {"n": len(calls)}

    small = Counted(max_age=60)
    assert (await small.get(lambda: count(0)))["n"] == 1
    assert (await small.get(lambda: count(0)))["n"] == 2  # cheap: counted every time

    big = Counted(max_age=0.2)
    first = await big.get(lambda: count(0.1))  # nothing counted yet: this call waits
    assert first["n"] == 3 and first["counted_seconds_ago"] < 0.2
    started = time.monotonic()
    again = await big.get(lambda: count(0.1))
    assert again["n"] == 3 and time.monotonic() - started < 0.05  # young enough: as it was
    await asyncio.sleep(0.25)
    stale = await big.get(lambda: count(0.1))
    assert stale["n"] == 3 and stale["counted_seconds_ago"] >= 0.2  # answered at once…
    assert (await big.get(lambda: count(0.1)))["n"] == 3  # …one refresh under way, not two
    await asyncio.sleep(0.2)
    assert (await big.get(lambda: count(0.1)))["n"] == 4
    assert len(calls) == 4
