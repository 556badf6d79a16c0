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
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

import redis.exceptions
from arq import ArqRedis, Worker

from memoryd import channel, heap, queue, static_embedding
from memoryd.config import Settings
from memoryd.daemon import metrics
from memoryd.database.migrate import migrate
from memoryd.dotted import resolve
from memoryd.embedded import (
    EmbeddedRedis,
    daemon_lock_path,
    daemon_pid,
    prepare_data_dir,
    socket_alive,
    stop_orphan,
)
from memoryd.embedding import Embedder
from memoryd.errors import DaemonUnavailable, MemorydError
from memoryd.liveness import SERVING_WAIT_SECONDS, HeldLock, holder
from memoryd.paths import serving_lock_path
from memoryd.searchindex.indexsync import IndexSync
from memoryd.store import Store
from memoryd.ui import Page

if TYPE_CHECKING:
    from arq.connections import RedisSettings

log = logging.getLogger(__name__)

# Redis unreachable this long (an external one; a private one is watched as a process) ends the
# serving: the service manager restarts memoryd, which is better than a worker that waits forever.
REDIS_LOST_SECONDS = queue.REDIS_LOST_SECONDS
# Bound on each step of an orderly close, so that a stop never waits on a dead server.
CLOSE_SECONDS = 5.0
# A private Redis that dies is started again in process (its append-only file keeps the queue),
# up to this many times in REDIS_RESTART_WINDOW seconds; one that keeps dying is left to the
# service manager, which restarts memoryd as a whole. Each start waits this long at most for the
# server to answer (it reads its append-only file first).
REDIS_RESTARTS = 3
REDIS_RESTART_WINDOW = 600.0
REDIS_START_SECONDS = 15.0


def _shielded_finishes() -> set[asyncio.Task[object]]:
    """arq records a job's end in a task it shields from the cancelling of the job. A job
    cancelled while it waits on that task leaves it to nobody: with a dead Redis it fails on
    its own later, and asyncio logged its connection error as a traceback ("Task exception was
    never retrieved") after the loss was already said once. Only running tasks can be found,
    so this is asked before the jobs are cancelled (a failed one is gone from the list by the
    time they are) and once more after."""
    finishes = {"Worker.finish_job", "Worker.finish_failed_job"}
    return {
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "") in finishes
    }


async def _retrieve(tasks: set[asyncio.Task[object]]) -> None:
    """Wait for the shielded finishes (bounded) and take their errors."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
    for task in pending:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(BaseException):
            await task


class JobTable(Protocol):
    """What runs the jobs memoryd/jobs.py declares, as the serving process asks it. memoryd
    never imports the job functions: it loads the table JOB_TABLE names, arq's own way (`arq
    module.WorkerSettings`), so memoryd stays below workers/."""

    def job_context(self, shared: dict[str, Any]) -> dict[str, Any]:
        """The context every job receives: `shared` (the store, the model, the search
        indexes, the settings, Redis) and the parts the jobs keep themselves."""
        ...

    async def close_context(self, ctx: dict[str, Any]) -> None: ...

    def build_workers(
        self,
        ctx: dict[str, Any],
        redis_settings: RedisSettings,
        settings: Settings,
        scheduled: bool,
    ) -> list[Worker]:
        """The in-process workers of the queues, with the scheduled upkeep when `scheduled`."""
        ...


# The module that is the JobTable (loaded by memoryd/dotted.py when this process serves).
JOB_TABLE = "workers.registry"


class ServedElsewhere(MemorydError):
    """Another memoryd process took the data dir first (a daemon starting, another command)."""


class Runtime:
    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        """`embedder`: a model already loaded (the tests share one); `serve` loads it otherwise."""
        if embedder is not None and embedder.model != settings.model:
            raise ValueError(f"embedder runs {embedder.model}, settings say {settings.model}")
        heap.tune()  # before the model and the engine start their threads
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
        # Beats, watches Redis and the workers, restarts a private Redis (see _supervise).
        self._supervisor: asyncio.Task[None] | None = None
        self._ctx: dict[str, Any] | None = None
        # What runs the jobs, loaded when this process serves (JOB_TABLE says why it is named,
        # not imported).
        self._table: JobTable | None = None
        self._scheduled = True
        self._restarts: list[float] = []
        self._serving = queue.Serving()
        self._daemon_lock: HeldLock | None = None
        self._serving_lock: HeldLock | None = None
        self._worker_lock: HeldLock | None = None
        self._redis_lost: str | None = None
        self._channel: channel.Channel | None = None
        self._page: Page | None = None

    @property
    def serving(self) -> bool:
        return bool(self.workers)

    @property
    def owns_data_dir(self) -> bool:
        """This process holds the data dir's serving lock (may open its embedded database)."""
        return self._serving_lock is not None

    async def start_queue(self, exclusive: bool = False, one_shot: bool = False) -> ArqRedis:
        """Connect to Redis, starting the private one when it is the default and not running.
        `exclusive` (the daemon) refuses to share the data dir with another daemon, and waits
        for a one-shot command that serves it to end. `one_shot` (a command that serves the
        data dir itself when nothing else does) raises ServedElsewhere when another process
        serves it, even one that is only starting."""
        prepare_data_dir(self.settings.data_dir)
        if exclusive:
            # First of all: a one-shot command that sees this lock held never serves.
            try:
                self._daemon_lock = HeldLock(daemon_lock_path(self.settings.data_dir))
            except BlockingIOError:
                raise MemorydError(
                    f"memoryd is already running with data dir {self.settings.data_dir} "
                    f"(pid {daemon_pid(self.settings.data_dir)}); stop it first"
                ) from None
        if exclusive or one_shot:
            self._serving_lock = await self._take_serving(wait=exclusive)
        if self.settings.embedded_redis:
            if socket_alive(self.settings.redis_socket) and exclusive:
                # Only the holder of the serving lock starts the private Redis: one that
                # answers now was left by a memoryd that was killed. Stopped in order (AOF
                # flushed) before our own starts.
                log.info("stopping the private Redis left by a memoryd that was killed")
                await asyncio.to_thread(stop_orphan, self.settings.redis_socket)
            if not socket_alive(self.settings.redis_socket):
                self.redis_service = EmbeddedRedis(self.settings.data_dir)
                pid = await asyncio.to_thread(self.redis_service.start, REDIS_START_SECONDS)
                log.info("redis started on %s (pid %d)", self.redis_service.socket, pid)
        while True:
            try:
                self.redis = await queue.connect(self.settings.queue_url)
                return self.redis
            except DaemonUnavailable:
                # The private Redis died before the first connection to it: started again as
                # one that dies later is, within the same count.
                if (died := self._private_redis_died()) is None:
                    raise
                self._count_restart(died)
                assert self.redis_service is not None
                pid = await asyncio.to_thread(self.redis_service.start, REDIS_START_SECONDS)
                log.warning("%s: started it again (pid %d)", died, pid)

    async def _take_serving(self, wait: bool) -> HeldLock:
        """The serving lock; `wait`: for a one-shot command that holds it to end (bounded),
        else ServedElsewhere at once."""
        path = serving_lock_path(self.settings.data_dir)
        deadline = time.monotonic() + SERVING_WAIT_SECONDS
        said = False
        while True:
            try:
                return HeldLock(path)
            except BlockingIOError:
                pid = holder(path)
                if not wait:
                    raise ServedElsewhere(f"memoryd (pid {pid}) serves this data dir") from None
            if time.monotonic() > deadline:
                raise MemorydError(
                    f"memoryd (pid {pid}), a command serving data dir {self.settings.data_dir}, "
                    f"did not end within {SERVING_WAIT_SECONDS:.0f}s; start the daemon after it"
                )
            if not said:
                log.info("waiting for memoryd (pid %s), a command using the data dir, to end", pid)
                said = True
            await asyncio.sleep(0.2)

    async def serve(self, scheduled: bool = True, model_when_used: bool = False) -> None:
        """Open the database and the model, apply the schema, start the workers.
        `model_when_used`: the model and the first pass's table load at the first text a job
        embeds, not now (a one-shot command: most only read the database, and the model is
        most of their start)."""
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
                Embedder,
                s.model,
                s.data_dir / "models",
                s.embed_batch_size,
                s.embed_cores,
                load_now=not model_when_used,
                loaded=self.store.discount_memory,
            )
        metrics.instrument_embedder(self.embedder)  # embed throughput; counting costs ~nothing
        # The first pass's token table (loaded once per process, here rather than by the
        # index) and the model's memory are not the database's: counted as its growth, they
        # made the first check reopen the database for nothing.
        if not model_when_used:
            await asyncio.to_thread(static_embedding.load)
        # Nor is the code of the job functions and, in the daemon, of the MCP service (26 MiB
        # counted as the database's in a process that had imported neither yet).
        self._table = resolve(JOB_TABLE)
        if self._daemon_lock is not None:
            from memoryd.agent import mcp_service
        self.store.rebase_memory()
        applied = await migrate(self.store, s, s.data_dir / "backups")
        if applied:
            log.info("schema applied: %s", ", ".join(applied))
        # Server mode: other workers write the same database (their changes are followed).
        self.search = await IndexSync.open(
            self.store,
            s.data_dir,
            self.embedder.model,
            follow=not s.embedded_db,
            first_pass_when_used=model_when_used,
        )
        self._ctx = self._table.job_context(
            {
                "store": self.store,
                "embedder": self.embedder,
                "search": self.search,
                "settings": s,
                "redis": self.redis,
            }
        )
        self._scheduled = scheduled
        # The command that serves here (a one-shot one) stops waiting when serving ends.
        queue.serving.set(self._serving)
        if self._daemon_lock is not None:
            # The data dir's daemon also answers queries on its socket (memoryd/channel.py),
            # serves there the MCP sessions of `memoryd mcp` (memoryd/agent/mcp_service.py), and its
            # `ui` query starts the web page (memoryd/ui), served from then on here.
            sessions = mcp_service.streams(self._ctx)
            self._page = Page(self._ctx)
            answer = self._page.answering(self._ctx["queries"])
            self._channel = await channel.serve(s.channel_socket, answer, sessions)
        self._worker_lock = HeldLock(s.data_dir / "run" / f"worker-{uuid.uuid4().hex}.lock")
        try:
            freed = await self._start_workers()
        except (redis.exceptions.RedisError, OSError) as exc:
            # The private Redis died during start-up (the first use of it since it started):
            # started again as later on.
            if (died := await self._private_redis_exit(exc)) is None:
                raise
            await self._restart_redis(died, ours=False)
            freed = 0
        if freed:
            log.info("%d jobs of a stopped worker will run again", freed)
        self._supervisor = asyncio.create_task(self._supervise())
        heap.freeze_startup()  # started: what it holds now is held for good

    async def _start_workers(self, died: bool = True) -> int:
        """New workers on the queue; returns how many jobs of a dead worker run again (`died`:
        of a worker that died, not of ours cancelled for a Redis restart)."""
        assert self.redis is not None and self._ctx is not None and self._worker_lock is not None
        assert self._table is not None
        # Our own heartbeat, if Redis kept it across a restart, is no live worker.
        await self.redis.delete(queue.worker_key(self._worker_lock.path))
        freed = 0
        if await queue.live_workers(self.redis) == 0:
            # Nobody else serves the queue: jobs marked in progress belong to a worker that
            # died (a kill, a crash, a lost Redis). Free them now rather than after their timeout.
            freed = await queue.release_orphaned_jobs(self.redis, died)
            if self._scheduled:
                # Chunks a stop or crash left between indexing and embedding get their vectors.
                await queue.enqueue_embed(self.redis)
        self._ctx["redis"] = self.redis
        self.workers = self._table.build_workers(
            self._ctx, queue.redis_settings(self.settings.queue_url), self.settings, self._scheduled
        )
        await self._beat()
        self._tasks = [asyncio.create_task(w.async_run()) for w in self.workers]
        return freed

    async def serve_if_needed(self) -> None:
        assert self.redis is not None
        if await queue.live_workers(self.redis) == 0:
            log.info("no memoryd worker is running: serving the queue in this process")
            # Serving only for one command: the scheduled upkeep is the daemon's business.
            await self.serve(scheduled=False, model_when_used=True)

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
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"the private Redis (pid {service.pid}) {how}"

    async def _private_redis_exit(self, *errors: BaseException | None) -> str | None:
        """The private Redis's death, when a worker ended on a connection error: that error
        comes before the server's exit can be seen, and a loaded machine (or a server in an
        fsync) may take any time to show it. So wait for the one or the other fact, the exit or
        an answer, bounded by REDIS_LOST_SECONDS rather than by a guess at the delay; None when
        it lives, answers, or is not ours."""
        lost = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
        if self.redis_service is None or not any(isinstance(e, lost) for e in errors):
            # No lost connection to wait on (a ResponseError is the server answering).
            return self._private_redis_died()
        deadline = time.monotonic() + REDIS_LOST_SECONDS
        while time.monotonic() < deadline:
            if died := self._private_redis_died():
                return died
            assert self.redis is not None
            try:
                await asyncio.wait_for(self.redis.ping(), CLOSE_SECONDS)
                return None
            except redis.exceptions.ResponseError:
                return None  # an answer all the same: a full disk refuses even PING (MISCONF)
            except (redis.exceptions.RedisError, OSError, TimeoutError):
                await asyncio.sleep(0.05)
        return self._private_redis_died()

    def _lost(self, reason: str) -> MemorydError:
        """The end of serving, said once: Redis is gone for good or refuses writes. The exit
        code is not 0, so a service manager starts memoryd (and a private Redis) again."""
        self._redis_lost = f"{reason}; memoryd stops"
        self._serving.ended = MemorydError(self._redis_lost)
        return self._serving.ended

    async def _supervise(self) -> None:
        """Beat for `live_workers`, and watch Redis, the database and the workers. A private
        Redis that dies is started again, and new workers go on with its queue. Redis refusing
        writes (MISCONF: its disk is full), staying unreachable, a database that could not be
        opened again, or a worker failing for another reason raises, which ends the serving
        with one line."""
        last_beat = failing_since = 0.0
        while True:
            done, _ = await asyncio.wait(
                self._tasks, timeout=1, return_when=asyncio.FIRST_COMPLETED
            )
            errors = [task.exception() for task in done if not task.cancelled()]
            if died := await self._private_redis_exit(*errors):
                await self._restart_redis(died)
                last_beat = failing_since = time.monotonic()
                continue
            if self.store is not None and (broken := self.store.broken) is not None:
                # Every job would fail on it: a restart by the service manager opens it again.
                self._serving.ended = MemorydError(f"{broken}; memoryd stops")
                raise self._serving.ended
            for task in done:
                if isinstance(exc := task.exception(), redis.exceptions.RedisError):
                    raise self._lost(_failure(self.settings.queue_url, exc)) from None
                if exc is not None:
                    raise exc
                return  # a worker that ended by itself: serving is over
            if time.monotonic() - last_beat < queue.WORKER_KEY_TTL / 3:
                continue
            try:
                await asyncio.wait_for(self._beat(), CLOSE_SECONDS)
                last_beat, failing_since = time.monotonic(), 0.0
            except redis.exceptions.ResponseError as exc:
                raise self._lost(_failure(self.settings.queue_url, exc)) from None
            except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since >= REDIS_LOST_SECONDS:
                    raise self._lost(
                        f"Redis at {self.settings.queue_url} unreachable for "
                        f"{REDIS_LOST_SECONDS:.0f}s ({queue.redis_reason(exc)})"
                    ) from None

    async def _restart_redis(self, died: str, ours: bool = True) -> None:
        """Start the private Redis again, with what its append-only file kept, and serve its
        queue with new workers. The jobs under way are cancelled first (nothing could record
        them) and run again: every work job may run twice (memoryd/jobs.py). `ours`: the jobs
        marked under way are ours, not those of a worker that died before this start."""
        service = self.redis_service
        assert service is not None
        self._count_restart(died)
        await self._cancel_jobs()
        self._tasks, self.workers = [], []
        try:
            pid = await asyncio.to_thread(service.start, REDIS_START_SECONDS)
            freed = await self._start_workers(died=not ours)
        except MemorydError as exc:
            raise self._lost(f"{died}, and starting it again failed ({exc})") from None
        except (redis.exceptions.RedisError, OSError) as exc:
            reason = queue.redis_reason(exc)
            raise self._lost(f"{died}, and it failed again at once ({reason})") from None
        log.warning(
            "%s: started it again (pid %d) with the queue its append-only file kept; "
            "%d jobs under way run again",
            died,
            pid,
            freed,
        )

    def _count_restart(self, died: str) -> None:
        """Count a restart of the private Redis; one more than REDIS_RESTARTS in the window
        ends the serving (the service manager restarts memoryd as a whole)."""
        assert self.redis_service is not None
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < REDIS_RESTART_WINDOW]
        if len(self._restarts) >= REDIS_RESTARTS:
            raise self._lost(
                f"{died}, {len(self._restarts) + 1} times in {REDIS_RESTART_WINDOW / 60:.0f} "
                f"minutes (see {self.redis_service.dir / 'redis.log'})"
            )
        self._restarts.append(now)

    async def _cancel_jobs(self) -> None:
        """Stop the workers without arq's orderly close, which would wait on a dead server:
        their jobs are cancelled and stay on the queue (Redis kept it), to run again."""
        finishes = _shielded_finishes()
        for worker in self.workers:
            worker.handle_sig(signal.SIGUSR1)
            if worker.tasks:
                done, _ = await asyncio.wait(worker.tasks.values(), timeout=CLOSE_SECONDS)
                # Their connection errors are the loss already reported, once.
                for task in done:
                    if not task.cancelled():
                        task.exception()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        await _retrieve(finishes | _shielded_finishes())
        for worker in self.workers:
            if worker._pool is not None:  # arq keeps it private; close() would wait on Redis
                await worker._pool.aclose()

    async def wait_serving(self) -> None:
        """Block until serving fails for good (the supervisor raises: Redis lost, a worker
        failed) or the caller is cancelled."""
        if self._supervisor is not None:
            await self._supervisor

    async def _close_workers(self) -> None:
        if self._redis_lost:
            await self._cancel_jobs()
            return
        task = asyncio.current_task()
        # A close that runs because a signal cancelled the command is already "cancelling".
        cancelled = task.cancelling() if task is not None else 0
        # The jobs the close cuts short run again at the next start: not a try they spent.
        cut = [job_id for worker in self.workers for job_id in worker.tasks]
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
        if cut and self.redis is not None:
            try:
                await asyncio.wait_for(
                    queue.give_back_tries(self.redis, cut, orphaned=False), CLOSE_SECONDS
                )
            except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                log.warning("the tries of %d jobs cut short are not given back (%s)", len(cut), exc)

    async def close(self) -> None:
        # Whatever fails on the way, the private Redis is stopped: never left orphaned.
        try:
            if self.embedder is not None and self._own_embedder:
                self.embedder.interrupt()
            if self._page is not None:
                await self._page.close()
                self._page = None
            if self._channel is not None:
                # No new query starts (MCP sessions end); those under way end with the jobs.
                self._channel.close()
                self._channel = None
                try:
                    self.settings.channel_socket.unlink(missing_ok=True)
                except OSError as exc:  # a data dir made read-only: the next start replaces it
                    log.warning("query channel socket left in place: %s", exc)
            if self._supervisor is not None:
                # Cancelled first: no restart begins while the workers close.
                self._supervisor.cancel()
                with contextlib.suppress(BaseException):
                    await self._supervisor
                self._supervisor = None
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
            if self._ctx is not None and self._table is not None:
                await self._table.close_context(self._ctx)
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
            if self._serving_lock is not None:
                self._serving_lock.release()
                self._serving_lock = None
            if self._daemon_lock is not None:
                self._daemon_lock.release()
                self._daemon_lock = None

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@contextlib.asynccontextmanager
async def serving_here(settings: Settings) -> AsyncIterator[ArqRedis | None]:
    """The private Redis, the database and a worker started in this process for the length of
    a one-shot command's block (memoryd/client.py's `connect` asks for it when no daemon
    runs); None, with nothing left running, when another process took the data dir first."""
    rt = Runtime(settings)
    try:
        served = await rt.start_queue(one_shot=True)
        await rt.serve_if_needed()
    except ServedElsewhere:
        await rt.close()
        yield None
        return
    except BaseException:
        await rt.close()
        raise
    try:
        yield served
    finally:
        await rt.close()


def _failure(url: str, exc: redis.exceptions.RedisError) -> str:
    refused = isinstance(exc, redis.exceptions.ResponseError) and queue.server_lost(exc)
    what = "refuses writes" if refused else "failed under a worker"
    return f"Redis at {url} {what} ({queue.redis_reason(exc)})"
