"""Watch agent transcript folders; each file that grows becomes an `ingest_transcript` job."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from arq import ArqRedis
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import ObservedWatch

from memoryd import queue
from memoryd.scan import AIDER_LOG, not_regular
from memoryd.watch import CHANGES
from memoryd.watch.debounce import Burst, Debouncer

log = logging.getLogger(__name__)

# Which files are transcripts, by name: JSON lines (Claude Code, Codex, Gemini CLI's current
# chats), Codex's zstd archives, Gemini CLI's older whole-file chats, and aider's chat log (in
# the repositories aider works in: the repository watcher hands those over).
SUFFIXES = (".jsonl", ".jsonl.zst")
_GEMINI_CHAT = re.compile(r"/chats/session-[^/]*\.json$")
_PATTERNS = ("*.jsonl", "*.jsonl.zst", "session-*.json", AIDER_LOG)
# Transcripts are appended to line by line while an agent works: ingest at most this often.
_MAX_WAIT = 1.0
# How often folders not there yet (and transcripts hooks named before they existed) are looked
# for: a new user's first session is in memory within seconds, for a stat per folder.
LOOK_SECONDS = 1.0
# One debounce group: every transcript's job is enqueued in one flush.
_GROUP = "transcripts"


def is_transcript(path: str) -> bool:
    return (
        path.endswith(SUFFIXES)
        or _GEMINI_CHAT.search(path) is not None
        or path.endswith("/" + AIDER_LOG)
    )


def rewritten_whole(path: str) -> bool:
    """A format its agent rewrites whole in place (Gemini CLI's .json chats), not appends to."""
    return _GEMINI_CHAT.search(path) is not None


def transcript_files(roots: Iterable[Path], skipped: dict[str, str] | None = None) -> list[str]:
    """Transcript files under the given files or folders, absolute, in a stable order.
    `skipped` gets the others named like transcripts (a FIFO, a symlink loop or to nothing),
    with the reason."""
    found: list[str] = []
    for root in roots:
        if root.is_file():
            found.append(str(root.resolve()))
            continue
        for pattern in _PATTERNS:
            for p in root.rglob(pattern):
                if p.is_file():
                    if is_transcript(str(p.resolve())):
                        found.append(str(p.resolve()))
                    continue
                if skipped is None or not is_transcript(str(p)):
                    continue
                if (reason := _not_a_transcript_file(p)) is not None:
                    skipped[str(p)] = reason
    return sorted(dict.fromkeys(found))


def _not_a_transcript_file(path: Path) -> str | None:
    try:
        info = path.stat()
    except OSError as exc:  # a symlink loop, or to nothing
        return f"unreadable: {exc.strerror or exc}"
    return None if stat.S_ISDIR(info.st_mode) else not_regular(info.st_mode)


def _inode(folder: Path) -> tuple[int, int] | None:
    """Which folder is at `folder` now (device and inode), or None when no folder is."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None


def _listed(roots: Iterable[Path]) -> list[str]:
    """The transcripts under `roots` and the entries named like one that are skipped, with
    one line each: their ingest job stores the skip record (`status` lists it)."""
    skipped: dict[str, str] = {}
    files = transcript_files(roots, skipped)
    for path, reason in skipped.items():
        log.warning("skip transcript %s: %s", path, reason)
    return sorted([*files, *skipped])


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: TranscriptWatcher, root: Path) -> None:
        self.watcher = watcher
        self.root = str(root)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type == "deleted" and event.src_path == self.root:
            # The watched folder itself is gone and its watch with it; one made again at once
            # may even have the same inode, so the inode check alone cannot tell.
            self.watcher.dead.add(Path(self.root))
            return
        if event.is_directory or event.event_type == "deleted":
            return  # a deleted transcript keeps its memories: nothing to do
        for raw in (event.src_path, getattr(event, "dest_path", "") or ""):
            path = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
            if path and is_transcript(path):
                self.watcher.loop.call_soon_threadsafe(self.watcher.debouncer.note, _GROUP, {path})


class TranscriptWatcher:
    """Watches each transcript folder that exists, and looks every LOOK_SECONDS for those that
    do not yet (a new user installs memoryd before their agent's first session creates its
    folder) or were removed, and for transcripts a hook named before they existed."""

    def __init__(self, redis: ArqRedis, roots: list[Path], debounce: float) -> None:
        self.redis = redis
        self.roots = list(dict.fromkeys(roots))
        self.loop = asyncio.get_running_loop()
        self.debouncer = Debouncer(debounce, _MAX_WAIT, self._flush)
        self._observer = Observer()
        self._watches: dict[Path, tuple[ObservedWatch, tuple[int, int]]] = {}
        self._refused: set[Path] = set()  # roots whose watch failed, said once each
        self.dead: set[Path] = set()  # roots whose watch saw its folder removed
        self._tasks: list[asyncio.Task[None]] = []

    async def _flush(self, _group: str, burst: Burst) -> None:
        await queue.enqueue_ingest(self.redis, sorted(burst.keys))

    def _attach(self) -> list[Path]:
        """Watch the roots that exist and are not watched, let go of watched ones that are gone
        (or were made again: the old watch is on the removed folder); returns the roots
        watched now that were not before."""
        added = []
        for root in self.roots:
            inode = _inode(root)
            watched = self._watches.get(root)
            dead = root in self.dead
            self.dead.discard(root)
            if watched is not None and (dead or watched[1] != inode):
                with contextlib.suppress(KeyError):  # its emitter may have stopped already
                    self._observer.unschedule(watched[0])
                del self._watches[root]
                log.info("transcript folder %s is gone; watching for it again", root)
            if inode is not None and root not in self._watches:
                try:
                    watch = self._observer.schedule(
                        _Handler(self, root), str(root), recursive=True, event_filter=CHANGES
                    )
                except OSError as exc:  # out of inotify watches, or no permission
                    if root not in self._refused:
                        log.warning("cannot watch transcript folder %s: %s", root, exc)
                    self._refused.add(root)
                    continue
                self._watches[root] = (watch, inode)
                self._refused.discard(root)
                added.append(root)
        return added

    async def start(self) -> None:
        watched = await asyncio.to_thread(self._attach)
        self._observer.start()
        # Whatever grew while memoryd was down; unchanged files return at once from the job.
        files = await asyncio.to_thread(_listed, watched)
        try:
            await queue.enqueue_ingest(self.redis, files)
        except Exception as exc:
            if not queue.server_lost(exc):
                raise
            # Redis restarting under the start: they wait for the debouncer's next round.
            self.debouncer.outage.failed(f"{len(files)} transcripts not enqueued", exc)
            self.debouncer.note(_GROUP, set(files))
        for missing in sorted(set(self.roots) - set(watched)):
            log.info("transcript folder %s does not exist yet; watching for it", missing)
        log.info("watching %d transcript folders (%d files)", len(watched), len(files))
        self._tasks = [
            asyncio.create_task(self.debouncer.run()),
            asyncio.create_task(self._look()),
        ]

    async def _look(self) -> None:
        while True:
            await asyncio.sleep(LOOK_SECONDS)
            try:
                await self._look_once()
                self.debouncer.outage.ended()
            except Exception as exc:  # Redis restarting, or a bug: said, and the loop goes on
                # The debouncer's outage: one line for the watcher while Redis is away.
                self.debouncer.outage.failed(
                    "looking for new transcript folders and files failed", exc
                )

    async def _look_once(self) -> None:
        for root in await asyncio.to_thread(self._attach):
            log.info("transcript folder %s appeared; watching it", root)
            # What the agent wrote before the watch began.
            self.debouncer.note(_GROUP, set(await asyncio.to_thread(_listed, [root])))
        await self._take_expected()

    async def _take_expected(self) -> None:
        expected = await queue.expected_transcripts(self.redis)
        if not expected:
            return
        now = time.time()
        here = await asyncio.to_thread(lambda: {p for p in expected if os.path.isfile(p)})
        self.debouncer.note(_GROUP, here)
        old = {p for p, since in expected.items() if now - since > queue.EXPECTED_SECONDS}
        await queue.drop_expected(self.redis, sorted(here | old))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._observer.stop()
        await asyncio.to_thread(self._observer.join, 5)
