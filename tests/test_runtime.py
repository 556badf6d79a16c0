"""Runtime: the parts come down in order whatever the workers are doing, and a private Redis
that dies is started again, a bounded number of times."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from arq import ArqRedis
from arq.constants import in_progress_key_prefix, retry_key_prefix
from arq.jobs import Job

from memoryd import jobs, projects, queue, static_embedding
from memoryd.daemon.runtime import REDIS_RESTARTS, Runtime, ServedElsewhere
from memoryd.embedded import socket_alive
from memoryd.embedding import Embedder
from memoryd.errors import MemorydError
from memoryd.store.connection import files_of
from memoryd.watch.repos import RepoWatcher
from memoryd.watch.transcripts import TranscriptWatcher
from tests.conftest import git_init, queued_search, settings_for, settle
from tests.fixtures import S37, SMALL


async def test_close_while_a_job_is_being_finished_still_closes_everything(
    data_dir: Path, tmp_path: Path, embedder: Embedder
) -> None:
    """arq's Worker.close() cancels the jobs under way and re-raises a cancellation that lands
    while a finished job's result is being written. That must not cut the shutdown short:
    Redis, the database and the private redis-server still have to be closed."""
    rt = Runtime(settings_for(data_dir), embedder)
    await rt.start_queue(exclusive=True)
    await rt.serve()
    jobs_worker = rt.workers[0]
    finishing, release = asyncio.Event(), asyncio.Event()
    original = jobs_worker.finish_job

    async def slow_finish(*args: Any, **kwargs: Any) -> None:
        finishing.set()
        await release.wait()
        await original(*args, **kwargs)

    jobs_worker.finish_job = slow_finish  # type: ignore[method-assign]
    assert rt.redis is not None
    missing = tmp_path / "gone.jsonl"  # a job that ends at once: "transcript unreadable"
    await queue.enqueue_ingest(rt.redis, [str(missing)], fresh=True)
    await asyncio.wait_for(finishing.wait(), 60)

    closing = asyncio.create_task(rt.close())
    await asyncio.sleep(0.2)  # close() has cancelled the job task by now
    release.set()
    await asyncio.wait_for(closing, 60)  # raised CancelledError before the fix

    assert (rt.redis, rt.store, rt.redis_service, rt.workers) == (None, None, None, [])
    assert not socket_alive(rt.settings.redis_socket)


async def _killed(rt: Runtime) -> int:
    """SIGKILL the private redis-server; returns its pid once it is gone."""
    assert rt.redis_service is not None and rt.redis_service.pid is not None
    pid = rt.redis_service.pid
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        # Seen dead, or already replaced by the supervisor (which reaps it).
        if rt.redis_service.exit_code() is not None or rt.redis_service.pid != pid:
            return pid
        await asyncio.sleep(0.05)
    raise AssertionError(f"redis-server {pid} outlived SIGKILL")


async def _restarted(rt: Runtime, old: int) -> int:
    """Wait (bounded) until the supervisor serves again on a new redis-server."""
    for _ in range(300):
        service = rt.redis_service
        if service is not None and service.pid not in (None, old) and rt.workers:
            return service.pid  # type: ignore[return-value]
        await asyncio.sleep(0.1)
    raise AssertionError("the private Redis was not started again within 30 s")


async def test_a_private_redis_that_keeps_dying_ends_serving_after_bounded_restarts(
    stack: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memoryd.daemon.runtime")
    pids = []
    for _ in range(REDIS_RESTARTS):
        old = await _killed(stack)
        pids.append(old)
        new = await _restarted(stack, old)
        assert stack.redis is not None
        # The new workers answer a query through the new server (the client's pool reconnects).
        assert await queue.call(stack.redis, jobs.PROJECTS, timeout=30) == []
        assert new not in pids
    last = await _killed(stack)
    with pytest.raises(MemorydError) as stopped:
        await asyncio.wait_for(stack.wait_serving(), 30)
    assert str(stopped.value).startswith(
        f"the private Redis (pid {last}) was killed by signal 9, {REDIS_RESTARTS + 1} times in "
        "10 minutes"
    )
    assert str(stopped.value).endswith("; memoryd stops")
    restarts = [r.getMessage() for r in caplog.records if "started it again" in r.getMessage()]
    assert len(restarts) == REDIS_RESTARTS
    assert all(f"(pid {pid}) was killed" in line for pid, line in zip(pids, restarts, strict=True))
    await stack.close()
    assert not any(psutil.pid_exists(pid) for pid in [*pids, last])


async def test_a_private_redis_that_cannot_start_again_ends_serving_with_one_line(
    stack: Runtime,
) -> None:
    assert stack.redis_service is not None
    aof = stack.redis_service.dir / "appendonly.aof"
    # The running server keeps writing its own (renamed-over) file; a new one would read this.
    broken = aof.with_name("broken.aof")
    broken.write_bytes(b"not an append-only file\n")
    broken.replace(aof)
    killed = await _killed(stack)
    with pytest.raises(MemorydError) as stopped:
        await asyncio.wait_for(stack.wait_serving(), 30)
    message = str(stopped.value)
    assert message.startswith(
        f"the private Redis (pid {killed}) was killed by signal 9, and starting it again failed "
        "(redis-server exited at start (code 1);"
    ), message
    assert message.endswith("; memoryd stops")
    started = stack.redis_service.pid
    await stack.close()
    assert started is not None and not psutil.pid_exists(started)


async def test_a_private_redis_killed_during_start_up_is_started_again(
    data_dir: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memoryd.daemon.runtime")
    rt = Runtime(settings_for(data_dir), embedder)
    try:
        await rt.start_queue(exclusive=True)
        killed = await _killed(rt)  # before the database, the model and the workers
        await rt.serve()
        restarts = [r.getMessage() for r in caplog.records if "started it again" in r.getMessage()]
        assert len(restarts) == 1
        assert restarts[0].startswith(f"the private Redis (pid {killed}) was killed by signal 9")
        assert rt.redis is not None and rt.redis_service is not None
        assert await queue.call(rt.redis, jobs.PROJECTS, timeout=30) == []
        started = rt.redis_service.pid
    finally:
        await rt.close()
    assert started is not None and not psutil.pid_exists(started)


def _killing_connects(rt: Runtime, times: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Kill the private Redis just before each of the first `times` connections to it (the
    moment between its start and the first connection); returns the killed pids."""
    killed: list[int] = []
    connect = queue.connect

    async def killing_connect(url: str) -> ArqRedis:
        if len(killed) < times:
            killed.append(await _killed(rt))
        return await connect(url)

    monkeypatch.setattr(queue, "connect", killing_connect)
    return killed


@pytest.mark.parametrize("kills", [1, REDIS_RESTARTS + 1])
async def test_a_private_redis_killed_before_the_first_connection_is_started_again_in_bounds(
    data_dir: Path, kills: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed before the daemon's first connection, the private Redis is started again as
    later on (it was one line and exit 1); one that keeps dying there ends the start-up with
    the same line as one that keeps dying under the workers."""
    caplog.set_level(logging.INFO, logger="memoryd.daemon.runtime")
    rt = Runtime(settings_for(data_dir))
    killed = _killing_connects(rt, kills, monkeypatch)
    try:
        if kills > REDIS_RESTARTS:
            with pytest.raises(MemorydError) as stopped:
                await rt.start_queue(exclusive=True)
            assert str(stopped.value).startswith(
                f"the private Redis (pid {killed[-1]}) was killed by signal 9, {kills} times in "
                "10 minutes"
            )
            serving = []
        else:
            redis = await rt.start_queue(exclusive=True)
            assert await redis.ping()
            assert rt.redis_service is not None and rt.redis_service.pid is not None
            serving = [rt.redis_service.pid]
    finally:
        await rt.close()
    assert len(killed) == kills
    # Each restart names the server that died and the one started in its place.
    started = [*killed[1:], *serving]
    restarts = [r.getMessage() for r in caplog.records if "started it again" in r.getMessage()]
    assert restarts == [
        f"the private Redis (pid {pid}) was killed by signal 9: started it again (pid {new})"
        for pid, new in zip(killed[:REDIS_RESTARTS], started, strict=False)
    ]
    assert not any(psutil.pid_exists(pid) for pid in serving)


async def test_watchers_that_start_while_the_private_redis_is_down_enqueue_once_it_is_back(
    data_dir: Path, tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon starts its watchers last: a Redis killed then met their first reconcile
    and ended the daemon. Now each keeps its reconcile and enqueues it once Redis is back
    (here the serving start restarts it, as the supervisor does after "memoryd running")."""
    caplog.set_level(logging.INFO)
    root = tmp_path / "repo"
    root.mkdir()
    for i in range(3):
        (root / f"mod_{i}.py").write_text(f"def handler_{i}(event):\n    return {i}\n")
    git_init(root)
    folder = tmp_path / "transcripts"
    folder.mkdir()
    transcript = folder / SMALL.name
    shutil.copy(SMALL, folder)
    project = projects.resolve(root)
    rt = Runtime(settings_for(data_dir), embedder)
    repos = transcripts = None
    try:
        redis = await rt.start_queue(exclusive=True)
        killed = await _killed(rt)
        repos = RepoWatcher(redis, [project], 0.1, 32)
        transcripts = TranscriptWatcher(redis, [folder], 0.1)
        await repos.start()  # raised ConnectionError before
        await transcripts.start()
        waiting = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert [line.split(" (")[0] for line in waiting] == [
            f"reconcile of {project.id} not enqueued",
            "1 transcripts not enqueued",
        ]
        await rt.serve()
        restarts = [r.getMessage() for r in caplog.records if "started it again" in r.getMessage()]
        assert len(restarts) == 1 and f"(pid {killed})" in restarts[0]
        index = await settle(rt, root, project.id, repos, timeout=60)
        assert sorted(index) == ["mod_0.py", "mod_1.py", "mod_2.py"]
        # Every round failed while Redis was down; each watcher said so once, and once when
        # its enqueue got through.
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("memoryd.watch")]
        assert [line for line in lines if "retrying" in line] == waiting
        assert len([line for line in lines if line.startswith("enqueued again after")]) == 2
        assert rt.store is not None
        for _ in range(300):
            cursor = await rt.store.transcript_cursor(str(transcript))
            if cursor is not None and cursor["offset"] == transcript.stat().st_size:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"transcript not ingested within 30 s: {cursor}")
    finally:
        for watcher in (repos, transcripts):
            if watcher is not None:
                await watcher.stop()
        await rt.close()


async def test_a_job_cut_short_by_dead_workers_runs_again_and_only_a_suspect_counts_its_tries(
    data_dir: Path, tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """arq counts a try when a job starts. Three kills during one ingest (the kill trials)
    failed it for good as "max retries exceeded", and the transcript was never read again
    until it grew. Each start now gives back the try of a job its dead worker cut short, up
    to ORPHANED_LIMIT times: past that the job may be what kills the worker, and its tries
    count again."""
    caplog.set_level(logging.WARNING, logger="memoryd.queue")
    spec = jobs.INGEST_TRANSCRIPT
    rt = Runtime(settings_for(data_dir), embedder)
    try:
        redis = await rt.start_queue(exclusive=True)
        outcomes = {}
        for name, deaths in (("often", spec.max_tries), ("suspect", queue.ORPHANED_LIMIT + 1)):
            transcript = tmp_path / f"{name}.jsonl"
            shutil.copy(SMALL, transcript)
            [job] = await queue.enqueue_ingest(redis, [str(transcript)])
            for _ in range(deaths):
                # What a worker does as it starts the job, and what its death leaves.
                await redis.incr(retry_key_prefix + job.job_id)
                await redis.set(in_progress_key_prefix + job.job_id, b"1", px=60_000)
                assert await queue.release_orphaned_jobs(redis) == 1  # each start's release
            outcomes[name] = job
        await rt.serve()
        for name, job in outcomes.items():
            await queue.wait_for(job, 120)
            info = await job.result_info()
            assert info is not None and info.success, (name, info)
            # Its tries given back each time, or counted for the one death past the limit.
            assert info.job_try == {"often": 1, "suspect": 2}[name]
        assert [r.getMessage() for r in caplog.records] == [
            f"job {outcomes['suspect'].job_id} was cut short by a worker's death more than "
            f"{queue.ORPHANED_LIMIT} times: it may be the cause, so its tries count again"
        ]
    finally:
        await rt.close()


@contextlib.asynccontextmanager
async def _long_ingest(
    data_dir: Path, tmp_path: Path, embedder: Embedder
) -> AsyncIterator[tuple[Runtime, ArqRedis, Job]]:
    """A runtime serving the queue, with the ingest of a long transcript queued on it."""
    transcript = tmp_path / S37.name
    shutil.copy(S37, transcript)
    rt = Runtime(settings_for(data_dir), embedder)
    try:
        redis = await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        [job] = await queue.enqueue_ingest(redis, [str(transcript)])
        yield rt, redis, job
    finally:
        await rt.close()


async def _under_way(redis: ArqRedis, job: Job) -> None:
    """Until the job runs (arq counted its try)."""
    for _ in range(600):
        if await redis.get(retry_key_prefix + job.job_id) == b"1":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the job did not start within 30 s")


async def test_a_job_cut_short_by_a_stop_keeps_its_try(
    data_dir: Path, tmp_path: Path, embedder: Embedder
) -> None:
    """A stop (SIGTERM, a service restart) cancels the jobs under way, and arq counted a try
    for each: three stops during one long ingest failed it. The stop gives the tries back."""
    async with _long_ingest(data_dir, tmp_path, embedder) as (_, redis, job):
        await _under_way(redis, job)
    rt = Runtime(settings_for(data_dir), embedder)
    try:
        redis = await rt.start_queue(exclusive=True)
        again = Job(job.job_id, redis, _queue_name=jobs.JOBS_QUEUE)
        assert await again.result_info() is None  # cut short, not finished
        assert await redis.get(retry_key_prefix + job.job_id) == b"0"
        await rt.serve(scheduled=False)
        await queue.wait_for(again, 300)
        info = await again.result_info()
        assert info is not None and info.success and info.job_try == 1
    finally:
        await rt.close()


async def test_a_database_that_cannot_be_opened_again_ends_serving_with_one_line(
    stack: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """A reopen (to give the engine's memory back) whose open fails left a closed connection
    behind an open gate: every later query failed in its own way. The connection is now
    broken, says so once, and the daemon stops for its service manager to start it again."""
    assert stack.store is not None
    files = files_of(stack.store.url)
    assert files is not None
    moved = files.with_name("moved")
    files.rename(moved)
    files.write_text("not a database")  # what the open finds in its place
    try:
        with pytest.raises(MemorydError, match="could not be opened again") as failed:
            await stack.store.reopen()
        with pytest.raises(MemorydError) as stopped:
            await asyncio.wait_for(stack.wait_serving(), 30)
        assert str(stopped.value) == f"{failed.value}; memoryd stops"
        with pytest.raises(MemorydError) as queried:
            await stack.store.query("RETURN 1")
        assert queried.value is failed.value
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [str(failed.value)]
    finally:
        files.unlink()
        moved.rename(files)


async def test_a_job_cut_short_by_redis_restarts_runs_to_the_end(
    data_dir: Path, tmp_path: Path, embedder: Embedder
) -> None:
    """Each Redis restart cancels the jobs under way; the try arq counted for each is given
    back, so three restarts during one long ingest do not use up its tries."""
    async with _long_ingest(data_dir, tmp_path, embedder) as (rt, redis, job):
        for _ in range(REDIS_RESTARTS):
            await _under_way(redis, job)
            await asyncio.sleep(1.5)  # into the job, and its start in the append-only file
            await _restarted(rt, await _killed(rt))
        await queue.wait_for(job, 300)
        info = await job.result_info()
        assert info is not None and info.success and info.job_try == 1, info
        # No job causes a Redis restart: none counts towards ORPHANED_LIMIT.
        assert not await redis.exists(queue.ORPHANED_PREFIX + job.job_id)


async def test_a_daemon_that_starts_while_a_command_serves_the_data_dir_waits_for_it(
    data_dir: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """A one-shot command (`memoryd status` with no daemon) serves the data dir itself: its
    own private Redis, the database. A daemon starting meanwhile took that Redis for one left
    by a killed memoryd and stopped it ("stopping the private Redis left by…" on a brand-new
    data dir), then fought the command for the database. It waits for the command instead;
    and a command that starts while a daemon starts never serves the data dir itself."""
    caplog.set_level(logging.INFO, logger="memoryd.daemon.runtime")
    command = Runtime(settings_for(data_dir), embedder)
    daemon = Runtime(settings_for(data_dir), embedder)
    late = Runtime(settings_for(data_dir), embedder)
    try:
        await command.start_queue(one_shot=True)
        await command.serve_if_needed()
        assert command.redis_service is not None
        theirs = command.redis_service.pid
        starting = asyncio.create_task(daemon.start_queue(exclusive=True))
        while not any("a command using the data dir" in r.getMessage() for r in caplog.records):
            assert not starting.done(), starting.result()
            await asyncio.sleep(0.05)
        # The command's Redis still serves it.
        assert await queue.call(command.redis, jobs.PROJECTS, timeout=30) == []
        with pytest.raises(ServedElsewhere):
            await late.start_queue(one_shot=True)
        await command.close()
        await asyncio.wait_for(starting, 60)
        assert daemon.redis_service is not None and daemon.redis_service.pid != theirs
        await daemon.serve(scheduled=False)
        assert daemon.redis is not None
        assert await queue.call(daemon.redis, jobs.PROJECTS, timeout=30) == []
        # A command that starts while the daemon serves is refused the data dir too.
        with pytest.raises(ServedElsewhere):
            await late.start_queue(one_shot=True)
    finally:
        for rt in (late, command, daemon):
            await rt.close()
    said = [r.getMessage() for r in caplog.records]
    assert not any("left by a memoryd that was killed" in line for line in said)
    assert sum("a command using the data dir" in line for line in said) == 1


async def test_a_one_shot_command_loads_the_model_at_its_first_text_not_as_database_growth(
    data_dir: Path, tmp_path: Path
) -> None:
    """A command served in its own process (no daemon) loads the model and the first pass's
    table only when a job embeds (most commands only read); those loads (132 MiB, 31 MB) are
    not counted as the database's growth, which reopens the database from 96 MiB on."""
    command = Runtime(settings_for(data_dir))
    try:
        await command.start_queue(one_shot=True)
        await command.serve_if_needed()
        assert command.redis is not None and command.store is not None
        assert command.embedder is not None and command.search is not None
        first_pass = command.search.index._first
        assert isinstance(first_pass, static_embedding.WhenUsed)
        assert await queue.call(command.redis, jobs.PROJECTS, timeout=60) == []
        assert (command.embedder._model, first_pass._embedder) == (None, None)
        root = tmp_path / "repo"
        root.mkdir()
        (root / "a.py").write_text("def connect(settings):\n    return settings.host\n")
        git_init(root)
        for job, _ in await projects.sync(command.redis, projects.resolve(root), 32):
            await queue.wait_for(job, 300)
        assert await queued_search(command.redis, "connect settings host", 5) != []
        assert command.embedder._model is not None and first_pass._embedder is not None
        growth = command.store.memory_growth
        assert growth is not None and growth < command.settings.db_reopen_mb << 20
    finally:
        await command.close()
