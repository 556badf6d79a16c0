"""Who serves the queue: a killed process on this host stops counting at once."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from memoryd import queue
from memoryd.runtime import Runtime
from tests.conftest import settings_for


async def test_heartbeat_of_a_dead_process_here_is_dropped(data_dir: Path) -> None:
    rt = Runtime(settings_for(data_dir))
    try:
        redis = await rt.start_queue(exclusive=True)
        gone = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        host = socket.gethostname()
        dead = f"{queue.WORKER_KEY_PREFIX}{host}:{gone.stdout.strip()}:deadbeef"
        elsewhere = f"{queue.WORKER_KEY_PREFIX}other-host:1:cafebabe"
        alive = queue.worker_key()
        for key in (dead, elsewhere, alive):
            await redis.set(key, 1, ex=queue.WORKER_KEY_TTL)
        assert await queue.live_workers(redis) == 2
        assert await redis.exists(dead) == 0
        assert await redis.exists(elsewhere) == 1 and await redis.exists(alive) == 1
    finally:
        await rt.close()
