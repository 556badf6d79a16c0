"""The migration sequence, one owner, one order: schema files (`schema/NNN_name.surql`, applied
at every start, idempotent) and data steps (Python, run once each, resumable), numbered in one
series. Other changes to stored data add a step here with the next number.

A new database records the data steps as done without running them (it holds nothing an earlier
memoryd wrote). Before the first data step that touches an existing database, the whole database is
exported to `<data dir>/backups/` (memoryd/database/export.py); each data step's row counts before
and after are compared (only the tables it declares may change) and recorded with it in
`schema_version`. A database that has a step this memoryd does not know was written by a newer
memoryd: it is refused with a clear message instead of being used half-understood.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memoryd.config import Settings
from memoryd.database.compact import compact_files
from memoryd.database.export import write_backup
from memoryd.dotted import resolve
from memoryd.errors import MemorydError
from memoryd.store import SCHEMA_DIR, VECTOR_TABLES, Store, key_of
from memoryd.vocabulary import (
    CODE_GRAPH_EDGES,
    FILE,
    MEMORY_ENTITY_EDGE_TABLES,
    MENTIONS,
    RESOLVED_BY,
    RETIRED_EDGE_TABLES,
)

log = logging.getLogger(__name__)

_NUMBERED = re.compile(r"^(\d{3})_\w+$")
# The rows migration step 029 writes: the code graph a file's text gives.
CODE_GRAPH_TABLES = (*(edge.table for edge in CODE_GRAPH_EDGES), "code_ref")


@dataclass(frozen=True, slots=True)
class DataStep:
    """``run`` must be safe to run again after a crash half-way (bounded batches that commit
    on their own, upserts). ``changes``: the tables whose row counts it may change."""

    number: int
    name: str
    run: Callable[[Store, Settings], Awaitable[None]]
    changes: tuple[str, ...]

    @property
    def step(self) -> str:
        return f"{self.number:03d}_{self.name}"


# Rows per batch of a data step (handed to the steps under workers/migrations too).
_PAGE = 500
# Sessions whose actions one query reads (two statements each).
_SESSIONS_PER_BATCH = 50


# SurrealDB's own search indexes, which an earlier memoryd defined and searched with. They
# grew linearly with the rows (seconds per query at 100k) and the full-text one alone was most
# of the table data; search runs on the derived indexes now (memoryd/searchindex).
_SURREAL_SEARCH_INDEXES = {
    "code_chunk": ("code_chunk_vec", "code_chunk_text"),
    "memory": ("memory_vec", "memory_text"),
    "goal": ("goal_vec", "goal_text"),
}


async def _drop_search_indexes(store: Store, _: Settings) -> None:
    await store.drop_indexes(_SURREAL_SEARCH_INDEXES)


async def _pack_vectors(store: Store, _: Settings) -> None:
    """Vectors as packed half floats (memoryd/store/base.py) instead of arrays of floats, a
    tenth of the bytes. Resumable: a packed row is left as it is."""
    tables = list(VECTOR_TABLES)
    await store.declare_packed_vectors(tables)
    for table in tables:
        if table not in await store.table_names():
            continue
        after = await store.pack_vectors_after(table, None, _PAGE)
        while after is not None:
            after = await store.pack_vectors_after(table, after, _PAGE)


async def _store_bodies(store: Store, _: Settings) -> None:
    """Long memory texts compressed, once each (memoryd/store/blobs.py; the table is schema
    011's). Resumable: a memory that names its blob is left as it is."""
    after = await store.store_bodies_after(None, _PAGE)
    while after is not None:
        after = await store.store_bodies_after(after, _PAGE)


async def _compact(store: Store, _: Settings) -> None:
    """The old bytes of the rows steps 010 and 012 rewrote leave the disk
    (memoryd/database/compact.py)."""
    await compact_files(store)


async def _drop_order_edges(store: Store, _: Settings) -> None:
    """The database copied into fresh files without the CONTAINS and NEXT edges (a third of
    its bytes): no transaction deletes them, which would hold all of them in memory at once.
    Resumable as `compact_files` is."""
    await compact_files(store, leave_out=RETIRED_EDGE_TABLES)


# What re-deriving edges rewrites. search_state: a changed memory kind moves the search
# generation (its row made then).
_REDERIVED = ("entity", *MEMORY_ENTITY_EDGE_TABLES, RESOLVED_BY.table, "search_state")


async def _anchor_notes(store: Store, _: Settings) -> None:
    """Agents' notes written before anchors (memoryd/anchors.py) get theirs: each file or
    symbol a note MENTIONS, with the hash of its code when the note was written (from the
    chunks the indexer kept; none when it holds none of that time). Resumable: a note given
    anchors (an empty list when it names no code) is not read again."""
    from memoryd.anchors import make_anchors

    after: str | None = None
    while notes := await store.unanchored_notes_after(after, _PAGE):
        anchors = {}
        for note in notes:
            at = note["event_time"]
            targets = [(e["kind"], e["key"]) for e in note.get("named") or []]
            chunks = await store.anchor_chunks([(kind, key, at) for kind, key in targets])
            anchors[key_of(note["id"])] = make_anchors(targets, chunks, at)
        await store.set_anchors(anchors)
        after = key_of(notes[-1]["id"])


async def _anchor_actions(store: Store, _: Settings) -> None:
    """Reads and edits stored before actions had anchors (memoryd/anchors.py) get their
    `code_hash`: the file's version the index kept of their time (none when it holds none).
    Resumable: an action given its hash is not read again."""
    from memoryd.anchors import anchor_actions

    sessions = await store.session_keys()
    for start in range(0, len(sessions), _SESSIONS_PER_BATCH):
        await anchor_actions(store, sessions[start : start + _SESSIONS_PER_BATCH])


async def _rehash_note_files(store: Store, _: Settings) -> None:
    """Notes' file anchors of before (the chunks' `file_hash`, which the indexer rewrites on
    chunks that outlive a change) become the digest actions keep (memoryd/anchors.py), each
    note's state as it was. Resumable: a digest is worked out to itself again."""
    from memoryd.anchors import rehashed

    after: str | None = None
    while notes := await store.anchored_notes_after(after, _PAGE):
        # One read of the chunks for the page's file anchors, in the order they are rewritten.
        files = [a for note in notes for a in note["anchors"] if a["kind"] == FILE]
        rows = await store.anchor_chunks([(FILE, a["key"], a["at"]) for a in files])
        hashes = iter([rehashed(a, r) for a, r in zip(files, rows, strict=True)])
        changed = {}
        for note in notes:
            anchors = note["anchors"]
            new = [a | {"hash": next(hashes)} if a["kind"] == FILE else a for a in anchors]
            if new != anchors:
                changed[key_of(note["id"])] = new
        await store.set_anchors(changed)
        after = key_of(notes[-1]["id"])


async def _rekey_note_mentions(store: Store, _: Settings) -> None:
    """Notes' MENTIONS edges, which an earlier memoryd keyed by a recipe of their own, get the
    key every other edge has (`Edge.row_id`): the same note remembered again is then the same
    edge, not a second one. Resumable: an edge with today's key is left as it is."""
    after: str | None = None
    while edges := await store.note_mentions_after(after, _PAGE):
        await store.rekey_mentions(
            {
                edge["id"]: new
                for edge in edges
                if (new := MENTIONS.row_id(edge["memory"], edge["kind"], edge["key"])) != edge["id"]
            }
        )
        after = edges[-1]["id"]


@dataclass(frozen=True, slots=True)
class WorkerStep:
    """A step that runs a worker's stage again over stored rows (workers/migrations/steps.py),
    named by its dotted path and loaded when it runs (memoryd/dotted.py says why)."""

    path: str

    async def __call__(self, store: Store, settings: Settings) -> None:
        await resolve(self.path)(store, settings, _PAGE)


# The data steps, in number order; numbers are shared with the schema files.
DATA_STEPS: tuple[DataStep, ...] = (
    DataStep(
        4,
        "scrub_secrets",
        WorkerStep("workers.migrations.steps.scrub_secrets"),
        changes=("code_chunk", "defined_in"),
    ),
    DataStep(5, "drop_search_indexes", _drop_search_indexes, changes=()),
    DataStep(
        9,
        "rederive_edges",
        WorkerStep("workers.migrations.steps.rederive_edges"),
        changes=_REDERIVED,
    ),
    DataStep(10, "pack_vectors", _pack_vectors, changes=()),
    DataStep(12, "store_bodies", _store_bodies, changes=("blob",)),
    DataStep(13, "compact", _compact, changes=()),
    DataStep(25, "drop_order_edges", _drop_order_edges, changes=RETIRED_EDGE_TABLES),
    DataStep(
        26,
        "rederive_edges_2",
        WorkerStep("workers.migrations.steps.rederive_edges_2"),
        changes=_REDERIVED,
    ),
    DataStep(
        27,
        "resolve_errors",
        WorkerStep("workers.migrations.steps.resolve_errors"),
        changes=(RESOLVED_BY.table,),
    ),
    DataStep(28, "anchor_notes", _anchor_notes, changes=()),
    DataStep(
        29,
        "codegraph_backfill",
        WorkerStep("workers.migrations.steps.backfill_code_graph"),
        changes=("entity", *CODE_GRAPH_TABLES),
    ),
    DataStep(31, "anchor_actions", _anchor_actions, changes=()),
    DataStep(32, "rehash_note_files", _rehash_note_files, changes=()),
    DataStep(33, "rekey_note_mentions", _rekey_note_mentions, changes=()),
)


def schema_files(schema_dir: Path = SCHEMA_DIR) -> list[Path]:
    return sorted(schema_dir.glob("*.surql"))


def _number(step: str) -> int | None:
    match = _NUMBERED.match(step)
    return int(match[1]) if match else None


async def migrate(
    store: Store,
    settings: Settings,
    backup_dir: Path | None,
    data_steps: tuple[DataStep, ...] = DATA_STEPS,
    schema_dir: Path = SCHEMA_DIR,
) -> list[str]:
    """Bring the database to this memoryd's schema; returns the steps newly recorded."""
    files = schema_files(schema_dir)
    known = {path.stem for path in files} | {step.step for step in data_steps}
    applied = await store.applied_steps()
    newest = max((n for n in map(_number, known) if n is not None), default=0)
    unknown = sorted(s for s in applied if s not in known and (_number(s) or 0) > newest)
    if unknown:
        raise MemorydError(
            f"this database was written by a newer memoryd (it has migration {unknown[-1]}, "
            f"this memoryd knows up to {newest:03d}): upgrade memoryd, or use another data dir"
        )
    existing = bool(applied)
    steps: list[tuple[int, Path | DataStep]] = [(int(p.stem[:3]), p) for p in files]
    steps += [(step.number, step) for step in data_steps]
    recorded: list[str] = []
    backed_up = False
    for _, step in sorted(steps, key=lambda s: s[0]):
        if isinstance(step, Path):
            text = step.read_text()
            checksum = hashlib.sha256(text.encode()).hexdigest()
            await store.apply_schema_text(text)
            if applied.get(step.stem) != checksum:
                await store.record_step(step.stem, step.name, checksum)
                recorded.append(step.name)
            continue
        if step.step in applied:
            continue
        if not existing:
            # A new database is made at today's schema: nothing stored earlier to change.
            await store.record_step(step.step, step.step, "data", {})
            recorded.append(step.step)
            continue
        if backup_dir is not None and not backed_up:
            await _backup(store, backup_dir, step)
            backed_up = True
        await _run_data_step(store, settings, step)
        recorded.append(step.step)
    return recorded


# What takes the secrets out of the rows a backup holds.
REDACT = "workers.stages.redact.redact"


async def _backup(store: Store, backup_dir: Path, step: DataStep) -> None:
    # A pure stage of workers/, named (memoryd/dotted.py says why).
    redact = resolve(REDACT)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = backup_dir / f"before-{step.step}-{stamp}.jsonl.zst"
    # A database from an earlier memoryd may hold secrets stored raw: the copy never does.
    rows = await write_backup(store, path, clean=redact)
    log.info("before migration %s: %d rows exported to %s", step.step, rows, path)


async def _run_data_step(store: Store, settings: Settings, step: DataStep) -> None:
    before = await store.table_counts()
    log.info("migration %s: running", step.step)
    await step.run(store, settings)
    after = await store.table_counts()
    changed = {t for t in set(before) | set(after) if before.get(t, 0) != after.get(t, 0)} - set(
        step.changes
    )
    if changed:
        raise MemorydError(
            f"migration {step.step} changed the row counts of {', '.join(sorted(changed))}, "
            "which it must not: the database was left as the step made it and the step is not "
            "recorded; the export taken before it is in the backups folder of the data dir"
        )
    counts = {t: {"before": before.get(t, 0), "after": after.get(t, 0)} for t in step.changes}
    await store.record_step(step.step, step.step, "data", counts)
    log.info("migration %s: done, %s", step.step, counts)
