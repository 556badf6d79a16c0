"""Live, incremental indexing: the real watcher on a real git repository, with the real queue,
worker, database and model in this process. After every step the index is compared with what
the disk implies, exactly (conftest.settle): no stale chunk, none missing."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

import workers.indexing
from memoryd import projects, queue
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.projects import Project
from memoryd.watch.repos import RepoWatcher
from memoryd.watch.repos import _Handler as watchdog_handler
from tests.conftest import git, queued_search, settle

MODELS = '''"""Accounts of the shop: users and their carts."""

from dataclasses import dataclass, field


@dataclass
class Cart:
    """Items a user is about to buy, with quantities."""

    items: dict[str, int] = field(default_factory=dict)

    def add(self, sku: str, quantity: int = 1) -> None:
        """Put `quantity` more of an item into the cart."""
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        self.items[sku] = self.items.get(sku, 0) + quantity


def shipping_cost(cart: Cart, express: bool = False) -> float:
    """Flat rate per piece, doubled for express delivery, free from ten pieces on."""
    pieces = sum(cart.items.values())
    if pieces >= 10:
        return 0.0
    rate = 2.5 if express else 1.25
    return round(pieces * rate, 2)
'''
UTIL = '''def parse_price(text: str) -> int:
    """A price written like "12.50 EUR" as a number of cents; the currency is ignored."""
    amount = text.strip().split()[0].replace(",", ".")
    euros, _, cents = amount.partition(".")
    return int(euros) * 100 + int((cents + "00")[:2])


def format_price(cents: int, currency: str = "EUR") -> str:
    """The other way round: 1250 cents become "12.50 EUR", with two decimals always."""
    return f"{cents // 100}.{cents % 100:02d} {currency}"
'''
STRINGS = '''def slugify(title: str) -> str:
    """Lower-case words joined by dashes, for product URLs; anything else is dropped."""
    words = "".join(c if c.isalnum() else " " for c in title.lower()).split()
    return "-".join(words)
'''
IGNORES = [".gitignore", "app/.gitignore"]  # indexed like any text file
README = "# Shop\n\nA tiny shop used to test memoryd's watcher.\n"


def make_repo(root: Path) -> Path:
    files = {
        "app/models.py": MODELS,
        "app/util.py": UTIL,
        "lib/strings.py": STRINGS,
        "README.md": README,
        ".gitignore": "logs/\n*.log\n",
        "app/.gitignore": "generated_*.py\n",
        "app/generated_schema.py": "def generated_table():\n    return []\n",
        "logs/today.py": "def log_line():\n    return 'x'\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "shop")
    return root


@pytest_asyncio.fixture
async def watched(stack: Runtime, tmp_path: Path) -> AsyncIterator[tuple[RepoWatcher, Project]]:
    root = make_repo(tmp_path / "shop")
    project = projects.resolve(root)
    assert stack.redis is not None
    watcher = RepoWatcher(
        stack.redis, [project], stack.settings.debounce_seconds, stack.settings.index_batch_files
    )
    await watcher.start()
    try:
        yield watcher, project
    finally:
        await watcher.stop()


async def _search(rt: Runtime, text: str, limit: int = 5) -> list[dict[str, Any]]:
    assert rt.redis is not None
    return await queued_search(rt.redis, text, limit)


def _count_embeddings(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Texts the model embeds from now on (a list, so the caller sees it grow)."""
    assert rt.embedder is not None
    embedded: list[int] = []
    original = rt.embedder.embed

    def counting(texts: list[str], cancelled: threading.Event | None = None) -> Any:
        embedded.append(len(texts))
        return original(texts, cancelled)

    monkeypatch.setattr(rt.embedder, "embed", counting)
    return embedded


@pytest.mark.e2e
async def test_edits_creates_deletes_renames_end_in_the_exact_state(
    stack: Runtime, watched: tuple[RepoWatcher, Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher, project = watched
    root, pid = project.root, project.id
    store = stack.store
    assert store is not None
    index = await settle(stack, root, pid, watcher)
    # .gitignore at the top (logs/, *.log) and in app/ (generated_*.py) are both respected.
    assert set(index) == {
        *IGNORES,
        "README.md",
        "app/models.py",
        "app/util.py",
        "lib/strings.py",
    }

    # Chunks point at their file entity and at the symbol each defines.
    links = await store.code_chunk_links(pid, "app/models.py")
    assert [(c["chunk_type"], c["name"]) for c in links] == [
        ("class", "Cart"),
        ("function", "shipping_cost"),
    ]
    for chunk in links:
        keys = {(d["kind"], d["key"]) for d in chunk["defined_in"]}
        assert keys == {
            ("file", f"{pid}:app/models.py"),
            ("symbol", f"{pid}:app/models.py#{chunk['name']}"),
        }
    assert await store.live_symbols(pid) == {
        f"{pid}:app/models.py#Cart",
        f"{pid}:app/models.py#shipping_cost",
        f"{pid}:app/util.py#parse_price",
        f"{pid}:app/util.py#format_price",
        f"{pid}:lib/strings.py#slugify",
    }

    # Edit: the new text is found, the old chunk is retired.
    [old] = [h for h in await _search(stack, "parse_price cents", 3) if h["name"] == "parse_price"]
    (root / "app/util.py").write_text(
        UTIL.replace("parse_price", "parse_amount_with_vat").replace("currency is", "VAT is")
    )
    await settle(stack, root, pid, watcher)
    hits = await _search(stack, "parse_amount_with_vat", 3)
    assert hits[0]["path"] == "app/util.py" and hits[0]["name"] == "parse_amount_with_vat"
    assert old["id"] not in {h["id"] for h in await _search(stack, "parse_price cents", 10)}
    symbols = await store.live_symbols(pid)
    assert f"{pid}:app/util.py#parse_amount_with_vat" in symbols
    assert f"{pid}:app/util.py#parse_price" not in symbols

    # Create.
    (root / "lib/stock.py").write_text(
        "def reorder_level(weekly_sales: int) -> int:\n    return weekly_sales * 3\n"
    )
    await settle(stack, root, pid, watcher)
    assert (await _search(stack, "reorder_level weekly_sales", 1))[0]["path"] == "lib/stock.py"

    # Delete.
    (root / "app/util.py").unlink()
    await settle(stack, root, pid, watcher)
    assert "app/util.py" not in await store.indexed_paths(pid)
    assert not any(k.startswith(f"{pid}:app/util.py#") for k in await store.live_symbols(pid))

    # Rename: the old path is retired, the new one indexed with the same vectors.
    embedded = _count_embeddings(stack, monkeypatch)
    os.rename(root / "lib/strings.py", root / "lib/text.py")
    index = await settle(stack, root, pid, watcher)
    assert "lib/strings.py" not in index and "lib/text.py" in index
    assert sum(embedded) == 0
    assert (await _search(stack, "slugify product URLs", 1))[0]["path"] == "lib/text.py"

    # A save dance: write a temp file, rename it over the real one. One job, the temp file
    # never reaches the index.
    jobs = watcher.stats["jobs"]
    temp = root / "lib/.text.py.3f9a1c"
    temp.write_text(STRINGS.replace("dashes", "underscores").replace('"-"', '"_"'))
    os.replace(temp, root / "lib/text.py")
    await settle(stack, root, pid, watcher)
    assert watcher.stats["jobs"] == jobs + 1
    assert await store.code_file_states(pid, ["lib/.text.py.3f9a1c"]) == {}
    assert (await _search(stack, "words joined by underscores", 1))[0]["path"] == "lib/text.py"

    # The other dance: delete, then create again.
    jobs = watcher.stats["jobs"]
    (root / "app/models.py").unlink()
    (root / "app/models.py").write_text(MODELS.replace("ten pieces", "twenty pieces"))
    await settle(stack, root, pid, watcher)
    assert watcher.stats["jobs"] == jobs + 1

    # A directory renamed inside the tree, then moved out of it.
    os.rename(root / "lib", root / "library")
    index = await settle(stack, root, pid, watcher)
    assert {p for p in index if p.startswith("lib")} == {"library/stock.py", "library/text.py"}
    shutil.move(root / "library", root.parent / "outside")
    index = await settle(stack, root, pid, watcher)
    assert set(index) == {*IGNORES, "README.md", "app/models.py"}

    # A nested .gitignore edited: newly ignored files are retired, and come back after. As
    # in git, a rule ignores untracked files only: models.py leaves git's index first.
    git(root, "rm", "-q", "--cached", "app/models.py")
    (root / "app/.gitignore").write_text("generated_*.py\nmodels.py\n")
    index = await settle(stack, root, pid, watcher)
    assert set(index) == {*IGNORES, "README.md"}
    (root / "app/.gitignore").write_text("models.py\n")  # and the generated file is visible
    index = await settle(stack, root, pid, watcher)
    assert set(index) == {*IGNORES, "README.md", "app/generated_schema.py"}


@pytest.mark.e2e
async def test_branch_switch_of_many_files_is_a_few_jobs_and_exact(
    stack: Runtime, tmp_path: Path
) -> None:
    root = tmp_path / "wide"
    for i in range(280):
        path = root / f"pkg{i % 7}" / f"mod_{i:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"def handler_{i}(event):\n    return event.get('k{i}')\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    # The other branch changes 240 files, adds 40 and deletes 20: 300 files touched.
    git(root, "checkout", "-q", "-b", "feature")
    for i in range(240):
        path = root / f"pkg{i % 7}" / f"mod_{i:03d}.py"
        path.write_text(f"def handler_{i}(event):\n    return event.get('feature_{i}', {i})\n")
    (root / "pkg9").mkdir()
    for i in range(300, 340):
        (root / "pkg9" / f"new_{i}.py").write_text(f"def added_{i}():\n    return {i}\n")
    for i in range(260, 280):
        (root / f"pkg{i % 7}" / f"mod_{i:03d}.py").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "feature")
    git(root, "checkout", "-q", "main")

    project = projects.resolve(root)
    assert stack.redis is not None and stack.store is not None
    watcher = RepoWatcher(stack.redis, [project], stack.settings.debounce_seconds, 32)
    await watcher.start()
    try:
        index = await settle(stack, root, project.id, watcher, timeout=120)
        assert len(index) == 280
        for branch, files, marker in (("feature", 300, "feature_7"), ("main", 280, "'k7'")):
            jobs = watcher.stats["jobs"]
            git(root, "checkout", "-q", branch)
            index = await settle(stack, root, project.id, watcher, timeout=120)
            assert len(index) == files
            # 300 touched files in batches of 32: ten jobs, a few more if a burst was cut.
            assert 10 <= watcher.stats["jobs"] - jobs <= 13
            hits = await _search(stack, f"handler_7 {marker}", 1)
            assert hits[0]["path"] == "pkg0/mod_007.py"
            # .git/HEAD moved: the project's branch is recorded again.
            rows = await stack.store.projects()
            assert [p["git_branch"] for p in rows if p["id"] == project.id] == [branch]
    finally:
        await watcher.stop()


async def test_a_change_during_a_running_job_is_never_dropped(
    stack: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A -> B -> A while the job enqueued for A runs and reads B: the first job took its
    files off the queued marks when it started, so the event for A gets a job of its own; and
    the first job, which read B and writes last, must notice that the disk moved on."""
    root = tmp_path / "race"
    root.mkdir()
    target = root / "price.py"
    version_a = "def price_rule():\n    return 'apples are cheap'\n"
    version_b = "def price_rule():\n    return 'bananas are dear'\n"
    target.write_text(version_a)
    git(root, "init", "-q", "-b", "main")
    project = projects.resolve(root)
    assert stack.redis is not None and stack.store is not None
    await settle_sync(stack, project)

    before_read, after_read = threading.Event(), threading.Event()
    resumed = threading.Event()
    calls = {"n": 0}
    original = workers.indexing._read_bytes

    def gated(path: Path, max_bytes: int) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # only the first job's read waits for the test
            before_read.wait(30)
            result = original(path, max_bytes)
            resumed.set()
            after_read.wait(30)
            return result
        return original(path, max_bytes)

    monkeypatch.setattr(workers.indexing, "_read_bytes", gated)
    target.write_text(version_a + "\n")  # the job is enqueued for content A'
    [(first, _)] = await queue.enqueue_index(stack.redis, project.id, root, ["price.py"], 32)
    await wait_status(first, "in_progress")
    target.write_text(version_b)
    before_read.set()  # the first job reads B
    assert await asyncio.to_thread(resumed.wait, 30)
    target.write_text(version_a + "\n")  # back to A', the content the first job was sent for
    [(second, _)] = await queue.enqueue_index(stack.redis, project.id, root, ["price.py"], 32)
    assert second.job_id != first.job_id
    await queue.wait_for(second, timeout=60)
    after_read.set()  # now the first job writes what it read (B), after the second
    report = await queue.wait_for(first, timeout=60)
    assert report["reindexed"] == 1
    await settle(stack, root, project.id)
    hits = await _search(stack, "apples are cheap price_rule", 1)
    assert hits[0]["path"] == "price.py"


async def settle_sync(rt: Runtime, project: Project) -> None:
    assert rt.redis is not None
    for job, _ in await projects.sync(rt.redis, project, rt.settings.index_batch_files):
        await queue.wait_for(job, timeout=120)
    await settle(rt, project.root, project.id)


async def wait_status(job: Any, status: str, timeout: float = 30) -> None:
    for _ in range(int(timeout / 0.02)):
        if (await job.status()).value == status:
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"job {job.job_id} never reached {status}")


async def test_restart_reconciles_without_reading_unchanged_files(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: Embedder
) -> None:
    from tests.conftest import settings_for

    root = make_repo(tmp_path / "shop")
    # Files as a checkout leaves them: written a while ago (a file modified within 100 ms of
    # being indexed is hashed once more at the next look, see workers.indexing.RACY_NS).
    for path in root.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    project = projects.resolve(root)

    async def run_once() -> tuple[Runtime, RepoWatcher]:
        rt = Runtime(settings_for(data_dir), embedder)
        await rt.start_queue(exclusive=True)
        await rt.serve()
        assert rt.redis is not None
        watcher = RepoWatcher(rt.redis, [project], 0.3, 32)
        await watcher.start()
        return rt, watcher

    rt, watcher = await run_once()
    try:
        await settle(rt, root, project.id, watcher)
    finally:
        await watcher.stop()
        await rt.close()

    # While memoryd is down: one file changed, one added, one deleted, the rest untouched.
    (root / "app/models.py").write_text(MODELS.replace("ten pieces", "a dozen pieces"))
    (root / "lib/added.py").write_text("def added_while_down():\n    return 1\n")
    (root / "README.md").unlink()
    reads: list[str] = []
    original = workers.indexing._read_bytes

    def counting(path: Path, max_bytes: int) -> Any:
        reads.append(Path(path).relative_to(root).as_posix())
        return original(path, max_bytes)

    monkeypatch.setattr(workers.indexing, "_read_bytes", counting)
    rt, watcher = await run_once()
    try:
        index = await settle(rt, root, project.id, watcher)
        assert set(index) == {
            *IGNORES,
            "app/models.py",
            "app/util.py",
            "lib/added.py",
            "lib/strings.py",
        }
        # Only the changed and the new file were opened: unchanged ones cost a stat.
        assert sorted(set(reads)) == ["app/models.py", "lib/added.py"]
    finally:
        await watcher.stop()
        await rt.close()


async def test_reading_watched_files_raises_no_event(
    stack: Runtime, watched: tuple[RepoWatcher, Project], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexer reads every file of a watched tree: an open and a close each, which watchdog
    decoded by the thousand on a first index before the handler dropped them. The kernel is
    asked for changes only."""
    watcher, project = watched
    await settle(stack, project.root, project.id, watcher)
    seen: list[tuple[str, str]] = []
    arrived = threading.Event()
    on_any_event = watchdog_handler.on_any_event

    def spy(handler: Any, event: Any) -> None:
        if not event.is_directory:  # the marker's folder changes too
            seen.append((event.event_type, os.path.basename(event.src_path)))
        if (event.event_type, os.path.basename(event.src_path)) == ("closed", "marker.txt"):
            arrived.set()  # the write's last event
        on_any_event(handler, event)

    monkeypatch.setattr(watchdog_handler, "on_any_event", spy)
    files = [p for p in project.root.rglob("*") if p.is_file() and ".git" not in p.parts]
    for _ in range(20):
        for path in files:
            path.read_bytes()
    # Events come in order: once the marker's are here, any of the reads would be too.
    (project.root / "marker.txt").write_text("written after the reads\n")
    assert await asyncio.to_thread(arrived.wait, 10)
    assert {name for _, name in seen} == {"marker.txt"}
    assert {kind for kind, _ in seen} <= {"created", "modified", "closed"}


async def test_lost_events_lead_to_a_full_sync(
    stack: Runtime, watched: tuple[RepoWatcher, Project], caplog: pytest.LogCaptureFixture
) -> None:
    """When the kernel's inotify queue overflows, events are lost and watchdog only logs it; the
    watcher hears that line and syncs every project. A real overflow needs a flood of events
    larger than the kernel queue (16384 here); this test stops the observer instead, so the
    change below is never seen as an event, and emits watchdog's log line itself."""
    watcher, project = watched
    await settle(stack, project.root, project.id, watcher)
    watcher._observer.stop()
    await asyncio.to_thread(watcher._observer.join, 5)
    (project.root / "lib/strings.py").write_text(STRINGS.replace("dashes", "tildes"))
    syncs = watcher.stats["syncs"]
    with caplog.at_level(logging.WARNING):
        logging.getLogger("watchdog.observers.inotify").warning(
            "Inotify queue overflowed; reconciling recursive watches below %r", "/x"
        )
        await settle(stack, project.root, project.id, watcher)
    assert watcher.stats["syncs"] == syncs + 1
    assert "syncing every project" in caplog.text
    assert (await _search(stack, "words joined by tildes", 1))[0]["path"] == "lib/strings.py"


@pytest.mark.e2e
def test_the_daemon_follows_a_branch_switch(data_dir: Path, tmp_path: Path) -> None:
    """`memoryd run` as a user starts it, `memoryd search` as a user runs it; after the branch
    switch the index is compared with the disk exactly, with the daemon stopped."""
    import json
    import signal
    import subprocess
    import time

    from memoryd.store import Store
    from tests.conftest import MEMORYD, expected_index, settings_for

    root = make_repo(tmp_path / "shop")
    git(root, "checkout", "-q", "-b", "feature")
    (root / "app/util.py").write_text(UTIL.replace("parse_price", "parse_amount_with_vat"))
    (root / "lib/stock.py").write_text(
        "def reorder_level(weekly_sales: int) -> int:\n    return weekly_sales * 3\n"
    )
    (root / "lib/strings.py").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "feature")
    git(root, "checkout", "-q", "main")

    def search(text: str) -> list[dict[str, Any]]:
        done = subprocess.run(
            [MEMORYD, "search", text, "--data-dir", str(data_dir), "--json", "--limit", "5"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["results"] or [{"path": None}]

    def until(found: Any, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not found():
            if time.monotonic() > deadline:
                pytest.fail(f"never: {what}")
            time.sleep(0.5)  # each check is a whole process start: poll gently

    log_path = tmp_path / "daemon.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed after the daemon
    daemon = subprocess.Popen(
        [MEMORYD, "run", "--data-dir", str(data_dir), "--repo", str(root)],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Commands sent while the daemon is still starting may find its parts half up.
        until(lambda: "memoryd running" in log_path.read_text(), "the daemon up")
        until(
            lambda: any(h["path"] == "lib/strings.py" for h in search("slugify product URLs")),
            "the first index",
        )
        git(root, "checkout", "-q", "feature")
        until(
            lambda: search("reorder_level weekly_sales")[0]["path"] == "lib/stock.py",
            "the added file found",
        )
        until(
            lambda: (
                search("parse_amount_with_vat")[0]["path"] == "app/util.py"
                and all(h["path"] != "lib/strings.py" for h in search("slugify product URLs"))
            ),
            "the changed file found, the deleted one gone",
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        log.close()
    assert daemon.returncode == 0, log_path.read_text()

    async def stored() -> dict[str, list[tuple]]:
        settings = settings_for(data_dir)
        store = await Store.open(
            settings.database_url, settings.surreal_namespace, settings.surreal_database
        )
        try:
            return await store.code_index(projects.resolve(root).id)
        finally:
            await store.close()

    pid = projects.resolve(root).id
    assert asyncio.run(stored()) == expected_index(root, pid, 1500)
