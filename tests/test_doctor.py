"""`memoryd doctor`: each check on a real setup (private Redis, embedded SurrealDB, the model,
real directory trees), healthy and broken, and what it tells the user to do."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

from memoryd import projects, queue
from memoryd.cli import doctor
from memoryd.config import Settings
from memoryd.daemon.runtime import Runtime
from memoryd.database.migrate import DATA_STEPS, schema_files
from memoryd.embedded import socket_alive
from memoryd.embedding import Embedder
from memoryd.errors import MemorydError
from memoryd.store import Store
from memoryd.watch.repos import RepoWatcher
from tests.conftest import git_init, settings_for

# The last step of the migration sequence, as `schema_version` records it: what a database of
# this memoryd reports as its schema.
NEWEST_STEP = max([path.name for path in schema_files()] + [step.step for step in DATA_STEPS])


def by_name(checks: list[doctor.Check]) -> dict[str, list[doctor.Check]]:
    found: dict[str, list[doctor.Check]] = {}
    for c in checks:
        found.setdefault(c.name, []).append(c)
    return found


def small_repo(path: Path) -> Path:
    (path / "pkg" / "sub").mkdir(parents=True)
    (path / "pkg" / "sub" / "mod.py").write_text("def f():\n    return 1\n")
    git_init(path)
    return path


async def test_a_healthy_setup_with_no_daemon(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No agent client configured in this home: the agents check says how to register one.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for variable in ("CLAUDE_CONFIG_DIR", "CODEX_HOME"):
        monkeypatch.delenv(variable, raising=False)
    repo = small_repo(tmp_path / "repo")
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    settings = settings_for(data_dir, extra_repos=[repo], transcripts=[transcripts])
    checks = await doctor.diagnose(settings)
    assert [c.level for c in checks] == ["ok"] * (len(checks) - 1) + ["warn"], doctor.render(checks)
    found = by_name(checks)
    assert list(found) == [
        "data_dir",
        "redis",
        "database",
        "model",
        "repos",
        "transcripts",
        "inotify",
        "agents",
    ]
    assert found["agents"][0].summary == "no agent client has memoryd registered"
    assert "started for this check" in found["redis"][0].summary
    assert "created at first start" in found["database"][0].summary
    assert "384 dims" in found["model"][0].summary
    # The project's directories are three; .git's are said apart (watchdog watches them too,
    # so the inotify budget counts them).
    git_dirs = sum(len(dirs) for _, dirs, _ in os.walk(repo / ".git")) + 1
    assert found["repos"][0].summary == (
        f"{repo} (3 directories, and {git_dirs} inside .git (watched too))"
    )
    assert found["inotify"][0].summary.startswith(f"{3 + git_dirs + 1} directories to watch")
    assert doctor.exit_code(checks) == 0
    # It left nothing running and created no database.
    assert not socket_alive(settings.redis_socket)
    assert not (data_dir / "db").exists()


async def test_the_database_held_by_a_running_daemon_is_asked_through_the_queue(
    stack: Runtime,
) -> None:
    """A second process cannot open the embedded database: doctor asks the daemon instead."""
    code = (
        "import json; from memoryd.cli import doctor; from memoryd.config import load_settings; "
        f"s = load_settings(data_dir={str(stack.settings.data_dir)!r}); "
        "print(json.dumps([c.as_dict() for c in doctor.run(s, ['redis', 'database'])]))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, errors = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, errors.decode()
    checks = [doctor.Check(**c) for c in json.loads(out)]
    found = by_name(checks)
    assert found["redis"][0].level == "ok"
    assert "started for this check" not in found["redis"][0].summary  # the daemon's Redis
    database = found["database"][0]
    assert database.level == "ok", database
    assert f"served by the running memoryd (pid {os.getpid()})" in database.summary
    assert re.search(rf"schema {re.escape(NEWEST_STEP)}; \d+ code_chunk", database.summary)
    [answers] = found["channel"]
    assert answers.level == "ok"
    assert re.fullmatch(
        rf"{stack.settings.channel_socket} answers \(status in \d+ ms\)", answers.summary
    )


async def test_a_daemon_silent_on_its_channel_fails_the_check(stack: Runtime) -> None:
    """Hooks and the MCP server ask the daemon on its socket: a socket nobody answers is a
    failure with what to do, though the queue still works."""
    assert stack._channel is not None
    stack._channel.close()  # the socket file stays; nobody accepts on it any more
    (check,) = [
        c for c in await doctor.diagnose(stack.settings, ["database"]) if c.name == "channel"
    ]
    assert check.level == "fail"
    assert check.summary.startswith(
        f"the daemon does not answer on {stack.settings.channel_socket}: "
    )
    assert check.fix is not None and "restart" in check.fix


async def test_the_repos_a_running_daemon_watches_are_checked(
    stack: Runtime, tmp_path: Path
) -> None:
    """The daemon's --repo flags are not in doctor's configuration: it asks the watchers."""
    assert stack.redis is not None
    repo = small_repo(tmp_path / "repo")
    watcher = RepoWatcher(stack.redis, [projects.resolve(repo)], 0.1, 32)
    await watcher.start()
    try:
        code = (
            "import json; from memoryd.cli import doctor; "
            "from memoryd.config import load_settings; "
            f"s = load_settings(data_dir={str(stack.settings.data_dir)!r}); "
            "print(json.dumps([c.as_dict() for c in doctor.run(s, ['repos'])]))"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, errors = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, errors.decode()
        [check] = [doctor.Check(**c) for c in json.loads(out)]
        assert check.level == "ok" and check.summary.startswith(f"{repo} (3 directories, ")
    finally:
        await watcher.stop()
    assert await queue.watched_roots(stack.redis) == []  # a stopped watcher says so


async def test_a_locked_database_with_nobody_serving_says_what_to_do(data_dir: Path) -> None:
    holder = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        checks = await doctor.diagnose(settings_for(data_dir), ["redis", "database"])
    finally:
        await holder.close()
    database = by_name(checks)["database"][0]
    assert database.level == "fail"
    assert "locked by another memoryd process" in database.summary
    assert database.fix is not None and "stop" in database.fix and "server mode" in database.fix
    assert doctor.exit_code(checks) == 1


async def test_an_existing_database_opens_and_reports_its_schema(
    data_dir: Path, embedder: Embedder
) -> None:
    rt = Runtime(settings_for(data_dir), embedder)
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve()  # creates and migrates the database, then goes away
    finally:
        await rt.close()
    checks = await doctor.diagnose(settings_for(data_dir), ["database"])
    (database,) = checks
    assert database.level == "ok"
    assert database.summary.endswith(
        f"opens: schema {NEWEST_STEP}; 0 code_chunk, 0 memory, 0 session"
    )


async def test_unreachable_redis_fails_with_the_setting_to_fix(data_dir: Path) -> None:
    settings = settings_for(data_dir, redis_url="redis://127.0.0.1:1/0")
    checks = await doctor.diagnose(settings, ["redis", "database"])
    found = by_name(checks)
    assert found["redis"][0].level == "fail"
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in found["redis"][0].summary
    assert "MEMORYD_REDIS_URL" in (found["redis"][0].fix or "")
    # The database is still checked, directly.
    assert found["database"][0].level == "ok"


async def test_a_model_that_cannot_load_here(data_dir: Path) -> None:
    settings = settings_for(data_dir, model="nobody/no-such-model")
    (check,) = await doctor.diagnose(settings, ["model"])
    assert check.level == "fail"
    assert "nobody/no-such-model" in check.summary
    assert check.fix is not None and "offline default" in check.fix


def test_data_dir_permissions_and_socket_length(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    check = doctor.check_data_dir(settings_for(loose))
    assert check.level == "warn" and check.fix == f"chmod 700 {loose}"

    private = tmp_path / "private"
    (private / "db").mkdir(parents=True)
    private.chmod(0o700)
    (private / "db" / "wal").write_text("x")
    (private / "db" / "wal").chmod(0o644)
    check = doctor.check_data_dir(settings_for(private))
    assert check.level == "warn" and "mode 0644" in check.summary
    assert check.fix is not None and check.fix.startswith(f"chmod -R go-rwx {private}")
    (private / "db" / "wal").chmod(0o600)
    assert doctor.check_data_dir(settings_for(private)).level == "ok"

    deep = tmp_path / ("d" * 90)
    check = doctor.check_data_dir(settings_for(deep))
    assert check.level == "fail" and "too long for the private Redis" in check.summary
    assert doctor.check_data_dir(settings_for(tmp_path / "new")).summary.endswith(
        "memoryd creates it (0700) at first start"
    )


def test_watched_paths(tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo")
    missing = tmp_path / "gone"
    settings = Settings(data_dir=tmp_path / "d", repos=[repo, missing], transcripts=[missing])
    found = by_name(doctor.check_paths(settings, ["repos", "transcripts", "inotify"]))
    assert [c.level for c in found["repos"]] == ["ok", "fail"]
    assert found["repos"][1].summary.startswith(f"{missing} does not exist")
    # A folder the user named is worth a warning; an agent's default folder is not.
    assert found["transcripts"][0] == doctor.Check(
        "transcripts",
        "warn",
        f"{missing} does not exist yet; memoryd watches for it",
        "check the path in `transcripts` (memoryd follows it once it appears)",
    )
    assert found["inotify"][0].level == "ok"
    tree = doctor.Tree(repo, dirs=4, unreadable=[str(repo / "secret")])
    check = doctor.check_tree("repos", repo, tree, optional=False)
    assert check.level == "warn" and "1 unreadable directories" in check.summary
    assert doctor.check_tree("transcripts", missing, None, optional=True).level == "ok"


def test_walk_counts_every_directory_and_stops_at_the_budget(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / "t" / f"d{i}" / "inner").mkdir(parents=True)
    (tmp_path / "t" / "link").symlink_to(tmp_path / "t" / "d0")  # not followed
    tree = doctor.walk_tree(tmp_path / "t", stop_after=1000)
    assert tree.dirs == 11 and not tree.truncated
    capped = doctor.walk_tree(tmp_path / "t", stop_after=3)
    assert capped.truncated and capped.dirs == 4


def test_inotify_budget() -> None:
    assert doctor.check_inotify(1000, 2, 8192, 128, False).level == "ok"
    warned = doctor.check_inotify(5000, 2, 8192, 128, False)
    assert warned.level == "warn" and "editors and IDEs" in warned.summary
    failed = doctor.check_inotify(9000, 2, 8192, 128, True)
    assert failed.level == "fail" and "9000+ directories" in failed.summary
    assert failed.fix is not None and "fs.inotify.max_user_watches=524288" in failed.fix
    assert doctor.suggested_watches(400_000) == 1_048_576
    assert doctor.check_inotify(10, 100, 8192, 128, False).level == "warn"  # instances
    assert doctor.check_inotify(10, 1, None, None, False).level == "ok"  # not Linux


def test_inotify_limit_read_from_this_kernel() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    limit = doctor.read_limit("max_user_watches")
    assert limit is not None and limit > 0


def test_report_and_unknown_checks(data_dir: Path) -> None:
    checks = [
        doctor.ok("redis", "fine"),
        doctor.fail("model", "broken", "reinstall"),
    ]
    assert doctor.render(checks).splitlines() == [
        "ok    redis        fine",
        "fail  model        broken",
        "                   fix: reinstall",
    ]
    assert doctor.exit_code(checks) == 1
    with pytest.raises(MemorydError, match="unknown check bogus"):
        doctor.run(settings_for(data_dir), ["bogus"])


def test_doctor_creates_nothing_it_says_is_absent_and_loads_no_model(tmp_path: Path) -> None:
    """doctor said the data dir "does not exist yet", then created it with `redis/` and
    `models/` in it; and each run took 14-16 s on a loaded machine, loading the model."""
    import subprocess

    data = tmp_path / "fresh" / "data"
    code = (
        "import json, sys; from memoryd.cli import doctor; "
        "from memoryd.config import load_settings; "
        f"s = load_settings(data_dir={str(data)!r}); "
        "checks = doctor.run(s, ['data_dir', 'redis', 'database', 'model']); "
        "print(json.dumps({'checks': [c.as_dict() for c in checks], "
        "'fastembed': 'fastembed' in sys.modules}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    checks = [doctor.Check(**c) for c in report["checks"]]
    assert [c.level for c in checks] == ["ok"] * 4, doctor.render(checks)
    found = by_name(checks)
    assert "does not exist yet" in found["data_dir"][0].summary
    assert found["redis"][0].summary.endswith(
        "(started for this check), in a scratch dir (no data dir yet)"
    )
    assert "created at first start" in found["database"][0].summary
    assert "(384 dims): its files are in place" in found["model"][0].summary
    assert report["fastembed"] is False  # the model was not loaded
    assert not (tmp_path / "fresh").exists()
