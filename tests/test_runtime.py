"""Runtime.close: the parts come down in order whatever the workers are doing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from memoryd import queue
from memoryd.embedded import socket_alive
from memoryd.embedding import Embedder
from memoryd.runtime import Runtime
from tests.conftest import settings_for


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
