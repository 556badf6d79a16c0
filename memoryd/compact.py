"""`memoryd compact`: the embedded database written again with its live rows only.

The embedded engine (SurrealKV 0.21 in surrealdb-core 3.2) keeps the bytes of deleted values:
large values live in a value log (`db/vlog/`) that this build never rewrites, and it refuses
`ALTER SYSTEM COMPACT` ("does not support compaction requests"). So what `forget` deleted can
still be read from the database's files. Compacting copies every row, vectors included, into a
new database beside the old one, checks that every table holds as many rows, and puts the new
one in the old one's place; the old files are then deleted. The daemon must be stopped: the
engine's lock is held by one process.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from memoryd.config import Settings
from memoryd.embedded import daemon_pid
from memoryd.errors import MemorydError
from memoryd.migrate import migrate
from memoryd.store import Store

DB_DIR = "db"
# Rows copied per page.
_PAGE = 500


async def compact(settings: Settings) -> dict[str, int]:
    """Rewrite the data dir's database (see the module's docstring); rows per table."""
    if settings.surreal_url is not None:
        raise MemorydError("compact rewrites the embedded database; this config uses a server")
    data = settings.data_dir
    if daemon_pid(data) is not None:
        raise MemorydError(f"a memoryd daemon still uses {data}: stop it, then compact")
    db, fresh_dir, old_dir = data / DB_DIR, data / f"{DB_DIR}.compact", data / f"{DB_DIR}.old"
    if not db.is_dir():
        if old_dir.is_dir() and fresh_dir.is_dir():
            # A compact stopped between its two renames: the copy was complete and checked.
            fresh_dir.rename(db)
            shutil.rmtree(old_dir)
            return {}
        raise MemorydError(f"no database in {data}")
    shutil.rmtree(fresh_dir, ignore_errors=True)  # a copy an interrupted compact left
    names = (settings.surreal_namespace, settings.surreal_database)
    old = await Store.open(f"surrealkv://{db}", *names)
    try:
        fresh = await Store.open(f"surrealkv://{fresh_dir}", *names)
        try:
            copied = await _copy(old, fresh, settings)
            counts = await old.table_counts()
            if await fresh.table_counts() != counts:
                raise MemorydError("the compacted copy differs from the database; nothing changed")
        finally:
            await fresh.close()
    finally:
        await old.close()
    db.rename(old_dir)
    fresh_dir.rename(db)
    shutil.rmtree(old_dir)
    return copied


async def _copy(old: Store, fresh: Store, settings: Settings) -> dict[str, int]:
    # The schema first (tables, fields, types), as every start applies it; then every row,
    # the migration record too, so the copy knows the history of the original.
    await migrate(fresh, settings, None)
    copied: dict[str, int] = {}
    for table in await old.table_names():
        after: str | None = None
        while rows := await old.rows_after(table, after, _PAGE):
            copied[table] = copied.get(table, 0) + await fresh.import_rows(table, rows)
            after = str(rows[-1]["id"])
    return copied


def size(path: Path) -> int:
    """Bytes of the files under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
