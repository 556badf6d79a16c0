"""The `index_files` job: files -> tree-sitter chunks -> embeddings -> SurrealDB.

Pure planning (`plan_file`) is separate from the I/O (`index_files`), so the stage can be tested
on its own and the job stays a thin loop around the store.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from memoryd.scan import read_source, wanted
from workers.chunking import chunk_text, language_for_path

log = logging.getLogger(__name__)


def _digest(*parts: str) -> str:
    return blake3.blake3("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def file_entity_key(project_id: str, rel_path: str) -> str:
    """Canonical key of a file inside a watched project (shared with transcript ingestion)."""
    return f"{project_id}:{rel_path}"


def file_entity_id(project_id: str, rel_path: str) -> str:
    return _digest("file", file_entity_key(project_id, rel_path))


def file_state_id(project_id: str, rel_path: str) -> str:
    return _digest(project_id, rel_path)


@dataclass(slots=True)
class FilePlan:
    """What indexing one file's current content produces (no vectors yet)."""

    path: str
    chunks: list[dict[str, Any]]


def plan_file(
    project_id: str, rel_path: str, text: str, file_hash: str, max_chars: int
) -> FilePlan:
    """Chunk a file and give each chunk a deterministic id: project + path + content hash
    (+ occurrence number, so two identical chunks in one file stay two rows)."""
    language = language_for_path(rel_path)
    seen: dict[str, int] = {}
    rows = []
    entity_id = file_entity_id(project_id, rel_path)
    for chunk in chunk_text(text, language, max_chars=max_chars):
        content_hash = blake3.blake3(chunk.content.encode("utf-8", "surrogatepass")).hexdigest()
        occurrence = seen.get(content_hash, 0)
        seen[content_hash] = occurrence + 1
        rows.append(
            {
                "id": _digest(project_id, rel_path, content_hash, str(occurrence)),
                "entity_id": entity_id,
                "path": rel_path,
                "language": language,
                "chunk_type": chunk.chunk_type,
                "name": chunk.name,
                "parent_name": chunk.parent_name,
                "start_line": chunk.start_line,
                "end_line": chunk.end_line,
                "content": chunk.content,
                "content_hash": content_hash,
                "file_hash": file_hash,
            }
        )
    return FilePlan(rel_path, rows)


@dataclass(slots=True)
class IndexReport:
    files: int = 0
    indexed: int = 0
    unchanged: int = 0
    skipped: int = 0
    removed: int = 0
    chunks: int = 0
    embedded: int = 0
    retired: int = 0
    seconds: float = 0.0
    skips: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def _read(path: Path, max_bytes: int) -> tuple[os.stat_result | None, bytes | None, str | None]:
    """stat + read, turning every way a file can misbehave into a skip reason."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None, None, None
    except OSError as exc:  # permission denied, symlink loop, name too long
        return None, None, f"unreadable: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return info, None, "not a regular file"
    if info.st_size > max_bytes:
        return info, None, f"too large ({info.st_size} bytes)"
    try:
        return info, path.read_bytes(), None
    except FileNotFoundError:  # vanished between stat and read
        return None, None, None
    except OSError as exc:
        return info, None, f"unreadable: {exc.strerror or exc}"


async def index_files(ctx: dict[str, Any], project_id: str, root: str, paths: list[str]) -> dict:
    """Bring the index of these files up to date; missing files are retired."""
    started = time.perf_counter()
    store, embedder, settings = ctx["store"], ctx["embedder"], ctx["settings"]
    root_path = Path(root)
    report = IndexReport(files=len(paths))
    states = await store.file_states(project_id, paths)
    plans: list[FilePlan] = []
    file_rows: list[dict[str, Any]] = []
    gone: list[str] = []

    def record(
        rel: str,
        info: os.stat_result | None,
        file_hash: str | None,
        status: str,
        reason: str | None,
    ) -> None:
        file_rows.append(
            {
                "id": file_state_id(project_id, rel),
                "path": rel,
                "size": info.st_size if info else 0,
                "mtime_ns": info.st_mtime_ns if info else 0,
                "hash": file_hash,
                "status": status,
                "reason": reason,
            }
        )

    def forget(rel: str, reason: str) -> None:
        gone.append(rel)
        if rel in states and states[rel]["status"] != "deleted":
            record(rel, None, None, "deleted", reason)

    for rel in paths:
        if not wanted(root_path, rel):
            forget(rel, "ignored")  # newly ignored: its chunks no longer belong in the index
            continue
        info, raw, problem = await asyncio.to_thread(
            _read, root_path / rel, settings.max_file_bytes
        )
        if info is None and problem is None:
            forget(rel, "vanished")
            continue
        previous = states.get(rel)
        if problem is not None or raw is None:
            log.info("skip %s: %s", rel, problem)
            report.skipped += 1
            report.skips[rel] = problem or "unreadable"
            assert info is not None
            record(rel, info, None, "skipped", problem)
            gone.append(rel)
            continue
        assert info is not None
        if (
            previous
            and previous["size"] == info.st_size
            and previous["mtime_ns"] == info.st_mtime_ns
        ):
            report.unchanged += 1
            continue
        content = read_source(raw)
        if previous and previous.get("hash") == content.hash and previous["status"] == "indexed":
            report.unchanged += 1
            record(rel, info, content.hash, "indexed", None)
            continue
        if content.text is None:
            log.info("skip %s: %s", rel, content.skip_reason)
            report.skipped += 1
            report.skips[rel] = content.skip_reason or "not text"
            record(rel, info, content.hash, "skipped", content.skip_reason)
            gone.append(rel)
            continue
        plan = await asyncio.to_thread(
            plan_file, project_id, rel, content.text, content.hash, settings.chunk_max_chars
        )
        plans.append(plan)
        record(rel, info, content.hash, "indexed", None)
        report.indexed += 1

    chunks = [chunk for plan in plans for chunk in plan.chunks]
    await _attach_vectors(store, embedder, chunks, report)
    report.removed = sum(1 for row in file_rows if row["status"] == "deleted")
    changed_paths = [plan.path for plan in plans] + gone
    if changed_paths or file_rows:
        files = [
            {
                "entity_id": file_entity_id(project_id, p.path),
                "key": file_entity_key(project_id, p.path),
                "path": p.path,
            }
            for p in plans
        ]
        report.retired = await store.write_file_index(
            project_id, chunks, file_rows, files, changed_paths
        )
    report.chunks = len(chunks)
    report.seconds = round(time.perf_counter() - started, 3)
    log.info(
        "index_files %s: %d files, %d indexed, %d unchanged, %d skipped, %d removed, "
        "%d chunks (%d embedded), %d retired in %.2fs",
        project_id,
        report.files,
        report.indexed,
        report.unchanged,
        report.skipped,
        report.removed,
        report.chunks,
        report.embedded,
        report.retired,
        report.seconds,
    )
    return report.as_dict()


async def _attach_vectors(
    store: Any, embedder: Any, chunks: list[dict[str, Any]], report: IndexReport
) -> None:
    """Reuse vectors of content already embedded with this model; embed only the rest."""
    known = await store.vectors_by_hash((c["content_hash"] for c in chunks), embedder.model)
    missing: dict[str, str] = {}
    for chunk in chunks:
        if chunk["content_hash"] not in known:
            missing.setdefault(chunk["content_hash"], chunk["content"])
    if missing:
        vectors = await asyncio.to_thread(embedder.embed, list(missing.values()))
        known.update(zip(missing.keys(), vectors, strict=True))
        report.embedded = len(missing)
    for chunk in chunks:
        chunk["embedding"] = known[chunk["content_hash"]]
        chunk["embedding_model"] = embedder.model
