"""Compaction: the embedded database written again into fresh files, with its live rows only.

The embedded engine (SurrealKV 0.21 in surrealdb-core 3.2) keeps the bytes of deleted and
rewritten values: large values live in a value log (`db/vlog/`) that this build never rewrites,
and it refuses `ALTER SYSTEM COMPACT` ("does not support compaction requests"). So what `forget`
deleted can still be read from the database's files, and a row rewritten in place (migration
steps 010 and 012) costs its old bytes too. Only a copy gives them back: every definition and
row goes into a new database beside the old one (`store.copy_into`), which then takes the old
one's place at a reopen (memoryd/store/connection.py finishes a swap a crash cut short).

Migration step 013 compacts the database it has just rewritten; `memoryd compact` does it on
request, with the daemon stopped (the engine's lock is held by one process).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Collection
from pathlib import Path

from memoryd.config import Settings
from memoryd.embedded import daemon_pid
from memoryd.errors import MemorydError
from memoryd.store import Store
from memoryd.store.connection import replacement_of

log = logging.getLogger(__name__)

DB_DIR = "db"
# Rows copied per transaction.
_PAGE = 500


async def compact_files(store: Store, leave_out: Collection[str] = ()) -> dict[str, int]:
    """Copy the open database (but the tables in `leave_out`) into fresh files and put them in
    its place; rows copied per table. A copy cut short by a crash is started again; a finished
    one replaces the files at the reopen, or at the next open if the process dies before.
    Nothing to do for a database that is not embedded in files."""
    root = store.files
    if root is None:
        return {}
    building = root.with_name(root.name + ".compacting")
    await asyncio.to_thread(shutil.rmtree, building, True)
    copy = await Store.open(f"{store.url.split('://', 1)[0]}://{building}", *store.login)
    try:
        copied = await store.copy_into(copy, _PAGE, leave_out)
    finally:
        await copy.close()
    building.rename(replacement_of(root))
    await store.reopen()
    log.info("database copied into fresh files: %d rows", sum(copied.values()))
    return copied


async def compact(settings: Settings) -> dict[str, int]:
    """`memoryd compact`: the data dir's database compacted, its row counts checked against
    the original's; rows per table."""
    if settings.surreal_url is not None:
        raise MemorydError("compact rewrites the embedded database; this config uses a server")
    data = settings.data_dir
    if daemon_pid(data) is not None:
        raise MemorydError(f"a memoryd daemon still uses {data}: stop it, then compact")
    db = data / DB_DIR
    if not db.is_dir() and not replacement_of(db).is_dir():
        raise MemorydError(f"no database in {data}")
    store = await Store.open(
        settings.database_url, settings.surreal_namespace, settings.surreal_database
    )
    try:
        counts = await store.table_counts()
        copied = await compact_files(store)
        if await store.table_counts() != counts:
            raise MemorydError("the compacted copy holds other rows than the database had")
    finally:
        await store.close()
    return {table: rows for table, rows in copied.items() if rows}


def size(path: Path) -> int:
    """Bytes of the files under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
