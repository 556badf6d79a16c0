"""The `index_files` job: files -> tree-sitter chunks -> SurrealDB and the search indexes;
then the `embed_chunks` job (workers/vectors.py): their vectors.

Indexing comes in two phases so a large tree is searchable by words long before the model has
got through it: a chunk is written (and indexed for BM25) at once, with the vector of content
already embedded when there is one, else marked as owing a vector of the configured model
(`embedding_model` set, `embedding` none). Each index job then queues one `embed_chunks` job
for what it left owing; hybrid search uses each batch of vectors as it lands. A crash between
the two phases leaves rows that owe a vector: the daemon's start queues a job for all of them
(Runtime.serve), and the scheduled `reembed` finds them too.

Pure planning (`plan_file`) is separate from the I/O (`index_files`), so the stage can be tested
on its own and the job stays a thin loop around the store.

What a file costs: a file whose size and mtime match its stored `file_state` costs one `stat`
(it is not opened); a file whose content hash matches costs one read and one hash; only a
changed file is chunked, and only chunks whose content hash has no vector yet are embedded.

Every way a file can misbehave (binary, too large, minified, generated, not a regular file,
unreadable, a symlink loop, gone before it was read, a chunker failure) is one log line and a
`skipped` state for that file; the other files of the batch are not affected.

Concurrent jobs for one file (two workers, or a burst cut in two) may finish in either order,
so after writing, each file is checked against the disk once more: one that changed while it
was being indexed is indexed again, so the last write always describes the file as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import blake3

from memoryd import queue
from memoryd.errors import JobFailed
from memoryd.ids import (
    file_entity_id,
    file_key,
    file_state_id,
)
from memoryd.scan import (
    SECRET_FILE,
    generated_by_name,
    not_regular,
    read_source,
    secret_file,
    wanted_paths,
)
from memoryd.searchindex.indexsync import IndexSync
from memoryd.store import QueryFailed
from workers.context import JobContext
from workers.stages.chunking import language_for_path, parse
from workers.stages.codegraph import DiskTree, GraphRows, file_graph
from workers.stages.codegraph.extract import GRAPH_LANGUAGES
from workers.stages.file_plan import FilePlan, plan_file
from workers.stages.reader import MANY_FILES
from workers.vectors import embed_chunks

log = logging.getLogger(__name__)

# A file modified this close to the moment it was read may be modified again within the same
# clock tick without its mtime changing ("racy" in git's words). Its state is stored with
# mtime 0, so the next look hashes it instead of trusting size and mtime.
RACY_NS = 100_000_000
# Rounds of index-then-verify in one job before the rest is handed to a follow-up job.
_ROUNDS = 3
_FOLLOW_UPS = 3


@dataclass(slots=True)
class IndexReport:
    """Each of the `files` is counted once, by what became of it in the end: indexed,
    unchanged, skipped, removed (its rows retired) or untracked (nothing on disk to index and
    nothing stored: an editor's or `sed -i`'s temp file renamed away, an ignored path)."""

    files: int = 0
    indexed: int = 0
    unchanged: int = 0
    skipped: int = 0
    removed: int = 0
    untracked: int = 0
    chunks: int = 0
    embedded: int = 0  # texts this job embedded (only without a queue: else `embed_job` does)
    owed: int = 0  # chunks written without a vector, left to `embed_job`
    embed_job: str | None = None
    retired: int = 0
    reindexed: int = 0  # files that changed while being indexed, indexed again
    requeued: int = 0  # files still changing after every round, handed to a follow-up job
    failed: int = 0  # files whose rows the database refused (logged)
    last_error: str | None = None  # the last of those refusals
    seconds: float = 0.0
    skips: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # path -> the database's refusal

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


class _Skip(Exception):
    """A file that is there but is not indexed; the message is the reason."""


def _check(info: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise _Skip(not_regular(info.st_mode))
    if info.st_size > max_bytes:
        raise _Skip(f"too large ({info.st_size} bytes, limit {max_bytes})")


def _read_bytes(path: Path, max_bytes: int) -> tuple[os.stat_result, bytes]:
    """The file's bytes and the stat of what was opened. O_NONBLOCK: a FIFO put in a file's
    place between stat and open cannot hang the worker."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        _check(info, max_bytes)
        parts: list[bytes] = []
        total = 0
        while block := os.read(fd, 1 << 20):
            parts.append(block)
            total += len(block)
            if total > max_bytes:  # grew while being read
                raise _Skip(f"too large (over {max_bytes} bytes)")
        return info, b"".join(parts)
    finally:
        os.close(fd)


def _unreadable(exc: OSError) -> str:
    return f"unreadable: {exc.strerror or exc}"


@dataclass(slots=True)
class _Look:
    """What one file looked like to this job, and what the job does about it."""

    rel: str
    action: str  # ignored | vanished | unchanged | same | skipped | indexed
    info: os.stat_result | None = None
    hash: str | None = None
    reason: str | None = None
    plan: FilePlan | None = None
    racy: bool = False
    replaced: bool = False


def _trusted(
    previous: dict[str, Any] | None, info: os.stat_result, max_bytes: int, secret: str | None
) -> bool:
    """The stored state still describes the file: same size and mtime, and the outcome could
    not differ (a file that was unreadable or too large is looked at again, and so is one whose
    `secret_files` verdict changed: `secret` is the current one)."""
    if not previous or previous["status"] == "deleted":
        return False
    if previous["size"] != info.st_size or previous["mtime_ns"] != info.st_mtime_ns:
        return False
    reason = previous.get("reason") or ""
    if previous["status"] == "skipped" and reason.startswith(SECRET_FILE):
        return reason == secret
    if secret is not None:
        return False
    if previous["status"] == "skipped" and reason.startswith("unreadable"):
        return False  # permissions are fixed without touching mtime
    return not (reason.startswith("too large") and info.st_size <= max_bytes)


def _look(
    root: Path,
    rel: str,
    previous: dict[str, Any] | None,
    project_id: str,
    max_bytes: int,
    max_chars: int,
    max_chunks: int,
    wanted: bool,
    secret_globs: list[str],
    batch: int,
) -> _Look:
    """Everything this job does with one file on disk (runs in a thread, or the reader's
    process). `wanted`: the ignore rules keep it (decided for the whole job at once); `batch`:
    the round of the job it is read in, whose files share what the disk holds."""
    if not wanted:
        return _Look(rel, "ignored")
    path = root / rel
    if _points_outside(root, path):
        return _Look(rel, "skipped", reason="a symlink to outside the repository")
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():  # there, pointing at nothing: skipped, not gone
            return _Look(rel, "skipped", reason=f"a symlink to nothing ({os.readlink(path)})")
        return _Look(rel, "vanished", reason="deleted")
    except OSError as exc:  # permission denied on a directory, a symlink loop, name too long
        return _Look(rel, "skipped", reason=_unreadable(exc))
    if stat.S_ISDIR(info.st_mode):
        if path.is_symlink():  # not followed: what it points at inside is indexed there
            return _Look(rel, "skipped", reason="a symlink to a directory (not followed)")
        return _Look(rel, "vanished", reason="a directory now")  # the file is gone
    secret = secret_file(rel, secret_globs)
    if _trusted(previous, info, max_bytes, secret):
        return _Look(rel, "unchanged", info)
    if secret is not None:  # never opened
        return _Look(rel, "skipped", info, reason=secret)
    if (generated := generated_by_name(rel)) is not None:  # never opened either
        return _Look(rel, "skipped", info, reason=generated)
    started = time.time_ns()
    try:
        _check(info, max_bytes)
        info, raw = _read_bytes(path, max_bytes)
    except FileNotFoundError:  # deleted between the event (or the stat) and the read
        return _Look(rel, "vanished", reason="deleted before it was read")
    except _Skip as skip:
        return _Look(rel, "skipped", info, reason=str(skip))
    except OSError as exc:
        return _Look(rel, "skipped", info, reason=_unreadable(exc))
    content = read_source(raw)
    racy = abs(started - info.st_mtime_ns) < RACY_NS
    look = _Look(rel, "indexed", info, content.hash, racy=racy, replaced=content.replaced)
    if previous and previous.get("hash") == content.hash and previous["status"] == "indexed":
        look.action = "same"
        return look
    if content.text is None:
        look.action, look.reason = "skipped", content.skip_reason or "not text"
        return look
    try:
        # One parse for the chunker and the code graph: parsing again cost as much as a third
        # of the graph's extraction.
        language = language_for_path(rel)
        parsed = parse(content.text, language) if language in GRAPH_LANGUAGES else None
        look.plan = plan_file(project_id, rel, content.text, content.hash, max_chars, parsed)
        # The code graph, resolved against the tree on disk (workers/stages/codegraph).
        look.plan.graph = file_graph(
            project_id, root, rel, content.text, language, _tree_of(root, batch), parsed
        )
    except Exception as exc:  # a chunker bug must not cost the rest of the batch
        look.action, look.reason = "skipped", f"chunking failed: {type(exc).__name__}: {exc}"
    if look.plan is not None and len(look.plan.chunks) > max_chunks:
        look.action = "skipped"
        look.reason = f"{len(look.plan.chunks)} chunks, over max_file_chunks ({max_chunks})"
        look.plan = None
    return look


# The files of the round being read, as imports resolve against them, in the process that reads
# it: one per round (an import's candidate paths are stat'ed once for the round, not per file),
# never kept past it (a later round sees files added since).
_TREES: dict[tuple[Path, int], DiskTree] = {}


def _tree_of(root: Path, batch: int) -> DiskTree:
    tree = _TREES.get((root, batch))
    if tree is None:
        _TREES.clear()
        tree = _TREES[(root, batch)] = DiskTree(root)
    return tree


def _points_outside(root: Path, path: Path) -> bool:
    """A symlink whose target is outside the tree (git keeps the link, not what it points at;
    following it could index anything on the machine). Loops and dangling links are left to
    `stat`, which says what is wrong with them."""
    if not path.is_symlink():
        return False
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return not target.is_relative_to(root.resolve())


def _signature(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns)


def _changed_since(root: Path, look: _Look, max_bytes: int) -> bool:
    """Whether the file on disk differs from what this job just wrote about it."""
    path = root / look.rel
    if look.action == "skipped" and look.info is None:
        # Skipped before any stat worked (a link out of the tree, a loop, a locked directory):
        # changed when the reason would be another now.
        return _reason_without_stat(root, path) != look.reason
    try:
        info = path.stat()
    except FileNotFoundError:
        return look.info is not None
    except OSError as exc:
        return not (look.action == "skipped" and look.reason == _unreadable(exc))
    if stat.S_ISDIR(info.st_mode):
        return look.action != "vanished"
    if look.info is None:
        return True
    same_stat = _signature(info) == _signature(look.info)
    racy = abs(time.time_ns() - info.st_mtime_ns) < RACY_NS
    if same_stat and not racy:
        return False
    if look.hash is None:
        return not same_stat
    try:
        _, raw = _read_bytes(path, max_bytes)
    except (OSError, _Skip):
        return True
    return blake3.blake3(raw).hexdigest() != look.hash


def _reason_without_stat(root: Path, path: Path) -> str | None:
    if _points_outside(root, path):
        return "a symlink to outside the repository"
    try:
        path.stat()
    except OSError as exc:
        return _unreadable(exc)
    return None


def _changed_files(root: Path, looks: list[_Look], max_bytes: int) -> list[str]:
    return [look.rel for look in looks if _changed_since(root, look, max_bytes)]


@dataclass(slots=True)
class _Rows:
    """The rows of one file, so a batch the database refuses can be written file by file."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    states: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    symbols: list[dict[str, Any]] = field(default_factory=list)
    retire: list[str] = field(default_factory=list)
    graph: list[GraphRows] = field(default_factory=list)
    since: dict[str, datetime] = field(default_factory=dict)


def _version_time(info: os.stat_result, previous: dict[str, Any] | None) -> datetime:
    """When the file came to hold the content read: its mtime, not when the index wrote it.
    An edit's anchor is the first version at or after the edit (memoryd/anchors.py); a version
    read before the agent's next edit but written after it would otherwise pass for what that
    edit left. Never before the version the index holds (a copy that kept an old mtime) nor
    after now (a clock ahead)."""
    held = datetime.fromtimestamp(info.st_mtime_ns / 1e9, UTC)
    if previous is not None and previous.get("indexed_at") is not None:
        held = max(held, previous["indexed_at"])
    return min(held, datetime.now(UTC))


def _rows_for(project_id: str, look: _Look, previous: dict[str, Any] | None) -> _Rows | None:
    rows = _Rows()

    def state(status: str, reason: str | None) -> dict[str, Any]:
        info = look.info
        return {
            "id": file_state_id(project_id, look.rel),
            "path": look.rel,
            "size": info.st_size if info else 0,
            "mtime_ns": 0 if info is None or look.racy else info.st_mtime_ns,
            "hash": look.hash,
            "status": status,
            "reason": reason,
        }

    if look.action == "unchanged":
        return None
    if look.action in ("ignored", "vanished"):
        if not previous or previous["status"] == "deleted":
            return None  # never indexed (an editor's temp file), or already retired
        rows.retire.append(look.rel)
        rows.states.append(state("deleted", look.reason or look.action))
        return rows
    if look.action == "skipped":
        rows.retire.append(look.rel)
        rows.states.append(state("skipped", look.reason))
        return rows
    rows.states.append(state("indexed", None))
    if look.action == "indexed" and look.plan is not None and look.info is not None:
        rows.retire.append(look.rel)
        rows.since[look.rel] = _version_time(look.info, previous)
        rows.chunks = look.plan.chunks
        rows.symbols = look.plan.symbols
        rows.graph = [look.plan.graph] if look.plan.graph is not None else []
        # An empty file gets no entity: nothing is DEFINED_IN it, and prune would take it for
        # an orphan. A session that touches the file still creates it.
        if look.plan.chunks:
            rows.files.append(
                {
                    "entity_id": file_entity_id(project_id, look.rel),
                    "key": file_key(project_id, look.rel),
                    "path": look.rel,
                }
            )
    return rows


def _log_look(look: _Look, previous: dict[str, Any] | None) -> None:
    """One line for each file that is not simply indexed; repeats of a known skip stay quiet."""
    known = previous is not None and previous["status"] != "deleted"
    if look.action == "skipped":
        again = (
            previous is not None
            and previous["status"] == "skipped"
            and previous.get("reason") == look.reason
        )
        log.log(logging.DEBUG if again else logging.INFO, "skip %s: %s", look.rel, look.reason)
    elif look.action == "vanished":
        level = logging.INFO if known else logging.DEBUG  # else: an editor's temp file
        log.log(level, "%s: %s; its chunks are retired", look.rel, look.reason)
    elif look.action == "ignored" and known:
        log.info("%s is ignored now; its chunks are retired", look.rel)
    elif look.action == "indexed" and look.replaced:
        log.info("%s is not valid UTF-8: bad bytes replaced, the rest indexed", look.rel)


async def index_files(
    ctx: JobContext,
    project_id: str,
    root: str,
    paths: list[str],
    generation: int = 0,
    progress: str | None = None,
) -> dict:
    """Bring the index of these files up to date; missing files are retired. `generation`
    counts follow-up jobs for files that kept changing while being indexed. `progress`: the
    whole-project sync this job is part of, whose progress it advances."""
    store = ctx["store"]
    if "redis" in ctx:
        # A sync started after this job was queued (a restart after a crash) may have taken
        # it over: then its files count there, not in the sync that queued it.
        progress = await queue.claim_files(ctx["redis"], project_id, paths, ctx["job_id"]) or (
            progress
        )
    try:
        report = await _index_files(ctx, project_id, Path(root), paths, generation)
    except Exception as exc:
        if progress is not None:
            with contextlib.suppress(Exception):  # the job's own error is the one to raise
                await store.fail_progress(project_id, progress, f"{type(exc).__name__}: {exc}")
        raise
    if progress is not None:
        try:
            done = await store.advance_progress(
                project_id, progress, report.files, report.chunks, report.last_error
            )
        except QueryFailed as exc:  # the files are indexed: only the account of it is lost
            log.warning("progress of %s not counted: %s", project_id, exc)
            done = None
        if done is not None:
            seconds = (done["finished_at"] - done["started_at"]).total_seconds()
            log.info(
                "initial index of %s done: %d files, %d chunks in %.0fs%s",
                project_id,
                done["files_total"],
                done["chunks"],
                seconds,
                f"; last error: {done['last_error']}" if done["last_error"] else "",
            )
    return report.as_dict()


async def _index_files(
    ctx: JobContext, project_id: str, root_path: Path, paths: list[str], generation: int
) -> IndexReport:
    started = time.perf_counter()
    settings = ctx["settings"]
    pending = list(dict.fromkeys(paths))
    report = IndexReport(files=len(pending))
    if "redis" in ctx and await queue.paused_since(ctx["redis"]):
        log.info("capture is paused: %d files of %s left alone", len(paths), project_id)
        return report
    outcomes: dict[str, str] = {}  # what became of each file, by the last round that changed it
    owed: list[str] = []  # chunks written without a vector
    for round_number in range(_ROUNDS):
        looks = await _index_round(ctx, project_id, root_path, pending, report, outcomes, owed)
        written = [look for look in looks if look.action not in ("unchanged", "ignored")]
        changed = await asyncio.to_thread(
            _changed_files, root_path, written, settings.max_file_bytes
        )
        if not changed:
            break
        if round_number + 1 < _ROUNDS:
            log.info("%d files changed while being indexed; indexing them again", len(changed))
            report.reindexed += len(changed)
        pending = changed
    else:
        redis = ctx.get("redis")
        if generation >= _FOLLOW_UPS:
            # The watcher sends a job for each real change; a file that never looks the same
            # twice must not keep the queue busy forever.
            log.warning(
                "%d files still changing after %d follow-up jobs: %s",
                len(pending),
                generation,
                ", ".join(pending[:5]),
            )
        elif redis is not None:
            log.info("%d files keep changing; a follow-up job will index them", len(pending))
            await queue.enqueue_index(
                redis,
                project_id,
                root_path,
                pending,
                settings.index_batch_files,
                fresh=True,
                generation=generation + 1,
            )
            report.requeued = len(pending)
    for outcome in outcomes.values():
        setattr(report, outcome, getattr(report, outcome) + 1)
    if owed:
        await _embed_after(ctx, owed, report)
    report.seconds = round(time.perf_counter() - started, 3)
    log.info(
        "index_files %s: %d files: %d indexed, %d unchanged, %d skipped, %d removed, "
        "%d untracked, %d failed; %d chunks (%d embedded, %d left to embed), %d retired in %.2fs",
        project_id,
        report.files,
        report.indexed,
        report.unchanged,
        report.skipped,
        report.removed,
        report.untracked,
        report.failed,
        report.chunks,
        report.embedded,
        report.owed,
        report.retired,
        report.seconds,
    )
    if report.failed and not (report.indexed or report.removed):
        # Not a success with a footnote: nothing this job had to store was stored.
        raise JobFailed(
            f"none of the {report.failed} files to store could be stored ({report.last_error})"
        )
    return report


def _written_since_queued(previous: dict[str, Any] | None, ctx: JobContext) -> bool:
    """Whether the file's stored version was indexed after this job was queued: by an earlier
    try of it, or (in a daemon) by another job that took up the same edit first. Either way
    what was asked is done since the asking, and the report says so."""
    queued = ctx.get("enqueue_time")
    if queued is None or previous is None or previous.get("status") != "indexed":
        return False
    written: datetime | None = previous.get("indexed_at")
    return written is not None and written >= queued.replace(tzinfo=queued.tzinfo or UTC)


def _outcome(look: _Look, rows: _Rows | None) -> str:
    """Which count of IndexReport a file's look lands in."""
    if look.action in ("unchanged", "same"):
        return "unchanged"
    if look.action in ("skipped", "indexed"):
        return look.action
    return "removed" if rows is not None else "untracked"  # ignored or vanished


async def _index_round(
    ctx: JobContext,
    project_id: str,
    root: Path,
    paths: list[str],
    report: IndexReport,
    outcomes: dict[str, str],
    owed: list[str],
) -> list[_Look]:
    store, embedder, settings = ctx["store"], ctx["embedder"], ctx["settings"]
    states = await store.code_file_states(project_id, paths)
    keep = await asyncio.to_thread(wanted_paths, root, paths)
    # What the config keeps out (`exclude`, `include`) is never read: as if ignored.
    keep = {rel for rel in keep if settings.remembers(root / rel)}
    looks: list[_Look] = []
    groups: dict[str, _Rows] = {}
    earlier: list[str] = []  # unchanged since an earlier try of this job indexed them
    # A job of many files reads them in the reader's process (workers/stages/reader.py).
    reader = ctx.get("reader") if len(paths) >= MANY_FILES else None
    batch = time.monotonic_ns()  # this round, for `_tree_of`
    for rel in paths:
        previous = states.get(rel)
        args = (
            root,
            rel,
            previous,
            project_id,
            settings.max_file_bytes,
            settings.chunk_max_chars,
            settings.max_file_chunks,
            rel in keep,
            settings.secret_files,
            batch,
        )
        look = await (reader.run(_look, *args) if reader else asyncio.to_thread(_look, *args))
        looks.append(look)
        _log_look(look, previous)
        rows = _rows_for(project_id, look, previous)
        if rows is not None:
            groups[rel] = rows
        outcome = _outcome(look, rows)
        if outcome == "unchanged" and rel not in outcomes and _written_since_queued(previous, ctx):
            earlier.append(rel)
        # A later round finding what an earlier one wrote unchanged keeps the earlier word.
        outcomes[rel] = outcomes.get(rel, outcome) if outcome == "unchanged" else outcome
        if look.action == "skipped":
            report.skips[rel] = look.reason or "skipped"
        else:
            report.skips.pop(rel, None)
    if earlier:
        # Written by a try of this job that a stop or a Redis restart cut short: its rerun
        # reports them as that try would have, so that the command's report stays whole.
        report.chunks += sum((await store.valid_chunk_counts(project_id, earlier)).values())
        outcomes.update(dict.fromkeys(earlier, "indexed"))
    refused_before = set(report.failures)
    for part in _parts(groups, settings.index_write_chunks):
        chunks = [chunk for rows in part.values() for chunk in rows.chunks]
        before = [chunk for rel, rows in part.items() if rel in states for chunk in rows.chunks]
        owed += await _reuse_vectors(store, embedder.model, chunks, before)
        report.chunks += len(chunks)
        report.retired += await _write(ctx["search"], project_id, part, report)
    for rel in report.failures.keys() - refused_before:
        # Refused by the database: counted failed, not as what it was planned to be.
        outcomes[rel] = "failed"
        report.chunks -= len(groups[rel].chunks)
    return looks


def _parts(groups: dict[str, _Rows], max_chunks: int) -> Iterator[dict[str, _Rows]]:
    """The files in order, in parts of at most `max_chunks` chunks (a file is never split;
    max_file_chunks bounds a single file), each embedded and written on its own."""
    part: dict[str, _Rows] = {}
    size = 0
    for rel, rows in groups.items():
        if part and size + len(rows.chunks) > max_chunks:
            yield part
            part, size = {}, 0
        part[rel] = rows
        size += len(rows.chunks)
    if part:
        yield part


async def _write(
    search: IndexSync, project_id: str, groups: dict[str, _Rows], report: IndexReport
) -> int:
    """The whole part in one transaction, then in the search indexes. Should the database
    refuse it (a statement error, not a lost connection: that fails the job, and arq retries
    it), file by file, so one bad file costs only itself."""

    def merged(parts: list[_Rows]) -> tuple[Any, ...]:
        return (
            [c for r in parts for c in r.chunks],
            [s for r in parts for s in r.states],
            [f for r in parts for f in r.files],
            [p for r in parts for p in r.retire],
            [s for r in parts for s in r.symbols],
            [g for r in parts for g in r.graph],
            {p: t for r in parts for p, t in r.since.items()},
        )

    batches = [list(groups.items())]
    retired = 0
    while batches:
        batch = batches.pop()
        try:
            written = await search.write_file_index(
                project_id, *merged([rows for _, rows in batch])
            )
            retired += len(written.retired)
        except QueryFailed as exc:
            if len(batch) == 1:
                log.warning("cannot store %s: %s", batch[0][0], exc)
                report.failures[batch[0][0]] = str(exc)
                report.last_error = f"cannot store {batch[0][0]}: {exc}"
            else:
                log.warning(
                    "a batch of %d files was refused (%s); writing file by file", len(batch), exc
                )
                batches.extend([item] for item in batch)
    return retired


async def _reuse_vectors(
    store: Any, model: str, chunks: list[dict[str, Any]], before: list[dict[str, Any]]
) -> list[str]:
    """Give chunks the vectors of content already embedded with this model, looked up for
    `before`, the chunks of files indexed before (an unchanged chunk keeps its row and must
    keep its vector); the others are marked as owing one, and the embed job that follows
    looks theirs up before it embeds (moved code). Returns the ids of those.

    A first index thus asks nothing here: that lookup was a sixth of its database time."""
    known = await store.vectors_by_hash((c["content_hash"] for c in before), model)
    for chunk in chunks:
        chunk["embedding"] = known.get(chunk["content_hash"])
        chunk["embedding_model"] = model
    return [chunk["id"] for chunk in chunks if chunk["embedding"] is None]


async def _embed_after(ctx: JobContext, owed: list[str], report: IndexReport) -> None:
    """The second phase for the chunks this job wrote without a vector: a job of its own on
    the queue (index jobs queued before it run first), or, with no queue, right here."""
    report.owed = len(owed)
    redis = ctx.get("redis")
    if redis is None:
        report.embedded = (await embed_chunks(ctx, owed))["embedded"]
        report.owed = 0
        return
    report.embed_job = await queue.enqueue_embed(redis, owed)
