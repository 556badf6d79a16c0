"""Who serves the queue: a killed process on this host stops counting at once, whatever pid
the system hands out next (liveness is a held lock, not a pid)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from memoryd import queue
from memoryd.daemon.runtime import Runtime
from memoryd.liveness import HeldLock, holder
from tests.conftest import settings_for


def _locked_by_a_process_that_exited(path: Path) -> None:
    code = (
        "from pathlib import Path; from memoryd.liveness import HeldLock; "
        f"HeldLock(Path({str(path)!r}))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_heartbeat_of_a_dead_process_here_is_dropped(data_dir: Path) -> None:
    rt = Runtime(settings_for(data_dir))
    try:
        redis = await rt.start_queue(exclusive=True)
        dead_lock = data_dir / "run" / "worker-dead.lock"
        _locked_by_a_process_that_exited(dead_lock)
        # The dead worker's file names a pid that is alive now (this one): a pid check would
        # take it for alive.
        dead_lock.write_text(f"{os.getpid()}\n")
        alive = HeldLock(data_dir / "run" / "worker-alive.lock")
        dead = queue.worker_key(dead_lock)
        elsewhere = f"{queue.WORKER_KEY_PREFIX}other-host:worker-x"
        for key, lock in (
            (dead, dead_lock),
            (elsewhere, "/x"),
            (queue.worker_key(alive.path), alive.path),
        ):
            await redis.set(key, str(lock), ex=queue.WORKER_KEY_TTL)
        assert await queue.live_workers(redis) == 2
        assert await redis.exists(dead) == 0 and not dead_lock.exists()
        assert await redis.exists(elsewhere) == 1
        assert holder(alive.path) == os.getpid()
        alive.release(remove=True)
        assert holder(alive.path) is None
    finally:
        await rt.close()


async def test_a_second_daemon_on_the_data_dir_is_refused(data_dir: Path) -> None:
    first = Runtime(settings_for(data_dir))
    second = Runtime(settings_for(data_dir))
    try:
        await first.start_queue(exclusive=True)
        try:
            await second.start_queue(exclusive=True)
        except Exception as exc:
            assert f"(pid {os.getpid()})" in str(exc) and "already running" in str(exc)
        else:
            raise AssertionError("a second daemon started on the same data dir")
    finally:
        await second.close()
        await first.close()
    assert holder(data_dir / "memoryd.lock") is None
