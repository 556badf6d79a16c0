"""Shared fixtures: private data dirs, a real source tree nobody here wrote, a running stack."""

from __future__ import annotations

import asyncio
import compileall
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from arq import ArqRedis

from memoryd import jobs, projects, queue
from memoryd.client import Client
from memoryd.config import DEFAULT_MODEL, DEFAULT_SCHEDULE, SCHEDULE_OFF, Settings, load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.embedded import EmbeddedRedis
from memoryd.embedding import Embedder
from memoryd.results import SearchRequest

VENV_BIN = Path(sys.executable).parent
MEMORYD = str(VENV_BIN / "memoryd")
T = TypeVar("T")


# --- running side by side (pyproject's addopts: `-n 3 --dist loadgroup`) ---


GROUPS = "xdist-groups.json"  # in the run's folder: test id -> its group, from a worker


def _run_folder(config: pytest.Config) -> Path:
    """The run's folder, shared by its workers (each has its own folder under it)."""
    folder = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return folder.parent if _worker(config) else folder


def _worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id, None in the controller or a run without workers. From
    the config, not PYTEST_XDIST_WORKER: a pytest a test starts inherits its worker's variable."""
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else None


def pytest_configure(config: pytest.Config) -> None:
    """The project's modules compiled once, before any test starts a process: with
    PYTHONDONTWRITEBYTECODE set (as on these machines) nothing writes their bytecode, so each
    of the hundreds of `memoryd` processes the suite starts compiled every module it imports
    again (a third of a CPU second of its start). Installed packages come compiled."""
    if _worker(config) is None:
        root = Path(__file__).parent.parent
        for package in ("memoryd", "workers"):
            compileall.compile_dir(root / package, quiet=1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that share a module-scoped fixture (a daemon, an ingested data dir) run on one
    worker, one after the other, so that it starts once. xdist's own loadgroup tells the
    scheduler a test's group by a suffix it writes into the worker's test ids, which pytest 9
    no longer reads (its ids are structured): every test was scheduled alone and each such
    fixture was built on both workers, again whenever a worker came back to its module. So a
    worker writes the groups down for the scheduler below."""
    groups: dict[str, str] = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(
            name in info.names_closure and defs and defs[-1].scope == "module"
            for name, defs in info.name2fixturedefs.items()
        ):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        names = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group")})
        if names:
            groups[item.nodeid] = "_".join(names)
    if worker := _worker(config):
        # Both workers collect the same tests; each writes whole, then renames.
        written = _run_folder(config) / f"{GROUPS}.{worker}"
        written.write_text(json.dumps(groups))
        written.replace(_run_folder(config) / GROUPS)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadgroup` with the groups the workers wrote: a group is one unit of work, sent
    to one worker whole; every other test is a unit of its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        groups: dict[str, str] | None = None
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            # Asked first once every worker has collected (so has written the file).
            if self.groups is None:
                self.groups = json.loads((_run_folder(config) / GROUPS).read_text())
            return self.groups.get(nodeid, nodeid)

        def _assign_work_unit(self, node: object) -> None:
            # Longest first (by the durations last measured), so that the run does not end on
            # one worker busy with a long unit while the other has nothing left: xdist's own
            # order (groups by their number of tests, then the rest as collected) left the
            # longest single tests to the end. Units of unknown length keep that order (the
            # sort is stable).
            if not self.ordered:
                self.ordered = True
                spent = measured_seconds(Path(__file__).with_name(DURATIONS))
                units = sorted(
                    self.workqueue.items(),
                    key=lambda unit: -sum(spent.get(nodeid, 0.0) for nodeid in unit[1]),
                )
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)  # type: ignore[arg-type]

    return Groups(config, log)


# The slowest tests of a whole run, as pytest's `--durations` printed them (paste a new list
# from CI's output when it has changed): only the order in which tests are handed out uses it.
DURATIONS = "durations.txt"


def measured_seconds(listing: Path) -> dict[str, float]:
    """Seconds per test id (its setup, call and teardown summed) in a `--durations` listing."""
    spent: dict[str, float] = {}
    for line in listing.read_text().splitlines():
        if found := re.fullmatch(r"([\d.]+)s (?:setup|call|teardown) +(\S+)", line.strip()):
            spent[found[2]] = spent.get(found[2], 0.0) + float(found[1])
    return spent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A test marked `alone` has the machine to itself: it takes a lock that every test
    (setup, call and teardown) holds shared, exclusively. The turnstile lets it in ahead of the
    tests that come after it, which would otherwise always hold the shared lock between them."""
    folder = _run_folder(item.config)
    alone = item.get_closest_marker("alone") is not None
    with (
        (folder / "turnstile.lock").open("a") as turnstile,
        (folder / "machine.lock").open("a") as machine,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


def site_package(name: str) -> Path:
    module = __import__(name)
    return Path(module.__file__).parent


@pytest.fixture(scope="session")
def short_tmp() -> Iterator[Path]:
    """The session's folder for data dirs, removed at its end (with anything a killed process
    left behind). Short, under /tmp: the Redis unix socket path must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="md-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def data_dir(short_tmp: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir=short_tmp))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# No scheduled upkeep in the daemons and workers a test starts, in this process or as a
# `memoryd run`: a decay (minute 17 of every hour), reembed (every 5 minutes) or prune whose
# slot fell inside a test changed the importance, vectors, rows or maintenance_run records it
# compared, depending on the time of day the test ran (CI met it in tests/test_tailing.py).
# Tests run upkeep themselves; one that schedules it says so.
SCHEDULE_VARIABLE = "MEMORYD_MAINTENANCE_SCHEDULE"
QUIET_SCHEDULE = dict.fromkeys(DEFAULT_SCHEDULE, SCHEDULE_OFF)
# Decay's scheduled job registered with the workers (the test enqueues its slots itself), at a
# minute no run meets: 29 February on a Monday (arq wants both), next in 2044.
DECAY_REGISTERED = {**QUIET_SCHEDULE, jobs.DECAY.name: "0 0 29 2 1"}


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the developer's own config file or MEMORYD_* environment."""
    for key in list(os.environ):
        if key.startswith("MEMORYD_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("MEMORYD_CONFIG", str(tmp_path / "no-config.toml"))
    # Never watch the transcripts of whoever runs the tests.
    monkeypatch.setenv("MEMORYD_TRANSCRIPTS", "[]")
    monkeypatch.setenv(SCHEDULE_VARIABLE, json.dumps(QUIET_SCHEDULE))


def env_without(*prefixes: str) -> dict[str, str]:
    """This process's environment for a memoryd process a test starts: without the MEMORYD_*
    settings of whoever runs the tests (a module's fixtures start before `isolated_config`)
    nor the variables of `prefixes`, and with no scheduled upkeep (QUIET_SCHEDULE)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", *prefixes))}
    return env | {SCHEDULE_VARIABLE: json.dumps(QUIET_SCHEDULE)}


def git_init(path: Path) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "import"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env)


def built_once(config: pytest.Config, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name` of the run's folder, which `build` fills once for the whole run: the
    first worker to ask builds it, another waits for it (a lock beside it) and takes it as
    built. For what no test changes; the folder stays until pytest's own cleanup."""
    folder = _run_folder(config) / name
    with (_run_folder(config) / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder.with_name(f"{name}.built")
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def arq_tree(request: pytest.FixtureRequest) -> Path:
    """arq's installed source, copied and git-initialised: a real tree nobody here wrote. One
    for the run (`built_once`): `arq_indexed` names its path. A test that changes it changes a
    copy."""

    def build(root: Path) -> None:
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(site_package("arq"), root, ignore=ignore)
        (root / ".gitignore").write_text("ignored_dir/\n*.tmp\n")
        (root / "ignored_dir").mkdir()
        (root / "ignored_dir" / "secret.py").write_text("def hidden_function():\n    return 1\n")
        (root / "scratch.tmp").write_text("temporary\n")
        git_init(root)

    return built_once(request.config, "arq", build)


def settings_for(data_dir: Path, **extra: object) -> Settings:
    return load_settings(data_dir=data_dir, **extra)


@pytest.fixture(scope="session")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    """The default model, loaded once for the session: loading it is most of a runtime's
    start-up. A runtime takes it when its settings name the default model."""
    batch = Settings().embed_batch_size
    return Embedder(DEFAULT_MODEL, tmp_path_factory.mktemp("models"), batch)


@asynccontextmanager
async def _serving(
    data_dir: Path, embedder: Embedder, scheduled: bool, **settings: object
) -> AsyncIterator[Runtime]:
    rt = Runtime(settings_for(data_dir, **settings), embedder)
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=scheduled)
        yield rt
    finally:
        await rt.close()


def served(data_dir: Path, embedder: Embedder, work: Callable[[Client], Awaitable[T]]) -> T:
    """`work` with a client of `data_dir` served in this process with the session's model: the
    jobs a one-shot CLI command asks, without a process start and a model load each. For a
    test about something else than the command (its status counts, its export)."""

    async def main() -> T:
        async with _serving(data_dir, embedder, scheduled=False) as rt:
            assert rt.redis is not None
            return await work(Client(rt.redis, rt.settings))

    return asyncio.run(main())


def status_of(data_dir: Path, embedder: Embedder) -> dict[str, Any]:
    """What `memoryd status --json` prints for `data_dir` (no daemon running)."""

    async def work(memoryd: Client) -> dict[str, Any]:
        return await memoryd.status()

    return served(data_dir, embedder, work)


@asynccontextmanager
async def external_redis_worker(
    data_dir: Path, short_tmp: Path, embedder: Embedder
) -> AsyncIterator[tuple[EmbeddedRedis, Runtime]]:
    """Server mode as far as it runs here: a Redis of its own (not a data dir's private one)
    and a worker serving it, not exclusive, so it holds no daemon lock and no query channel."""
    redis = EmbeddedRedis(Path(tempfile.mkdtemp(dir=short_tmp)))
    redis.start()
    try:
        worker = Runtime(settings_for(data_dir, redis_url=redis.url), embedder)
        try:
            await worker.start_queue()
            await worker.serve(scheduled=False)
            yield redis, worker
        finally:
            await worker.close()
    finally:
        redis.stop()


@pytest_asyncio.fixture
async def stack(data_dir: Path, embedder: Embedder) -> AsyncIterator[Runtime]:
    """The embedded defaults, serving in this process: private Redis, SurrealKV, real model.
    No scheduled upkeep: a scheduled run records itself (maintenance_run) and reembed runs
    every 5 minutes, so a test whose run crossed a slot found rows it never wrote. Tests run
    upkeep themselves."""
    async with _serving(data_dir, embedder, scheduled=False) as rt:
        yield rt


def indexed_template(
    tree: Path, embedder: Embedder, short_tmp: Path, into: Path | None = None
) -> Path:
    """A data dir holding `tree` indexed (its chunks, their vectors, the search indexes, the
    code graph): a test that needs the tree indexed only to ask about it, or to change it,
    starts on a copy (`copy_data_dir`, `serving_copy`) instead of embedding its chunks again
    (7 CPU s for arq's ~100). The index names the tree's path: the copy is of `tree` itself.
    Built in `short_tmp` (the Redis socket's path must be short), then moved `into`, if given."""
    built = Path(tempfile.mkdtemp(dir=short_tmp))

    async def build() -> None:
        async with _serving(built, embedder, scheduled=False) as rt:
            await index_tree(rt, tree)

    asyncio.run(build())
    if into is None:
        return built
    shutil.move(built, into)
    return into


def restored(tree: Path) -> Path:
    """`tree` as its last commit left it: what a test before changed, staged, moved or added
    (not committed, not gitignored) undone, for the next test on its indexed template."""
    git(tree, "reset", "-q", "--hard")
    git(tree, "clean", "-q", "-fd")
    return tree


@pytest.fixture(scope="module")
def tree_indexed(tree: Path, embedder: Embedder, short_tmp: Path) -> Path:
    """The module's `tree` (a module-scoped fixture of the module: a git tree of its own,
    which its tests may change) indexed once for the module."""
    return indexed_template(tree, embedder, short_tmp)


@pytest_asyncio.fixture
async def tree_stack(
    tree: Path, tree_indexed: Path, data_dir: Path, embedder: Embedder
) -> AsyncIterator[Runtime]:
    """`stack` on a copy of `tree_indexed`, with `tree` as its last commit left it."""
    restored(tree)
    async with serving_copy(tree_indexed, data_dir, embedder) as rt:
        yield rt


@pytest.fixture(scope="session")
def arq_indexed(
    request: pytest.FixtureRequest, arq_tree: Path, embedder: Embedder, short_tmp: Path
) -> Path:
    """`arq_tree` indexed (`indexed_template`), once for the run (`built_once`): each worker
    that built it embedded the same ~100 chunks."""

    def build(into: Path) -> None:
        indexed_template(arq_tree, embedder, short_tmp, into)

    return built_once(request.config, "arq-indexed", build)


def copy_data_dir(template: Path, into: Path) -> None:
    """`template`'s database and search indexes into the data dir `into`, which nothing
    serves yet; not the files of its stopped Redis nor its run folder (locks, sockets)."""
    shutil.copytree(
        template, into, ignore=shutil.ignore_patterns("redis", "run"), dirs_exist_ok=True
    )


@asynccontextmanager
async def serving_copy(
    template: Path, data_dir: Path, embedder: Embedder
) -> AsyncIterator[Runtime]:
    """`stack` on a copy of the data dir `template` (built once, changed by nobody)."""
    copy_data_dir(template, data_dir)
    async with _serving(data_dir, embedder, scheduled=False) as rt:
        yield rt


@pytest_asyncio.fixture
async def arq_stack(
    data_dir: Path, embedder: Embedder, arq_indexed: Path
) -> AsyncIterator[Runtime]:
    """`stack` on a copy of `arq_indexed`: `arq_tree` is indexed already."""
    async with serving_copy(arq_indexed, data_dir, embedder) as rt:
        yield rt


@pytest_asyncio.fixture
async def scheduled_stack(data_dir: Path, embedder: Embedder) -> AsyncIterator[Runtime]:
    """The same with decay's scheduled job registered with the worker (DECAY_REGISTERED)."""
    async with _serving(
        data_dir, embedder, scheduled=True, maintenance_schedule=DECAY_REGISTERED
    ) as rt:
        yield rt


# --- a disk that really fills up (tests/test_faults.py, tests/test_search_index.py) ---


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """`folder` made on a tmpfs of `size` of its own, so it can really fill up (unmounted
    after)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; a file-size limit is not the same error")
    folder.mkdir(mode=0o700)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)]
    subprocess.run(mount, check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill_disk(folder: Path) -> None:
    """Write into `folder` until "No space left on device"; unbuffered, since a buffer left
    over would fail again when the file closes."""
    with (folder / "filler").open("wb", buffering=0) as filler, suppress(OSError):
        while True:
            filler.write(b"\0" * 65536)


# --- the code index against the disk (tests/test_watch.py, tests/test_indexing_bad_input.py) ---

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout


def expected_index(root: Path, project_id: str, max_chars: int) -> dict[str, list[tuple]]:
    """What the index must hold for the tree as it is on disk now: path -> [(start, end,
    content hash)] of every chunk, computed by the pure stages alone."""
    import stat as stat_module

    from memoryd.config import DEFAULT_SECRET_FILES
    from memoryd.scan import generated_by_name, read_source, secret_file, walk
    from workers.stages.file_plan import plan_file

    index: dict[str, list[tuple]] = {}
    for rel in walk(root):
        if secret_file(rel, DEFAULT_SECRET_FILES) or generated_by_name(rel):
            continue
        try:
            if not (root / rel).resolve().is_relative_to(root.resolve()):
                continue  # a symlink out of the tree is not followed
            info = (root / rel).stat()
            if not stat_module.S_ISREG(info.st_mode) or info.st_size > 2_000_000:
                continue
            content = read_source((root / rel).read_bytes())
        except (OSError, RuntimeError):  # RuntimeError: a symlink loop, from resolve()
            continue
        if content.text is None:
            continue
        plan = plan_file(project_id, rel, content.text, content.hash, max_chars)
        chunks = sorted((c["start_line"], c["end_line"], c["content_hash"]) for c in plan.chunks)
        if chunks:
            index[rel] = chunks
    return index


async def wait_for_workers(redis: ArqRedis, count: int, timeout: float) -> float:
    """Until `count` processes serve the queue; returns the deadline (monotonic) it allowed."""
    deadline = time.monotonic() + timeout
    while await queue.live_workers(redis) < count:
        assert time.monotonic() < deadline, "workers did not come up"
        await asyncio.sleep(0.5)
    return deadline


async def settle(
    rt: Runtime, root: Path, project_id: str, watcher: object | None = None, timeout: float = 60
) -> dict[str, list[tuple]]:
    """Poll until nothing is queued or waiting in the watcher and the index equals the disk,
    exactly; fail with the difference after `timeout` seconds."""
    import asyncio
    import time

    from memoryd import queue

    assert rt.redis is not None and rt.store is not None
    deadline = time.monotonic() + timeout
    while True:
        idle = getattr(watcher, "idle", True) and await queue.queue_depth(rt.redis) == 0
        if idle:
            got = await rt.store.code_index(project_id)
            want = expected_index(root, project_id, rt.settings.chunk_max_chars)
            if got == want:
                return got
            if time.monotonic() > deadline:
                missing = sorted(set(want) - set(got))
                stale = sorted(set(got) - set(want))
                wrong = sorted(p for p in set(got) & set(want) if got[p] != want[p])
                pytest.fail(f"index != disk: missing {missing}, stale {stale}, differ {wrong}")
        elif time.monotonic() > deadline:
            pytest.fail("the queue or the watcher never went idle")
        await asyncio.sleep(0.1)


def orphaned_by(dump: dict[str, list[dict]], doomed: set[tuple[str, str]]) -> set[str]:
    """Entities left with no edge once the `doomed` rows (table, key) are gone."""
    from memoryd.vocabulary import EDGES

    kept: set[str] = set()
    for table in (edge.table for edge in EDGES):
        for edge in dump.get(table, []):
            ends = [(edge[side].table_name, str(edge[side].id)) for side in ("in", "out")]
            # An entity at either end (RESOLVED_BY starts at one) is kept by the other end.
            for (kind, entity), other in ((ends[0], ends[1]), (ends[1], ends[0])):
                if kind == "entity" and other not in doomed:
                    kept.add(entity)
    return {str(row["id"].id) for row in dump["entity"]} - kept


# --- helpers several test modules share ---


class Lines:
    """A process's stderr, collected by a thread, so that a test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stderr is not None
        stream = process.stderr
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def wait_for(self, pattern: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in list(self.lines) if re.search(pattern, line)]
            if found:
                return found[0]
            time.sleep(0.1)
        pytest.fail(f"no line with {pattern!r} in {timeout}s: {self.lines}")

    def text(self) -> str:
        self._thread.join(timeout=30)  # the process has exited or been killed by now
        return "".join(self.lines)


def cli_env() -> dict[str, str]:
    """The environment the CLI runs in for a test: no config or transcripts of the machine."""
    return env_without() | {
        "MEMORYD_CONFIG": "/nonexistent/memoryd.toml",
        "MEMORYD_TRANSCRIPTS": "[]",
    }


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env()
    done = subprocess.run([MEMORYD, *args], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def two_dirs() -> Iterator[tuple[Path, Path]]:
    dirs = [Path(tempfile.mkdtemp(prefix="md-", dir="/tmp")) for _ in range(2)]
    yield dirs[0], dirs[1]
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


async def queued_search(
    redis: ArqRedis, query: str, limit: int, kind: str = "code", as_of: str | None = None
) -> list[dict]:
    """A search asked as a job on the queue (a SearchRequest's wire form): its hits' dicts."""
    when = datetime.fromisoformat(as_of) if as_of else None
    request = SearchRequest(query, (kind,), limit=limit, as_of=when)
    answer = await queue.call(redis, jobs.SEARCH, request.wire())
    return answer["hits"]


async def index_tree(rt: Runtime, root: Path) -> dict[str, int]:
    assert rt.redis is not None
    project = projects.resolve(root)
    jobs = await projects.sync(rt.redis, project, rt.settings.index_batch_files)
    totals: dict[str, int] = {}
    for job, _count in jobs:
        report = await queue.wait_for(job, timeout=300)
        for key in (
            "files",
            "indexed",
            "unchanged",
            "skipped",
            "removed",
            "chunks",
            "embedded",
            "retired",
        ):
            totals[key] = totals.get(key, 0) + report[key]
        # The chunks' vectors come after them, from a job of their own.
        totals["embedded"] += await queue.embedded_later(rt.redis, report, timeout=300)
    return totals


def daemon_status(data_dir: Path) -> dict | None:
    done = subprocess.run(
        [MEMORYD, "status", "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


async def wait_live(data: Path, deadline: float) -> None:
    """Until a daemon of `data` answers its clients (by the monotonic `deadline`)."""
    from memoryd import client
    from memoryd.errors import DaemonUnavailable

    settings = load_settings(data_dir=data)
    while True:
        try:
            async with client.connect(settings):
                return
        except DaemonUnavailable:
            assert time.monotonic() < deadline, "the daemon did not come up"
            await asyncio.sleep(1)


def wait_daemon(data_dir: Path, ready: object, timeout: float = 300) -> dict:
    """Until the daemon of `data_dir` answers a status that is `ready`: asked over its query
    channel from this process (what `memoryd status --json` prints while a daemon runs), not
    by starting a CLI process per poll. An answer refused (not started yet, its database not
    open to queries, a failed count) is asked again, as the CLI's exit code was."""
    from memoryd import channel, jobs
    from memoryd.client import local_status
    from memoryd.errors import MemorydError

    settings = load_settings(data_dir=data_dir)
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            answer = channel.ask_blocking(settings.channel_socket, jobs.STATUS.name, (), 120.0)
        except MemorydError as exc:
            last = exc
        else:
            last = info = {**local_status(settings), **answer}
            if ready(info):  # type: ignore[operator]
                return info
        time.sleep(0.5)
    pytest.fail(f"the daemon did not get there in {timeout}s; its last status: {last}")


def two_package_tree(tmp_path: Path) -> Path:
    """Two installed packages' source: enough files for indexing to take a while."""
    root = tmp_path / "tree"
    for name in ("arq", "pathspec"):
        shutil.copytree(
            site_package(name), root / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    git_init(root)
    return root
