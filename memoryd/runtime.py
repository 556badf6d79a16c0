"""Bring the parts up and down in order: Redis, then the database and model, then the workers.

Every command goes through a `Runtime`. The daemon serves the queues; a client command attaches
to whatever already serves them, and serves them itself for the duration of the command when
nothing does (so `memoryd index` works with or without a running daemon, through the same queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from typing import Any

import redis.exceptions
from arq import ArqRedis, Worker

from memoryd import channel, metrics, queue
from memoryd.config import Settings
from memoryd.embedded import (
    EmbeddedRedis,
    daemon_lock_path,
    daemon_pid,
    prepare_data_dir,
    socket_alive,
    stop_orphan,
)
from memoryd.embedding import Embedder
from memoryd.errors import MemorydError
from memoryd.indexsync import IndexSync
from memoryd.liveness import HeldLock
from memoryd.migrate import migrate
from memoryd.store import Store

log = logging.getLogger(__name__)

# Redis unreachable this long (an external one; a private one is watched as a process) ends the
# serving: the service manager restarts memoryd, which is better than a worker that waits forever.
REDIS_LOST_SECONDS = 10.0
# Bound on each step of an orderly close, so that a stop never waits on a dead server.
CLOSE_SECONDS = 5.0


class Runtime:
    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        """`embedder`: a model already loaded (the tests share one); `serve` loads it otherwise."""
        if embedder is not None and embedder.model != settings.model:
            raise ValueError(f"embedder runs {embedder.model}, settings say {settings.model}")
        self.settings = settings
        self.redis_service: EmbeddedRedis | None = None
        self.redis: ArqRedis | None = None
        self.store: Store | None = None
        self.embedder = embedder
        # Only a model this runtime loaded is stopped with it; a shared one serves on.
        self._own_embedder = embedder is None
        self.search: IndexSync | None = None
        self.workers: list[Worker] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._daemon_lock: HeldLock | None = None
        self._worker_lock: HeldLock | None = None
        self._redis_lost: str | None = None
        self._channel: asyncio.Server | None = None

    @property
    def serving(self) -> bool:
        return bool(self.workers)

    async def start_queue(self, exclusive: bool = False) -> ArqRedis:
        """Connect to Redis, starting the private one when it is the default and not running.
        `exclusive` (the daemon) refuses to share a private Redis with another daemon."""
        prepare_data_dir(self.settings.data_dir)
        if self.settings.embedded_redis:
            if socket_alive(self.settings.redis_socket) and exclusive:
                owner = daemon_pid(self.settings.data_dir)
                if owner is not None:
                    raise MemorydError(
                        f"memoryd is already running with data dir {self.settings.data_dir} "
                        f"(pid {owner}); stop it first"
                    )
                # Its owner was killed: stop it in order (AOF flushed) and start our own.
                log.info("stopping the private Redis left by a memoryd that was killed")
                await asyncio.to_thread(stop_orphan, self.settings.redis_socket)
            if not socket_alive(self.settings.redis_socket):
                self.redis_service = EmbeddedRedis(self.settings.data_dir)
                await asyncio.to_thread(self.redis_service.start)
        if exclusive:
            try:
                self._daemon_lock = HeldLock(daemon_lock_path(self.settings.data_dir))
            except BlockingIOError:
                raise MemorydError(
                    f"memoryd is already running with data dir {self.settings.data_dir} "
                    f"(pid {daemon_pid(self.settings.data_dir)}); stop it first"
                ) from None
        self.redis = await queue.connect(self.settings.queue_url)
        return self.redis

    async def serve(self, scheduled: bool = True) -> None:
        """Open the database and the model, apply the schema, start the workers."""
        assert self.redis is not None, "start_queue first"
        s = self.settings
        self.store = await Store.open(
            s.database_url,
            s.surreal_namespace,
            s.surreal_database,
            s.surreal_user,
            s.surreal_password,
            reopen_bytes=s.db_reopen_mb << 20,
        )
        if self.embedder is None:
            self.embedder = await asyncio.to_thread(
                Embedder, s.model, s.data_dir / "models", s.embed_batch_size
            )
        metrics.instrument_embedder(self.embedder)  # embed throughput; counting costs ~nothing
        # The model's memory is not the database's: counted as its growth, it made the first
        # check reopen the database for nothing.
        self.store.rebase_memory()
        applied = await migrate(self.store, s, s.data_dir / "backups")
        if applied:
            log.info("schema applied: %s", ", ".join(applied))
        self.search = await IndexSync.open(self.store, s.data_dir, self.embedder.model)
        # Imported here: memoryd depends on workers only where it starts one.
        from workers.context import JobContext
        from workers.queries import Counted
        from workers.registry import build_workers, query_answer

        ctx: JobContext = {
            "store": self.store,
            "embedder": self.embedder,
            "search": self.search,
            "settings": s,
            "status_counts": Counted(),
            "redis": self.redis,
        }
        ctx["queries"] = query_answer(ctx)
        self.workers = build_workers(
            ctx, queue.redis_settings(self.settings.queue_url), s, scheduled
        )
        if await queue.live_workers(self.redis) == 0:
            # Nobody else serves the queue: jobs marked in progress belong to a worker that
            # died (a kill, a crash). Free them now rather than after their timeout.
            freed = await queue.release_orphaned_jobs(self.redis)
            if freed:
                log.info("%d jobs of a stopped worker will run again", freed)
            if scheduled:
                # Chunks a stop or crash left between indexing and embedding get their vectors.
                await queue.enqueue_embed(self.redis)
        if self._daemon_lock is not None:
            # The data dir's daemon also answers queries on its socket (memoryd/channel.py).
            self._channel = await channel.serve(s.channel_socket, ctx["queries"])
        self._worker_lock = HeldLock(s.data_dir / "run" / f"worker-{uuid.uuid4().hex}.lock")
        await self._beat()
        self._tasks = [asyncio.create_task(w.async_run()) for w in self.workers]
        self._tasks.append(asyncio.create_task(self._heartbeat()))

    async def serve_if_needed(self) -> None:
        assert self.redis is not None
        if await queue.live_workers(self.redis) == 0:
            log.info("no memoryd worker is running: serving the queue in this process")
            # Serving only for one command: the scheduled upkeep is the daemon's business.
            await self.serve(scheduled=False)

    async def _beat(self) -> None:
        assert self.redis is not None and self._worker_lock is not None
        await self.redis.set(
            queue.worker_key(self._worker_lock.path),
            str(self._worker_lock.path),
            ex=queue.WORKER_KEY_TTL,
        )

    def _private_redis_died(self) -> str | None:
        service = self.redis_service
        code = service.exit_code() if service is not None else None
        if service is None or code is None:
            return None
        return (
            f"the private Redis (pid {service.pid}) exited with code {code}; memoryd stops "
            f"so that its service manager starts it again (see {service.dir / 'redis.log'})"
        )

    async def _heartbeat(self) -> None:
        """Beat for `live_workers`, and watch Redis: when the private one dies, or Redis refuses
        writes (MISCONF: its disk is full) or stays unreachable, raise, which ends the serving."""
        last_beat = failing_since = 0.0
        while True:
            await asyncio.sleep(1)
            if died := self._private_redis_died():
                self._redis_lost = died
                raise MemorydError(died)
            if time.monotonic() - last_beat < queue.WORKER_KEY_TTL / 3:
                continue
            try:
                await asyncio.wait_for(self._beat(), CLOSE_SECONDS)
                last_beat, failing_since = time.monotonic(), 0.0
            except redis.exceptions.ResponseError as exc:
                self._redis_lost = f"Redis refuses writes ({exc}); memoryd stops"
                raise MemorydError(self._redis_lost) from None
            except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since >= REDIS_LOST_SECONDS:
                    self._redis_lost = (
                        f"Redis at {self.settings.queue_url} unreachable for "
                        f"{REDIS_LOST_SECONDS:.0f}s ({exc}); memoryd stops"
                    )
                    raise MemorydError(self._redis_lost) from None

    async def wait_serving(self) -> None:
        """Block until a worker task ends (it should not) or the caller is cancelled."""
        if self._tasks:
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception():
                    # A worker that lost its private Redis fails with a bare connection error
                    # a moment before the heartbeat sees the process gone: say which it is.
                    if died := self._private_redis_died():
                        self._redis_lost = died
                        raise MemorydError(died)
                    exc = task.exception()
                    if isinstance(exc, redis.exceptions.RedisError):  # MISCONF, a lost server
                        self._redis_lost = f"Redis failed under a worker ({exc}); memoryd stops"
                        raise MemorydError(self._redis_lost) from None
                    raise exc  # type: ignore[misc]

    async def _close_workers(self) -> None:
        if self._redis_lost:
            # Nothing can be written back: cancel the jobs (they run again from the AOF's
            # queue) without arq's orderly close, which would wait on the dead server.
            for worker in self.workers:
                worker.handle_sig(signal.SIGUSR1)
                if worker.tasks:
                    done, _ = await asyncio.wait(worker.tasks.values(), timeout=CLOSE_SECONDS)
                    # Their connection errors are the loss already reported, once.
                    for task in done:
                        if not task.cancelled():
                            task.exception()
            return
        task = asyncio.current_task()
        # A close that runs because a signal cancelled the command is already "cancelling".
        cancelled = task.cancelling() if task is not None else 0
        for worker in self.workers:
            try:
                await asyncio.wait_for(worker.close(), CLOSE_SECONDS * 2)
            except asyncio.CancelledError:
                # arq's close() cancels the jobs under way and re-raises their cancellation;
                # the rest must still be closed. Only a cancellation of the close goes on up.
                if task is not None and task.cancelling() > cancelled:
                    raise
            except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                # Redis gone, or its socket no longer ours (a data dir made read-only): the
                # worker's last bookkeeping is lost and a restart redoes it; no traceback.
                log.warning("closing a worker: Redis did not answer (%s)", exc)
            except Exception:
                log.exception("closing a worker failed")

    async def close(self) -> None:
        # Whatever fails on the way, the private Redis is stopped: never left orphaned.
        try:
            if self.embedder is not None and self._own_embedder:
                self.embedder.interrupt()
            if self._channel is not None:
                # No new query starts; the ones under way end with the workers' jobs.
                self._channel.close()
                self._channel = None
                try:
                    self.settings.channel_socket.unlink(missing_ok=True)
                except OSError as exc:  # a data dir made read-only: the next start replaces it
                    log.warning("query channel socket left in place: %s", exc)
            for task in self._tasks:
                task.cancel()
            await self._close_workers()
            for task in self._tasks:
                with contextlib.suppress(BaseException):
                    await task
            self._tasks, self.workers = [], []
            if self.redis is not None:
                if self._worker_lock is not None and not self._redis_lost:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(
                            self.redis.delete(queue.worker_key(self._worker_lock.path)),
                            CLOSE_SECONDS,
                        )
                await self.redis.aclose()
                self.redis = None
            if self._worker_lock is not None:
                self._worker_lock.release(remove=True)
                self._worker_lock = None
            if self.search is not None:
                try:
                    await self.search.close()
                except OSError as exc:  # a data dir made read-only, a full disk
                    # Derived from the database: the next start checks them against it.
                    log.warning("search indexes not checkpointed at stop: %s", exc)
                self.search = None
            if self.store is not None:
                await self.store.close()
                self.store = None
        finally:
            if self.redis_service is not None:
                await asyncio.to_thread(self.redis_service.stop)
                self.redis_service = None
            if self._daemon_lock is not None:
                self._daemon_lock.release()
                self._daemon_lock = None

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
