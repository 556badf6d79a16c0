"""The embedded database is reopened to give its memory back, and nothing notices."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memoryd import queue
from memoryd.runtime import Runtime
from tests.conftest import settings_for
from tests.test_ingest import S37


async def test_reopening_under_load_loses_nothing(data_dir: Path) -> None:
    # 1 MiB of growth reopens the database at most once a second, many times over this ingest.
    rt = Runtime(settings_for(data_dir, db_reopen_mb=1, transcripts=[]))
    try:
        redis = await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        assert rt.store is not None
        [job] = await queue.enqueue_ingest(redis, [str(S37)])
        searches = 0
        # Queries keep coming while the ingest writes and the database is reopened under them.
        while not await queue.job_done(job):
            hits = await queue.call(redis, "search", "render the html template", 3, None, "memory")
            assert isinstance(hits, list)
            searches += 1
            await asyncio.sleep(0.05)
        report = await queue.wait_for(job, 60)
        assert report["memories"] == 282 and report["edges"]["modifies"] == 30
        assert searches > 0 and rt.store.reopened >= 2
        counts = await rt.store.counts()
        assert counts["memory"] == 282 and counts["session"] == 1
        replay = await queue.call(redis, "session", "37f83ec9")
        assert "events" in replay, replay
        assert len(replay["events"]) == 282
    finally:
        await rt.close()
