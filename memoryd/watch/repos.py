"""Watch repositories with watchdog; coalesce bursts into batched `index_files` jobs.

Events are filtered on watchdog's thread (built-in ignore list, editors' temp files, .gitignore
files at every level, .git/) and gathered per project on the event loop. A burst ends after
`debounce` seconds without events, or is cut after _MAX_WAIT so that a long stream of writes (a
big checkout) still makes progress; each flush is a few jobs of up to `batch` files.

What an event leads to:
- a file created, modified, deleted or moved (both of its paths): the path is looked at again
  by a job, which reads the disk when it runs. An editor's save dance (write a temp file and
  rename it over, or delete and create) inside one burst is one update of the real file; one
  spread over two bursts ends in the same state, because the job that runs last sees the disk
  as it is (workers/indexing.py re-checks each file after writing it).
- a directory deleted, or moved: watchdog reports the files that moved with a directory inside
  the tree, but not those of a directory moved out of it; every stored path under the old
  directory is looked at again, and the new one is walked.
- a `.gitignore` created, edited or deleted: its directory is synced again (the whole project
  for the top one): newly ignored files are retired, newly visible ones indexed.
- `.git/HEAD` changed (a branch switch), or `.git/logs/HEAD` (a commit, a reset): the project's
  branch and head are recorded again, and the commits new to its history counted for
  CHANGES_WITH.
- the kernel's inotify queue overflowed (events were lost): every project is synced again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from arq import ArqRedis
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from memoryd import projects, queue
from memoryd.projects import Project
from memoryd.scan import AIDER_LOG, aider_logs, ignored_by_name, valid_name, wanted_paths
from memoryd.watch import CHANGES, Outage

log = logging.getLogger(__name__)

# A burst ends after `debounce` seconds without events, or is cut after _MAX_WAIT.
_MAX_WAIT = 2.0
_TICK = 0.05
# How often the watched roots are announced again (queue.WATCHING_KEY_TTL is their lifetime).
_ANNOUNCE_EVERY = 10.0
# watchdog says so (and nothing else) when the kernel dropped events.
_INOTIFY_LOGGER = "watchdog.observers.inotify"


@dataclass(slots=True)
class _Pending:
    paths: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)  # to sync again; "" is the whole project
    head: bool = False
    transcripts: set[str] = field(default_factory=set)  # aider's chat logs (absolute paths)
    first: float = 0.0
    last: float = 0.0

    def merge(self, other: _Pending) -> None:
        self.paths |= other.paths
        self.dirs |= other.dirs
        self.head |= other.head
        self.transcripts |= other.transcripts


class _Handler(FileSystemEventHandler):
    """Runs on watchdog's thread: turns events into project-relative paths worth a look."""

    def __init__(self, watcher: RepoWatcher, project: Project) -> None:
        self.watcher = watcher
        self.project = project

    def _rel(self, raw: bytes | str) -> str | None:
        if not raw:
            return None
        path = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
        try:
            rel = Path(path).relative_to(self.project.root).as_posix()
        except ValueError:
            return None
        return None if rel == "." else rel

    def on_any_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if event.is_directory and kind not in ("deleted", "moved"):
            return  # a new directory's files get events of their own
        paths: set[str] = set()
        dirs: set[str] = set()
        transcripts: set[str] = set()
        head = False
        for raw in (event.src_path, getattr(event, "dest_path", "") or ""):
            rel = self._rel(raw)
            if rel is None:
                continue
            if rel in (".git/HEAD", ".git/logs/HEAD"):  # a branch switch; a commit, a reset
                head = True
            elif rel == ".git" or rel.startswith(".git/"):
                continue
            elif event.is_directory:
                dirs.add(rel)
            elif rel.rsplit("/", 1)[-1] == AIDER_LOG:
                # aider keeps its chat log in the repository (usually gitignored): a transcript.
                transcripts.add(str(self.project.root / rel))
            elif rel.rsplit("/", 1)[-1] == ".gitignore":
                dirs.add(rel.rpartition("/")[0])
            elif valid_name(rel) and not ignored_by_name(rel):
                paths.add(rel)  # git's own rules are asked once per burst, at the flush
        if paths or dirs or head or transcripts:
            self.watcher.loop.call_soon_threadsafe(
                self.watcher.note, self.project, paths, dirs, head, transcripts
            )


class _OverflowSignal(logging.Handler):
    """watchdog only logs an inotify queue overflow; hear it, and sync everything again."""

    def __init__(self, watcher: RepoWatcher) -> None:
        super().__init__(logging.WARNING)
        self.watcher = watcher

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.watcher.loop.call_soon_threadsafe(self.watcher.overflowed)


class RepoWatcher:
    def __init__(
        self, redis: ArqRedis, watched: list[Project], debounce: float, batch: int
    ) -> None:
        self.redis = redis
        self.projects = watched
        self.debounce = debounce
        self.batch = batch
        self.loop = asyncio.get_running_loop()
        self._pending: dict[str, _Pending] = {}
        self._observer = Observer()
        self._flusher: asyncio.Task[None] | None = None
        self._flushing = False
        self._outage = Outage(log)
        self._overflow = _OverflowSignal(self)
        self._announce_key = queue.watching_key()
        self._announced = 0.0
        # What the watcher did, for `status`-like reports and tests.
        self.stats = {"flushes": 0, "jobs": 0, "files": 0, "syncs": 0}

    @property
    def idle(self) -> bool:
        """No events waiting to be flushed, and none being enqueued."""
        return not self._pending and not self._flushing

    def note(
        self,
        project: Project,
        paths: set[str],
        dirs: set[str],
        head: bool = False,
        transcripts: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        """Record events (on the event loop)."""
        pending = self._pending.get(project.id)
        now = time.monotonic()
        if pending is None:
            pending = self._pending[project.id] = _Pending(first=now)
        pending.last = now
        pending.merge(_Pending(paths, dirs, head, set(transcripts)))

    def overflowed(self) -> None:
        log.warning("file events were lost (inotify queue overflow): syncing every project")
        for project in self.projects:
            self.note(project, set(), {""})

    async def start(self) -> None:
        inotify_log = logging.getLogger(_INOTIFY_LOGGER)
        if not inotify_log.isEnabledFor(logging.WARNING):
            inotify_log.setLevel(logging.WARNING)
        inotify_log.addHandler(self._overflow)
        for project in self.projects:
            self._observer.schedule(
                _Handler(self, project), str(project.root), recursive=True, event_filter=CHANGES
            )
        self._observer.start()
        with contextlib.suppress(Exception):  # a Redis restart: announced by the flush loop
            await self._announce()
        # Whatever changed while memoryd was down: enqueue after watching starts, so nothing
        # falls between the reconciliation and the first event.
        for project in self.projects:
            # aider writes its log in the folder it was started in, anywhere in the repository.
            logs = set(await asyncio.to_thread(aider_logs, project.root))
            try:
                jobs = await projects.sync(self.redis, project, self.batch)
                if logs:
                    await queue.enqueue_ingest(self.redis, sorted(logs))
            except Exception as exc:
                if not queue.server_lost(exc):
                    raise
                # Redis restarting under the start: the flush loop enqueues it when it is back.
                self._outage.failed(f"reconcile of {project.id} not enqueued", exc)
                self.note(project, set(), {""}, transcripts=logs)
                continue
            log.info("watching %s (%s): %d reconcile jobs", project.root, project.id, len(jobs))
        self._flusher = asyncio.create_task(self._flush_loop())

    async def _announce(self) -> None:
        """Say which roots this watcher follows (for `doctor` in another process)."""
        roots = [p.root for p in self.projects]
        await queue.announce_watching(self.redis, self._announce_key, roots)
        self._announced = time.monotonic()

    async def _flush_loop(self) -> None:
        by_id = {p.id: p for p in self.projects}
        while True:
            await asyncio.sleep(_TICK)
            now = time.monotonic()
            if now - self._announced >= _ANNOUNCE_EVERY:
                with contextlib.suppress(Exception):  # a Redis hiccup: next time
                    await self._announce()
            for project_id, pending in list(self._pending.items()):
                quiet = now - pending.last >= self.debounce
                if not (quiet or now - pending.first >= _MAX_WAIT):
                    continue
                del self._pending[project_id]
                self._flushing = True
                try:
                    await self._flush(by_id[project_id], pending)
                    self._outage.ended()
                except Exception as exc:
                    # Redis hiccup: keep everything for the next round instead of losing it.
                    self._outage.failed(f"enqueue failed for {project_id}", exc)
                    again = self._pending.setdefault(project_id, _Pending(first=now, last=now))
                    again.merge(pending)
                finally:
                    self._flushing = False

    async def _flush(self, project: Project, pending: _Pending) -> None:
        jobs: list[tuple[object, int]] = []
        if pending.dirs:
            jobs = await projects.sync(
                self.redis, project, self.batch, under=pending.dirs, extra=pending.paths
            )
            self.stats["syncs"] += 1
            log.info(
                "synced %s under %s: %d files in %d jobs",
                project.id,
                ", ".join(sorted(d or "/" for d in pending.dirs)),
                sum(count for _, count in jobs),
                len(jobs),
            )
        elif pending.paths:
            found = await asyncio.to_thread(wanted_paths, project.root, list(pending.paths))
            paths = sorted(found)
            jobs = await queue.enqueue_index(
                self.redis, project.id, project.root, project.kept(paths), self.batch
            )
            log.info("queued %d changed files of %s in %d jobs", len(paths), project.id, len(jobs))
        if pending.head:
            await projects.register(self.redis, project)
        if pending.transcripts:
            await queue.enqueue_ingest(self.redis, sorted(pending.transcripts))
        self.stats["flushes"] += 1
        self.stats["jobs"] += len(jobs)
        self.stats["files"] += sum(count for _, count in jobs)

    async def stop(self) -> None:
        logging.getLogger(_INOTIFY_LOGGER).removeHandler(self._overflow)
        if self._flusher is not None:
            self._flusher.cancel()
        self._observer.stop()
        await asyncio.to_thread(self._observer.join, 5)
        with contextlib.suppress(Exception):
            await self.redis.delete(self._announce_key)
