"""Watch agent transcript folders; each file that grows becomes an `ingest_transcript` job."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable
from pathlib import Path

from arq import ArqRedis
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from memoryd import queue
from memoryd.scan import AIDER_LOG
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


def transcript_files(roots: Iterable[Path]) -> list[str]:
    """Transcript files under the given files or folders, absolute, in a stable order."""
    found: list[str] = []
    for root in roots:
        if root.is_file():
            found.append(str(root.resolve()))
            continue
        for pattern in _PATTERNS:
            found.extend(
                str(p.resolve())
                for p in root.rglob(pattern)
                if p.is_file() and is_transcript(str(p.resolve()))
            )
    return sorted(dict.fromkeys(found))


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: TranscriptWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type == "deleted":
            return  # a deleted transcript keeps its memories: nothing to do
        for raw in (event.src_path, getattr(event, "dest_path", "") or ""):
            path = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
            if path and is_transcript(path):
                self.watcher.loop.call_soon_threadsafe(self.watcher.debouncer.note, _GROUP, {path})


class TranscriptWatcher:
    def __init__(self, redis: ArqRedis, roots: list[Path], debounce: float) -> None:
        self.redis = redis
        self.roots = [r for r in roots if r.is_dir()]
        self.loop = asyncio.get_running_loop()
        self.debouncer = Debouncer(debounce, _MAX_WAIT, self._flush)
        self._observer = Observer()
        self._task: asyncio.Task[None] | None = None
        for missing in sorted(set(roots) - set(self.roots)):
            log.info("transcript folder %s does not exist; not watching it", missing)

    async def _flush(self, _group: str, burst: Burst) -> None:
        await queue.enqueue_ingest(self.redis, sorted(burst.keys))

    async def start(self) -> None:
        for root in self.roots:
            self._observer.schedule(_Handler(self), str(root), recursive=True, event_filter=CHANGES)
        self._observer.start()
        # Whatever grew while memoryd was down; unchanged files return at once from the job.
        files = await asyncio.to_thread(transcript_files, self.roots)
        try:
            await queue.enqueue_ingest(self.redis, files)
        except Exception as exc:
            if not queue.server_lost(exc):
                raise
            # Redis restarting under the start: they wait for the debouncer's next round.
            self.debouncer.outage.failed(f"{len(files)} transcripts not enqueued", exc)
            self.debouncer.note(_GROUP, set(files))
        log.info("watching %d transcript folders (%d files)", len(self.roots), len(files))
        self._task = asyncio.create_task(self.debouncer.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._observer.stop()
        await asyncio.to_thread(self._observer.join, 5)
