"""Index jobs and the files they carry: no file is read to name a job, a job's files are
bounded in count and in bytes, and a file already waiting in a queued job is not queued again
(the queue does not snowball)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from arq.constants import result_key_prefix
from redis.exceptions import WatchError

from memoryd import jobs, queue
from memoryd.daemon.runtime import Runtime
from tests.conftest import settings_for


async def _files(job: object) -> list[str]:
    info = await job.info()  # type: ignore[attr-defined]
    assert info is not None
    return list(info.args[2])


async def test_waiting_files_are_not_queued_twice_until_their_job_starts(data_dir: Path) -> None:
    root = data_dir / "repo"  # never read: enqueueing stats files (none here: 0 bytes each)
    async with Runtime(settings_for(data_dir)) as rt:
        redis = await rt.start_queue()  # no worker: jobs stay queued
        [(first, n)] = await queue.enqueue_index(redis, "p", root, ["a.py", "b.py"], 32)
        assert n == 2 and await _files(first) == ["a.py", "b.py"]

        [(second, n)] = await queue.enqueue_index(redis, "p", root, ["a.py", "c.py", "c.py"], 32)
        assert n == 1 and await _files(second) == ["c.py"]
        assert await queue.enqueue_index(redis, "p", root, ["b.py"], 32) == []

        # An explicit `memoryd index` wants a report on every file it names.
        [(fresh, n)] = await queue.enqueue_index(redis, "p", root, ["a.py"], 32, fresh=True)
        assert n == 1 and fresh.job_id != first.job_id

        # The first job starts: its files leave the marks (a.py now belongs to `fresh`).
        await queue.claim_files(redis, "p", ["a.py", "b.py"], first.job_id)
        [(again, n)] = await queue.enqueue_index(redis, "p", root, ["a.py", "b.py"], 32)
        assert n == 1 and await _files(again) == ["b.py"]

        # A mark naming a job that is not waiting (lost, aborted, done) holds nothing back.
        await redis.hset("memoryd:queued:p", "d.py", "index:p:gone")
        [(recovered, n)] = await queue.enqueue_index(redis, "p", root, ["d.py"], 32)
        assert n == 1 and await _files(recovered) == ["d.py"]

        # Batches of at most `batch` files, each its own job.
        batches = await queue.enqueue_index(redis, "q", root, [f"{i}.py" for i in range(5)], 2)
        assert [n for _, n in batches] == [2, 2, 1]


async def test_a_sync_adopts_the_jobs_queued_before_it(data_dir: Path) -> None:
    """A whole-project sync (after a crash, say) covers every file: those still waiting in
    jobs queued before it stay theirs, and those jobs count for the new sync once they start;
    a job that started first keeps its own sync, and its files are queued again."""
    root = data_dir / "repo"
    async with Runtime(settings_for(data_dir)) as rt:
        redis = await rt.start_queue()  # no worker: jobs stay queued
        files = ["a.py", "b.py", "c.py"]
        old = await queue.enqueue_index(redis, "p", root, files, 1, progress="r1")
        (first, _), (second, _), (third, _) = old
        # The first job starts before any sync adopted it: it counts for its own (r1).
        assert await queue.claim_files(redis, "p", ["a.py"], first.job_id) is None
        totals: list[int] = []

        async def started(total: int) -> None:
            totals.append(total)

        new = await queue.enqueue_index(
            redis, "p", root, ["a.py", "b.py", "c.py", "d.py"], 32, progress="r2", before=started
        )
        assert totals == [4]
        # a.py's job had started: a.py goes in a job of r2 with the file new to it.
        assert [await _files(job) for job, _ in new] == [["a.py", "d.py"]]
        assert (await new[0][0].info()).kwargs["progress"] == "r2"  # type: ignore[union-attr]
        # b.py's and c.py's jobs, started now, count for r2; the first one for no one else.
        assert await queue.claim_files(redis, "p", ["b.py"], second.job_id) == "r2"
        assert await queue.claim_files(redis, "p", ["c.py"], third.job_id) == "r2"
        assert await queue.claim_files(redis, "p", ["b.py"], second.job_id) is None


async def test_a_jobs_files_are_bounded_in_bytes_too(data_dir: Path) -> None:
    """Two files of 3 MiB and one of 5 MiB among small ones: none shares a job past JOB_BYTES
    (4 MiB), the larger one goes alone, and the small ones fill jobs by count as before."""
    root = data_dir / "repo"
    root.mkdir()
    mib = 1024 * 1024
    sizes = {"a.py": 10, "big1.bin": 3 * mib, "big2.bin": 3 * mib, "b.py": 10, "huge.bin": 5 * mib}
    sizes |= {f"s{i}.py": 100 for i in range(5)}
    for name, size in sizes.items():
        with open(root / name, "wb") as out:
            out.truncate(size)  # sparse: the size is all that counts
    async with Runtime(settings_for(data_dir)) as rt:
        redis = await rt.start_queue()  # no worker: jobs stay queued
        batches = await queue.enqueue_index(redis, "p", root, list(sizes), 4)
        parts = [await _files(job) for job, _ in batches]
    assert parts == [
        ["a.py", "big1.bin"],
        ["big2.bin", "b.py"],
        ["huge.bin"],
        ["s0.py", "s1.py", "s2.py", "s3.py"],
        ["s4.py"],
    ]


async def test_status_counts_the_finished_jobs_while_their_results_expire(
    stack: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished job's result that goes (a query's expires after a minute) between the
    listing of the results and their reading is left out. arq's `all_job_results` raised
    KeyError then, so `status` failed now and then on a busy daemon (the months bench, day 71)."""
    redis = stack.redis
    assert redis is not None
    for _ in range(3):
        await queue.call(redis, jobs.STATUS)
    kept = {r.job_id for r in await queue.job_results(redis)}
    assert len(kept) == 3 and all(job.startswith("q:status:") for job in kept)
    gone = result_key_prefix + "q:status:gone"
    value = await redis.get(result_key_prefix + min(kept))
    listing = redis.keys

    async def keys_then_expire(pattern: str) -> list[bytes]:
        # The race, made certain: the listing sees `gone`, and it expires right after.
        found = await listing(pattern)
        await redis.delete(gone)
        return found

    with monkeypatch.context() as patch:
        patch.setattr(redis, "keys", keys_then_expire)
        await redis.set(gone, value)
        with pytest.raises(KeyError):  # arq's own listing: the failure `status` had
            await redis.all_job_results()
        await redis.set(gone, value)
        assert {r.job_id for r in await queue.job_results(redis)} == kept
    status = await queue.call(redis, jobs.STATUS)
    assert status["queue"]["last_hour"] == {"done": 3, "failed": 0}


async def test_a_server_lost_under_watch_is_lost_and_a_changed_key_is_not(data_dir: Path) -> None:
    """arq enqueues under WATCH. The private Redis killed between the WATCH and the next
    command surfaces as redis-py's WatchError: still a lost server (the daemon restarts Redis;
    it failed a daemon's start once with a traceback), while a watched key that another client
    changed is an ordinary conflict."""
    async with Runtime(settings_for(data_dir)) as rt:
        redis = await rt.start_queue()
        service = rt.redis_service
        assert service is not None and service.pid is not None
        async with redis.pipeline(transaction=True) as pipe:
            await pipe.watch("memoryd:test:watched")
            await redis.set("memoryd:test:watched", "changed")
            pipe.multi()
            pipe.set("memoryd:test:watched", "mine")
            with pytest.raises(WatchError) as conflict:
                await pipe.execute()
        assert not queue.server_lost(conflict.value)

        async with redis.pipeline(transaction=True) as pipe:
            await pipe.watch("memoryd:test:watched")
            os.kill(service.pid, signal.SIGKILL)
            deadline = time.monotonic() + 120
            while service.exit_code() is None:
                assert time.monotonic() < deadline, "redis-server outlived SIGKILL"
                await asyncio.sleep(0.05)
            with pytest.raises(WatchError) as lost:
                await pipe.exists("memoryd:test:watched")
        assert queue.server_lost(lost.value)
