"""Which failed writes the store runs again: one that lost to another writer (it wrote nothing
and will succeed), never one that would only fail the same way again."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from memoryd.database.migrate import migrate
from memoryd.store import QueryFailed, Store
from tests.conftest import settings_for


async def _store(data_dir: Path) -> Store:
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    await migrate(store, settings_for(data_dir), None)
    return store


async def test_one_records_writes_at_once_all_land(data_dir: Path) -> None:
    """The watcher's job and a fresh one can skip the same transcript at once (a fresh clone's
    run failed so: "Transaction write conflict"). The engine refuses all but one of such writes
    at once; a single statement that lost is run again, so none fails its job. Two at a time,
    as two jobs are: the one that lost then runs alone, so its second try cannot lose."""
    store = await _store(data_dir)
    try:
        path = str(data_dir / "pipe.jsonl")
        for n in range(50):
            pair = (f"not a regular file ({n})", f"a FIFO ({n})")
            await asyncio.gather(*(store.skip_transcript_file(path, 7, r) for r in pair))
            [row] = await store.skipped_files(50)
            assert row["path"] == path and row["reason"] in pair
    finally:
        await store.close()


async def test_a_write_that_would_fail_again_is_not_run_again(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk or a value the schema refuses fails every time: raised at once (a full
    disk's index job spent seconds per file waiting to fail the same way six times)."""
    caplog.set_level(logging.INFO, logger="memoryd.store.base")
    store = await _store(data_dir)
    try:
        write = (
            'UPSERT transcript_cursor:probe SET path = "p", note = "n", inode = 1, offset = 0, '
            "size = 0, lines_skipped = 0, updated_at = time::now();"
        )
        for sql in (f'BEGIN; {write} THROW "refused"; COMMIT;', 'THROW "refused";'):
            with pytest.raises(QueryFailed, match="refused"):
                await store.query(sql)
        assert [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()] == []
        assert await store.skipped_files(50) == []  # the transaction wrote nothing
    finally:
        await store.close()
