"""`memoryd service uninstall --purge`: every file memoryd keeps on this machine, removed.

What goes: the data dir (database, search indexes, the private Redis and its append-only file,
migration backups, the model, sockets, hook state, launchd's log file) and the config file.
Nothing else is touched: the data dir must hold only the entries memoryd creates, or nothing
is deleted (a data dir set to a folder with other files in it must not be emptied). The
daemon's lock is held while files go, so no daemon starts on a half-deleted data dir.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from memoryd.agent import integrate
from memoryd.config import Settings
from memoryd.database.compact import DB_DIR
from memoryd.database.export import BACKUPS
from memoryd.embedded import daemon_lock_path, daemon_pid, socket_alive, stop_orphan
from memoryd.errors import MemorydError
from memoryd.liveness import HeldLock, holder
from memoryd.paths import CHANNEL_SOCKET
from memoryd.store.connection import replacement_of

# Every name memoryd creates at the top of a data dir. A new one must be added here: the
# purge test runs a real daemon and fails on an entry this list does not name.
ENTRIES = frozenset(
    {
        DB_DIR,
        f"{DB_DIR}.compacting",  # memoryd/database/compact.py
        replacement_of(Path(DB_DIR)).name,
        f"{DB_DIR}.replaced",  # memoryd/store/connection.py
        BACKUPS,
        CHANNEL_SOCKET,
        daemon_lock_path(Path()).name,
        ".write-test",  # memoryd/embedded.py's probe
        "redis",
        "search",  # memoryd/searchindex/indexsync.py
        "models",
        "run",  # the workers' locks
        "hooks",  # memoryd/agent/hooks.py
        "logs",  # launchd's log file
        "mcp-token",  # memoryd/agent/mcp_server.py
    }
)


@dataclass
class Plan:
    data_dir: Path
    config_file: Path
    entries: list[Path] = field(default_factory=list)  # memoryd's, present
    config_exists: bool = False
    # What memoryd stored that is not a file here (an external database or Redis).
    elsewhere: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        lines = []
        if self.entries:
            lines.append(f"{self.data_dir} ({', '.join(sorted(p.name for p in self.entries))})")
        if self.config_exists:
            lines.append(str(self.config_file))
        return lines


def plan(settings: Settings, config_file: Path) -> Plan:
    """What a purge would remove. Refused while a memoryd process uses the data dir, or when
    the data dir holds entries memoryd did not make."""
    data = settings.data_dir
    found = Plan(data, config_file, config_exists=config_file.is_file())
    if data.is_dir():
        foreign = sorted(e.name for e in data.iterdir() if e.name not in ENTRIES)
        if foreign:
            raise MemorydError(
                f"{data} holds entries memoryd did not create ({', '.join(foreign)}): "
                "nothing deleted; is this the right data dir? Move them away, then purge again"
            )
        found.entries = sorted(data.iterdir())
        _refuse_users(data)
    if settings.surreal_url is not None and not settings.surreal_url.startswith(
        ("mem://", "memory")
    ):
        found.elsewhere.append(
            f"the database at {settings.surreal_url} (namespace {settings.surreal_namespace}, "
            f"database {settings.surreal_database}) is not removed: remove it on its server"
        )
    if settings.redis_url is not None:
        found.elsewhere.append(
            f"the queue on {settings.redis_url} keeps memoryd's jobs and their kept results "
            "until they expire (at most a day), and its own persistence files keep what it held"
        )
    return found


def _refuse_users(data: Path, daemon: bool = True) -> None:
    """Raise while a memoryd daemon or worker uses the data dir (each holds a lock in it)."""
    pid = daemon_pid(data) if daemon else None
    if pid is not None:
        raise MemorydError(
            f"a memoryd daemon still uses {data} (pid {pid}): stop it, then purge again; "
            "nothing deleted"
        )
    run = data / "run"
    workers = [holder(lock) for lock in run.glob("*.lock")] if run.is_dir() else []
    if any(pid is not None for pid in workers):
        live = ", ".join(str(pid) for pid in workers if pid is not None)
        raise MemorydError(
            f"memoryd workers still use {data} (pids {live}): stop them, then purge again; "
            "nothing deleted"
        )


def execute(found: Plan, settings: Settings) -> list[str]:
    """Delete what `found` names, holding the daemon's lock; what was removed, line by line."""
    data = found.data_dir
    said: list[str] = []
    lock: HeldLock | None = None
    if found.entries:
        try:
            lock = HeldLock(daemon_lock_path(data))
        except BlockingIOError:
            raise MemorydError(
                f"a memoryd daemon still uses {data} (pid {daemon_pid(data)}): "
                "stop it, then purge again; nothing deleted"
            ) from None
        try:
            _refuse_users(data, daemon=False)  # a worker may have started since the plan
            if settings.embedded_redis and socket_alive(settings.redis_socket):
                # A private Redis left by a daemon that was killed: stopped as a start would.
                stop_orphan(settings.redis_socket)
            for entry in found.entries:
                if entry.name != lock.path.name:
                    _remove(entry)
        finally:
            lock.release(remove=True)
    if data.is_dir():
        try:
            data.rmdir()  # empty now: nothing but memoryd's entries was in it
        except OSError as exc:
            raise MemorydError(f"{data} was not emptied: {exc.strerror or exc}") from None
        said.append(f"removed {data}")
    if found.config_exists:
        found.config_file.unlink(missing_ok=True)
        said.append(f"removed {found.config_file}")
        # Its folder too, when it is memoryd's own and nothing else is left in it.
        if found.config_file.parent.name == "memoryd":
            with contextlib.suppress(OSError):
                found.config_file.parent.rmdir()
    return said


def _remove(entry: Path) -> None:
    try:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
    except OSError as exc:
        raise MemorydError(f"purge stopped at {entry}: {exc.strerror or exc}") from None


def still_registered() -> list[str]:
    """The agent clients whose configuration still runs memoryd (hooks, MCP server)."""
    clients = []
    for client in integrate.CLIENTS:
        try:
            if integrate.registered(client):
                clients.append(client)
        except (OSError, ValueError, MemorydError):
            continue  # an unreadable client config: `memoryd doctor` reports it
    return clients
