"""Watch repositories with watchdog; coalesce bursts into batched `index_files` jobs."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from arq import ArqRedis
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from memoryd import projects, queue
from memoryd.projects import Project
from memoryd.scan import ignored_by_name

log = logging.getLogger(__name__)

# A burst ends after this long without events, or is cut after _MAX_WAIT so that a long
# stream of writes (a big checkout) still makes progress.
_MAX_WAIT = 2.0
_TICK = 0.05


@dataclass(slots=True)
class _Pending:
    paths: set[str] = field(default_factory=set)
    full_sync: bool = False
    first: float = 0.0
    last: float = 0.0


class _Handler(FileSystemEventHandler):
    """Runs on watchdog's thread: only records relative paths, hands them to the loop."""

    def __init__(self, watcher: RepoWatcher, project: Project) -> None:
        self.watcher = watcher
        self.project = project

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = [event.src_path, getattr(event, "dest_path", "") or ""]
        rels = []
        for raw in paths:
            if not raw:
                continue
            path = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
            try:
                rel = Path(path).relative_to(self.project.root).as_posix()
            except ValueError:
                continue
            if rel == "." or rel.startswith(".git/") or rel == ".git":
                continue
            rels.append(rel)
        if not rels:
            return
        # A directory moved or deleted hides which files went with it: sync the project.
        full = event.is_directory and event.event_type in ("moved", "deleted")
        if event.is_directory and not full:
            return
        self.watcher.loop.call_soon_threadsafe(self.watcher.note, self.project, rels, full)


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

    def note(self, project: Project, rels: list[str], full: bool) -> None:
        pending = self._pending.setdefault(project.id, _Pending())
        now = time.monotonic()
        if not pending.paths and not pending.full_sync:
            pending.first = now
        pending.last = now
        pending.full_sync |= full or ".gitignore" in {r.rsplit("/", 1)[-1] for r in rels}
        pending.paths.update(r for r in rels if not ignored_by_name(r))

    async def start(self) -> None:
        for project in self.projects:
            self._observer.schedule(_Handler(self, project), str(project.root), recursive=True)
        self._observer.start()
        # Whatever changed while memoryd was down: enqueue after watching starts, so nothing
        # falls between the reconciliation and the first event.
        for project in self.projects:
            jobs = await projects.sync(self.redis, project, self.batch)
            log.info("watching %s (%s): %d reconcile jobs", project.root, project.id, len(jobs))
        self._flusher = asyncio.create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        by_id = {p.id: p for p in self.projects}
        while True:
            await asyncio.sleep(_TICK)
            now = time.monotonic()
            for project_id, pending in list(self._pending.items()):
                quiet = now - pending.last >= self.debounce
                if not (quiet or now - pending.first >= _MAX_WAIT):
                    continue
                del self._pending[project_id]
                project = by_id[project_id]
                try:
                    if pending.full_sync:
                        await projects.sync(self.redis, project, self.batch)
                    elif pending.paths:
                        paths = sorted(pending.paths)
                        await queue.enqueue_index(
                            self.redis, project.id, project.root, paths, self.batch
                        )
                        log.info("queued %d changed files of %s", len(paths), project.id)
                except Exception:
                    # Redis hiccup: keep the paths for the next round instead of losing them.
                    log.exception("enqueue failed for %s; retrying", project.id)
                    again = self._pending.setdefault(project_id, _Pending(first=now, last=now))
                    again.paths |= pending.paths
                    again.full_sync |= pending.full_sync

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        self._observer.stop()
        await asyncio.to_thread(self._observer.join, 5)
