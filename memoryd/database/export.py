"""Writing the database out as JSON lines: the copy kept before a migration touches a data dir
(and the format of `memoryd export`). One line per row: {"table": …, "row": {…}}; record
references are written `table:key`, times ISO-8601. Vectors are left out: they are derived
(re-embedding gives them back), and they are most of the bytes."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import zstandard

_PAGE = 500
# Where the backups taken before a migration are kept, in the data dir.
BACKUPS = "backups"
DERIVED_FIELDS = frozenset({"embedding"})


class _Rows(Protocol):
    async def table_names(self) -> list[str]: ...

    async def rows_after(
        self, table: str, after: str | None, batch: int
    ) -> list[dict[str, object]]: ...


async def write_jsonl(
    store: _Rows,
    out: IO[bytes],
    tables: Sequence[str] | None = None,
    clean: Callable[[str], str] | None = None,
) -> int:
    """Every row of `tables` (all by default; blobs never: memories are written with their
    whole text), a page at a time; returns the rows written.
    `clean` rewrites every string value on its way out (the redactor: no secret a database
    may still hold from an earlier memoryd is copied into an export)."""
    written = 0
    if tables is None:
        # Only the process holding the database lists the tables itself: the client (which
        # names them) must not load the store and its SDK.
        from memoryd.store.blobs import BLOB_TABLE

        tables = [t for t in await store.table_names() if t != BLOB_TABLE]
    for table in tables:
        after: str | None = None
        while rows := await store.rows_after(table, after, _PAGE):
            for row in rows:
                kept = {k: v for k, v in row.items() if k not in DERIVED_FIELDS}
                if clean is not None:
                    kept = cleaned_row(kept, clean)
                line = json.dumps({"table": table, "row": kept}, ensure_ascii=False)
                out.write(line.encode() + b"\n")
            written += len(rows)
            after = str(rows[-1]["id"])
    return written


def read_jsonl(path: Path) -> Iterator[dict[str, object]]:
    """The lines of an export (`memoryd export`) or a backup (zstd), one at a time."""
    with open(path, "rb") as raw:
        stream: IO[bytes] = raw
        if path.suffix == ".zst":
            stream = zstandard.ZstdDecompressor().stream_reader(raw)  # type: ignore[assignment]
        for line in io.TextIOWrapper(stream, encoding="utf-8"):
            if line.strip():
                yield json.loads(line)


def cleaned_row(row: dict[str, Any], clean: Callable[[str], str]) -> dict[str, Any]:
    """`row` with `clean` applied to every string in it but its id (the key pages go by)."""
    return {k: v if k == "id" else _cleaned(v, clean) for k, v in row.items()}


def _cleaned(value: Any, clean: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {k: _cleaned(v, clean) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleaned(v, clean) for v in value]
    return value


@contextlib.contextmanager
def _backup_file(path: Path) -> Iterator[IO[bytes]]:
    """A zstd stream to `path` (0600), written under a temporary name and renamed at the end,
    so a crash never leaves a half backup looking whole."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as out:
        yield out  # type: ignore[misc]
    os.replace(partial, path)


async def write_backup(store: _Rows, path: Path, clean: Callable[[str], str] | None = None) -> int:
    """A zstd-compressed export at `path`."""
    with _backup_file(path) as out:
        return await write_jsonl(store, out, clean=clean)


def drop_from_backups(directory: Path, doomed: Callable[[str, dict[str, Any]], bool]) -> int:
    """Write every backup in `directory` again without the rows (table, row) that are
    `doomed` (what `memoryd forget` removed: a backup must not give it back); returns the
    rows dropped."""
    dropped = 0
    for path in sorted(directory.glob("*.jsonl.zst")) if directory.is_dir() else []:
        with _backup_file(path) as out:
            for line in read_jsonl(path):
                if doomed(str(line["table"]), line["row"]):  # type: ignore[arg-type]
                    dropped += 1
                else:
                    out.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
    return dropped
