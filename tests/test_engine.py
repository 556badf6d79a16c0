"""The embedded database is reopened to give its memory back, and nothing notices."""

from __future__ import annotations

from pathlib import Path

from memoryd import queue
from memoryd.runtime import Runtime
from tests.conftest import settings_for
from tests.test_ingest import S37


async def test_reopening_under_load_loses_nothing(data_dir: Path) -> None:
    rt = Runtime(settings_for(data_dir, transcripts=[]))
    try:
        redis = await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        store = rt.store
        assert store is not None
        [job] = await queue.enqueue_ingest(redis, [str(S37)])
        searches = reopens = 0
        # Searches keep coming and the database is reopened under them while the ingest writes.
        while not await queue.job_done(job):
            hits = await queue.call(redis, "search", "render the html template", 3, None, "memory")
            assert isinstance(hits, list)
            searches += 1
            if searches % 3 == 0:
                await store.reopen()
                reopens += 1
        report = await queue.wait_for(job, 60)
        assert report["memories"] == 282 and report["edges"]["modifies"] == 30
        assert reopens >= 2 and store.reopened >= reopens  # >=: it may also reopen on its own
        counts = await store.counts()
        assert counts["memory"] == 282 and counts["session"] == 1
        replay = await queue.call(redis, "session", "37f83ec9")
        assert len(replay["events"]) == 282
    finally:
        await rt.close()
