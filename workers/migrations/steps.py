"""The data steps (memoryd/database/migrate.py) that run a worker's stage again over stored
rows: the secret scrub, the edges derived again from stored tool calls (rederive.py), the
failures' resolutions and the code graph of files indexed before it existed.
memoryd/database/migrate.py names them in its DATA_STEPS by dotted path, so memoryd never
imports workers/. Each takes the batch size memoryd/database/migrate.py pages by."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memoryd.config import Settings
from memoryd.store import Store
from workers.migrations.rederive import READ_AGAIN_2, rederive_all
from workers.resolutions import resolve_sessions
from workers.stages.codegraph import file_graph_of
from workers.stages.redact import SCRUB_FIELDS, scrub_rows

# The database engine merges its table files on every fourth reopen or so; the old versions of
# rewritten rows (secrets, in the scrub) are gone from disk only after such a merge.
_REOPENS_TO_MERGE = 5


async def scrub_secrets(store: Store, settings: Settings, page: int) -> None:
    """Redact, with today's detector, what an earlier memoryd stored raw: code chunks of each
    file and memories of each session in the order they were written (a value found once is
    redacted wherever it comes again there), then every other table with stored text. Their
    vectors were computed from the secrets: they are dropped and reembed computes them again.
    Code chunks of files that `secret_files` keeps out now are deleted; files with a changed
    chunk are read again at the next reconcile. Resumable: scrubbing scrubbed rows changes
    nothing."""
    globs = settings.secret_files
    for project, path in await store.chunk_files():
        done = scrub_rows("code_chunk", await store.file_chunks_plain(project, path), globs)
        await store.patch_rows("code_chunk", done.updates)
        await store.delete_rows("code_chunk", [str(key) for key in done.deletes])
        await store.forget_file_states((project, p) for _, p in done.reindex)
    for session in await store.session_keys():
        done = scrub_rows("memory", await store.session_memories_plain(session), globs)
        await store.patch_rows("memory", done.updates)
    for table in SCRUB_FIELDS:
        if table in ("code_chunk", "memory") or table not in await store.table_names():
            continue
        after: str | None = None
        while rows := await store.rows_after(table, after, page):
            await store.patch_rows(table, scrub_rows(table, rows, globs).updates)
            after = str(rows[-1]["id"])
    for _ in range(_REOPENS_TO_MERGE):
        await store.reopen()


async def rederive_edges(store: Store, settings: Settings, page: int) -> None:
    """Edges and entities of stored tool calls by today's extraction rules (rederive.py says
    from what): shell reads and writes become READS/MODIFIES, names that are no file go,
    failures get today's signatures. Resumable: a page done before is derived again from the
    same facts to the same edges."""
    await rederive_all(store, settings, page)


async def rederive_edges_2(store: Store, settings: Settings, page: int) -> None:
    """Issue 33's extraction rules on what every agent's transcripts still on disk made
    (approval refusals are DENIED, Gemini searches READS and failed exits, aider's output
    lines no file, paths with spaces, home paths, version tags…): step 9's re-reading, for
    Gemini CLI and aider too. Resumable as step 9 is."""
    await rederive_all(store, settings, page, READ_AGAIN_2)


async def resolve_errors(store: Store, _: Settings, __: int) -> None:
    """RESOLVED_BY edges (schema 018) for the failures stored before ingest wrote them, by
    the rule ingest uses (workers/resolutions.py). Resumable: the edges are upserts."""
    await resolve_sessions(store, await store.failed_sessions())


async def backfill_code_graph(store: Store, _: Settings, page: int) -> None:
    """The code graph (schema 019) of the files indexed before it existed: each indexed file
    is read from its project's root and its graph rows written (a file changed or gone since
    is indexed again by the next reconcile, which replaces them). Resumable: a page written
    twice writes the same rows."""
    for project in await store.projects():
        paths = await store.indexed_paths(project["id"])
        for start in range(0, len(paths), page):
            graph = await asyncio.to_thread(
                file_graph_of, project["id"], Path(project["root"]), paths[start : start + page]
            )
            await store.write_graph(project["id"], graph)
