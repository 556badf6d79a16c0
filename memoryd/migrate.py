"""The migration sequence, one owner, one order: schema files (`schema/NNN_name.surql`, applied
at every start, idempotent) and data steps (Python, run once each, resumable), numbered in one
series. Other changes to stored data add a step here with the next number.

Before the first data step that touches an existing database, the whole database is exported
to `<data dir>/backups/` (memoryd/export.py); each data step's row counts before and after are
compared (only the tables it declares may change) and recorded with it in `schema_version`. A
database that has a step this memoryd does not know was written by a newer memoryd: it is
refused with a clear message instead of being used half-understood.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memoryd.errors import MemorydError
from memoryd.export import write_backup
from memoryd.store import SCHEMA_DIR, Store

log = logging.getLogger(__name__)

_NUMBERED = re.compile(r"^(\d{3})_\w+$")


@dataclass(frozen=True, slots=True)
class DataStep:
    """``run`` must be safe to run again after a crash half-way (bounded batches that commit
    on their own, upserts). ``changes``: the tables whose row counts it may change."""

    number: int
    name: str
    run: Callable[[Store], Awaitable[None]]
    changes: tuple[str, ...]

    @property
    def step(self) -> str:
        return f"{self.number:03d}_{self.name}"


# The data steps, in number order; numbers are shared with the schema files.
DATA_STEPS: tuple[DataStep, ...] = ()


def schema_files(schema_dir: Path = SCHEMA_DIR) -> list[Path]:
    return sorted(schema_dir.glob("*.surql"))


def _number(step: str) -> int | None:
    match = _NUMBERED.match(step)
    return int(match[1]) if match else None


async def migrate(
    store: Store,
    dim: int,
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
    if existing:
        await store.fit_vector_indexes(dim)
    steps: list[tuple[int, Path | DataStep]] = [(int(p.stem[:3]), p) for p in files]
    steps += [(step.number, step) for step in data_steps]
    recorded: list[str] = []
    backed_up = False
    for _, step in sorted(steps, key=lambda s: s[0]):
        if isinstance(step, Path):
            text = step.read_text().replace("{{dim}}", str(dim))
            checksum = hashlib.sha256(text.encode()).hexdigest()
            await store.apply_schema_text(text)
            if applied.get(step.stem) != checksum:
                await store.record_step(step.stem, step.name, checksum)
                recorded.append(step.name)
            continue
        if step.step in applied:
            continue
        if existing and backup_dir is not None and not backed_up:
            await _backup(store, backup_dir, step)
            backed_up = True
        await _run_data_step(store, step)
        recorded.append(step.step)
    return recorded


async def _backup(store: Store, backup_dir: Path, step: DataStep) -> None:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = backup_dir / f"before-{step.step}-{stamp}.jsonl.zst"
    rows = await write_backup(store, path)
    log.info("before migration %s: %d rows exported to %s", step.step, rows, path)


async def _run_data_step(store: Store, step: DataStep) -> None:
    before = await store.table_counts()
    log.info("migration %s: running", step.step)
    await step.run(store)
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
