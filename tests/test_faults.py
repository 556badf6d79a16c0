"""Faults the daemon must survive or report: Redis lost, disk full, signals at any stage."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
import redis
import redis.exceptions

from memoryd import jobs, projects, queue, scan
from memoryd.config import Settings
from memoryd.daemon.runtime import REDIS_RESTARTS, Runtime
from memoryd.embedded import EmbeddedRedis
from memoryd.embedding import Embedder
from memoryd.store import Store
from tests.conftest import (
    MEMORYD,
    Lines,
    expected_index,
    fill_disk,
    git_init,
    settings_for,
    site_package,
    small_disk,
    two_package_tree,
    wait_daemon,
)
from tests.fixtures import S37, SMALL
from workers.indexing import _parts, _Rows, index_files
from workers.registry import HEAVY_JOBS, close_context, job_context

pytestmark = pytest.mark.e2e

# Generous: the machine may be loaded; the real figures come from the kill-trial bench.
HANG_BOUND = 30


def _redis_server(daemon: subprocess.Popen[str]) -> psutil.Process:
    children = psutil.Process(daemon.pid).children(recursive=True)
    return next(p for p in children if "redis" in p.name())


def _daemon(
    data_dir: Path, root: Path, prefix: tuple[str, ...] = (), extra: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    env = {**os.environ, "MEMORYD_INDEX_BATCH_FILES": "4", "MEMORYD_LOG_FORMAT": "human"}
    return subprocess.Popen(
        [*prefix, MEMORYD, "run", "--data-dir", str(data_dir), "--repo", str(root), *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _signalled(
    process: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM
) -> tuple[int, float]:
    """Send `sig` and wait for the exit (at most HANG_BOUND): its code, and how long it took."""
    process.send_signal(sig)
    sent = time.monotonic()
    code = process.wait(timeout=HANG_BOUND)
    return code, time.monotonic() - sent


def _stop(daemon: subprocess.Popen[str]) -> None:
    """Whatever happened, leave no process behind (SIGKILL only after the hang bound)."""
    if daemon.poll() is None:
        try:
            _signalled(daemon)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(daemon.pid).children(recursive=True):
                child.kill()
            daemon.kill()
            daemon.wait()


def _index(data_dir: Path, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MEMORYD, "index", str(root), "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _ingest(data_dir: Path, transcript: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MEMORYD, "ingest", str(transcript), "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def tiny_db_disk(data_dir: Path) -> Iterator[Path]:
    """The database directory on a 16 MB disk of its own."""
    with small_disk(data_dir / "db", "16m") as db:
        yield db


def test_disk_full_is_a_failed_job_not_a_success(
    data_dir: Path, tmp_path: Path, tiny_db_disk: Path
) -> None:
    first = tmp_path / "first"
    first.mkdir()
    (first / "a.py").write_text("def a():\n    return 1\n")
    git_init(first)
    assert _index(data_dir, first).returncode == 0
    # Fill the disk, leaving the database just enough to open (it writes on opening).
    free = shutil.disk_usage(tiny_db_disk).free
    (tiny_db_disk / "filler").write_bytes(b"\0" * (free - 64 * 1024))
    root = tmp_path / "tree"
    root.mkdir()
    # More than the space left holds (vectors are packed small: a few files would fit).
    sources = sorted(site_package("arq").glob("*.py"))
    for source in sources:
        shutil.copy(source, root / source.name)
    git_init(root)
    done = _index(data_dir, root)
    assert done.returncode == 1, done.stdout
    assert done.stdout == ""
    assert f"memoryd: none of the {len(sources)} files to store could be stored" in done.stderr
    assert "No space left on device" in done.stderr


def _redis_pid(line: str) -> int:
    return int(re.search(r"\(pid (\d+)\)", line).group(1))  # type: ignore[union-attr]


async def test_redis_killed_mid_indexing_is_restarted_and_the_index_completes(
    data_dir: Path, arq_tree: Path
) -> None:
    root = arq_tree
    project = projects.resolve(root)
    # What a clean run stores: every chunk of every file, by the pure stages alone.
    want = expected_index(root, project.id, Settings().chunk_max_chars)
    daemon = _daemon(data_dir, root)
    try:
        lines = Lines(daemon)
        first = _redis_pid(lines.wait_for("redis started"))
        at_kill = wait_daemon(
            data_dir,
            lambda i: i["counts"]["file_state"] > 0 and i["queue"]["jobs"] > 0,
            timeout=300,
        )
        assert _redis_server(daemon).pid == first
        os.kill(first, signal.SIGKILL)
        restarted = lines.wait_for("started it again", timeout=HANG_BOUND)
        second = int(re.search(r"again \(pid (\d+)\)", restarted).group(1))  # type: ignore[union-attr]
        assert psutil.Process(second).ppid() == daemon.pid
        total = sum(len(chunks) for chunks in want.values())
        wait_daemon(
            data_dir,
            lambda i: i["queue"]["jobs"] == 0 and i["valid_chunks"] == total,
            timeout=600,
        )
        assert daemon.poll() is None  # it went on: no exit for a service manager to handle
        code, took = _signalled(daemon)
    finally:
        _stop(daemon)
    stderr = lines.text()
    assert code == 0, stderr
    assert took < HANG_BOUND
    # Killed mid-work, as meant: files still to index, or their chunks' vectors.
    owed = sum(p["vectors_owed"] for p in at_kill["projects"])
    assert at_kill["counts"]["file_state"] < len(want) or owed > 0
    restarts = [line for line in stderr.splitlines() if "private Redis" in line]
    assert len(restarts) == 1, stderr
    assert f"private Redis (pid {first}) was killed by signal 9: started it again" in restarts[0]
    assert "Traceback" not in stderr, stderr
    assert not psutil.pid_exists(first) and not psutil.pid_exists(second)
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        assert await store.code_index(project.id) == want
    finally:
        await store.close()
    print(f"stopped {took:.1f}s after SIGTERM")


# A one-shot command's progress line once a job is done (it logs warnings only).
INDEXED_SOME = r": [1-9]\d*/\d+ files"


def _one_shot_index(
    data_dir: Path, root: Path, extra: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, "MEMORYD_INDEX_BATCH_FILES": "4", "MEMORYD_LOG_FORMAT": "human"}
    env |= extra or {}
    return subprocess.Popen(
        [MEMORYD, "index", str(root), "--data-dir", str(data_dir), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_redis_killed_under_a_one_shot_index_is_restarted_and_the_report_is_whole(
    data_dir: Path, arq_tree: Path
) -> None:
    root = arq_tree
    want = expected_index(root, projects.resolve(root).id, Settings().chunk_max_chars)
    # A progress line as soon as the first job is done, so the kill lands with the tree's
    # vectors still to embed (the default's 5 s can pass the whole index on a fast machine).
    command = _one_shot_index(data_dir, root, {"MEMORYD_PROGRESS_SECONDS": "0.2"})
    try:
        lines = Lines(command)
        lines.wait_for(INDEXED_SOME)  # a job is done, the others queued or under way
        first = _redis_server(command).pid
        os.kill(first, signal.SIGKILL)
        command.wait(timeout=600)
        out = command.stdout.read() if command.stdout else ""
    finally:
        _stop(command)
    stderr = lines.text()
    assert command.returncode == 0, stderr
    report = json.loads(out)
    # Every chunk once: the jobs cut short by the loss ran again, and only their reruns report.
    assert (report["failed"], report["skipped"]) == (0, 0)
    assert report["chunks"] == sum(len(chunks) for chunks in want.values())
    restarts = [line for line in stderr.splitlines() if "started it again" in line]
    assert len(restarts) == 1 and f"(pid {first}) was killed by signal 9" in restarts[0]
    second = int(re.search(r"again \(pid (\d+)\)", restarts[0]).group(1))  # type: ignore[union-attr]
    assert not psutil.pid_exists(first) and not psutil.pid_exists(second)
    assert "Traceback" not in stderr, stderr


async def test_a_one_shot_command_goes_on_when_the_command_serving_its_jobs_ends_first(
    data_dir: Path, arq_tree: Path, embedder: Embedder
) -> None:
    """`memoryd index` started while another one-shot command (an `ingest`) served the data
    dir put its jobs on that command's queue; when that one ended first, the index ended
    with "Redis unreachable for 10s while waiting for job …" and exit 1. Its jobs are kept in
    the private Redis's append-only file: it serves them itself now, to the whole report."""
    root = arq_tree
    project = projects.resolve(root)
    want = expected_index(root, project.id, Settings().chunk_max_chars)
    first = Runtime(settings_for(data_dir), embedder)  # the first command, in this process
    command = None
    try:
        served = await first.start_queue(one_shot=True)
        await first.serve_if_needed()
        # Busy with its own work: the index's jobs stay in its queue until it ends (its
        # queries are answered).
        for worker in first.workers:
            worker.allow_pick_jobs = worker.queue_name != jobs.JOBS_QUEUE
        command = _one_shot_index(data_dir, root)
        lines = Lines(command)
        deadline = time.monotonic() + 300
        while not await served.zcard(jobs.JOBS_QUEUE):
            assert command.poll() is None, lines.text()
            assert time.monotonic() < deadline, "the index command queued no job"
            await asyncio.sleep(0.1)
    finally:
        await first.close()
    assert command is not None
    try:
        code = await asyncio.to_thread(command.wait, 600)
        out = command.stdout.read() if command.stdout else ""
    finally:
        _stop(command)
    stderr = lines.text()
    assert code == 0, stderr
    report = json.loads(out)
    assert (report["failed"], report["skipped"]) == (0, 0)
    assert report["chunks"] == sum(len(chunks) for chunks in want.values())
    went_on = (
        f"memoryd (pid {os.getpid()}), the command that served data dir {data_dir}, "
        "stopped before this command's jobs ended: they go on"
    )
    assert went_on in stderr, stderr
    assert "unreachable" not in stderr and "Traceback" not in stderr, stderr
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        assert await store.code_index(project.id) == want
    finally:
        await store.close()


async def test_a_rerun_reports_the_files_an_earlier_try_indexed(
    stack: Runtime, tmp_path: Path
) -> None:
    """A try of an index job cut short (a Redis restart, a stop) after writing some of its
    files leaves them unchanged for its rerun, whose report then lacked their chunks: a
    one-shot index under a Redis kill reported 211 of 264 chunks on a loaded machine. The
    rerun (the job function again, queued when the first try was) reports the files indexed
    since as its own; a job queued after them finds them unchanged."""
    assert stack.redis is not None and stack.store is not None
    root = two_package_tree(tmp_path)
    pid = projects.resolve(root).id
    want = expected_index(root, pid, Settings().chunk_max_chars)
    paths, chunks = sorted(want), sum(len(found) for found in want.values())
    [(first, _)] = await queue.enqueue_index(stack.redis, pid, root, paths, 64, fresh=True)
    tried = await queue.wait_for(first, timeout=300)
    queued = (await first.info()).enqueue_time  # type: ignore[union-attr]
    ctx = job_context(
        {
            "store": stack.store,
            "embedder": stack.embedder,
            "search": stack.search,
            "settings": stack.settings,
            "redis": stack.redis,
        }
    )
    try:
        rerun = await index_files(
            {**ctx, "enqueue_time": queued, "job_id": first.job_id, "job_try": 1},
            pid,
            str(root),
            paths,
        )
    finally:
        await close_context(ctx)
    [(later, _)] = await queue.enqueue_index(stack.redis, pid, root, paths, 64, fresh=True)
    after = await queue.wait_for(later, timeout=300)
    counts = [(r["indexed"], r["unchanged"], r["chunks"]) for r in (tried, rerun, after)]
    assert counts == [(len(paths), 0, chunks), (len(paths), 0, chunks), (0, len(paths), 0)]
    assert await stack.store.code_index(pid) == want


def test_an_external_redis_lost_stops_the_daemon_with_one_line(
    data_dir: Path, tmp_path: Path
) -> None:
    # A Redis the daemon did not start (--redis-url) is not the daemon's to start again.
    external = EmbeddedRedis(data_dir.parent / f"{data_dir.name}-external")
    external_pid = external.start()
    try:
        daemon = _daemon(data_dir, two_package_tree(tmp_path), extra=("--redis-url", external.url))
        try:
            lines = Lines(daemon)
            lines.wait_for("index_files")
            os.kill(external_pid, signal.SIGKILL)
            killed = time.monotonic()
            code = daemon.wait(timeout=HANG_BOUND)
            took = time.monotonic() - killed
        finally:
            _stop(daemon)
    finally:
        external.stop()
        shutil.rmtree(external.dir.parent, ignore_errors=True)
    stderr = lines.text()
    assert code == 1, stderr
    assert took < HANG_BOUND
    lost = [line for line in stderr.splitlines() if "memoryd stops" in line]
    assert len(lost) == 1, stderr
    assert lost[0].startswith(f"memoryd: Redis at {external.url} "), lost[0]
    assert "started it again" not in stderr
    assert "Traceback" not in stderr, stderr


def test_sigterm_during_start_up_stops_the_private_redis(data_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "one"
    root.mkdir()
    (root / "a.py").write_text("def a():\n    return 1\n")
    git_init(root)
    daemon = _daemon(data_dir, root)
    try:
        lines = Lines(daemon)
        redis_pid = _redis_pid(lines.wait_for("redis started"))
        code, _ = _signalled(daemon)
    finally:
        _stop(daemon)
    stderr = lines.text()
    assert "memoryd running" not in stderr  # the stop landed in start-up, as meant
    assert code == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM before finishing" in stderr
    assert "redis stopped" in stderr
    assert not psutil.pid_exists(redis_pid)
    assert "Traceback" not in stderr, stderr


def _long_file_tree(tmp_path: Path) -> Path:
    """One file of 4,000 small functions: 4,000 chunks, minutes of embedding on one job."""
    root = tmp_path / "long"
    root.mkdir()
    body = "".join(
        f"def function_{n}(value):\n    return value * {n} + len('text {n}')\n\n\n"
        for n in range(4000)
    )
    (root / "long.py").write_text(body)
    git_init(root)
    return root


def test_sigterm_mid_embedding_stops_promptly(data_dir: Path, tmp_path: Path) -> None:
    daemon = _daemon(data_dir, _long_file_tree(tmp_path))
    try:
        lines = Lines(daemon)
        # The chunks are written and their embedding job is queued or under way: the stop
        # lands before it can finish (it takes minutes of the model on this tree).
        lines.wait_for("initial index of .* done")
        code, took = _signalled(daemon)
    finally:
        _stop(daemon)
    stderr = lines.text()
    assert code == 0, stderr
    assert took < HANG_BOUND
    assert "embed_chunks:" not in stderr  # it was stopped mid-embedding, not after it
    print(f"stopped {took:.1f}s after SIGTERM")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_on_a_one_shot_index_stops_its_private_redis(
    data_dir: Path, tmp_path: Path, stop: signal.Signals
) -> None:
    command = subprocess.Popen(
        [MEMORYD, "index", str(_long_file_tree(tmp_path)), "--data-dir", str(data_dir)],
        env={**os.environ, "MEMORYD_PROGRESS_SECONDS": "0.2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = Lines(command)
        # A progress line with chunks: the model is loaded, the file is indexed, and the
        # command waits for the vectors of minutes of embedding.
        lines.wait_for(r"indexing .*: 1/1 files, [1-9]\d* chunks")
        redis_server = _redis_server(command)
        code, took = _signalled(command, stop)
    finally:
        _stop(command)
    stderr = lines.text()
    assert code == 128 + stop, stderr
    assert f"stopped by {stop.name} before finishing" in stderr
    assert not psutil.pid_exists(redis_server.pid)
    print(f"{stop.name}: stopped {took:.1f}s after the signal")


def test_a_file_over_max_file_chunks_is_skipped_and_the_rest_indexed(
    data_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    for name in ("constants.py", "version.py"):
        shutil.copy(site_package("arq") / name, root / name)
    (root / "long.py").write_text(
        "".join(f"def function_{n}(value):\n    return value * {n}\n\n\n" for n in range(3000))
    )
    git_init(root)
    env = {**os.environ, "MEMORYD_MAX_FILE_CHUNKS": "20", "MEMORYD_INDEX_WRITE_CHUNKS": "2"}
    done = subprocess.run(
        [MEMORYD, "index", str(root), "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["files"], report["indexed"], report["skipped"], report["failed"]) == (3, 2, 1, 0)
    assert re.fullmatch(r"\d+ chunks, over max_file_chunks \(20\)", report["skips"]["long.py"])
    assert report["chunks"] == report["embedded"] == 2  # one each
    listed = subprocess.run(
        [MEMORYD, "status", "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert json.loads(listed.stdout)["skipped_files"] == [
        {"project": report["project"], "path": "long.py", "reason": report["skips"]["long.py"]}
    ]


def test_a_job_is_embedded_and_written_in_parts_of_whole_files() -> None:
    sizes = {"a": 3, "b": 1, "c": 0, "d": 5, "e": 2}
    groups = {rel: _Rows(chunks=[{"n": i} for i in range(n)]) for rel, n in sizes.items()}
    parts = [list(part) for part in _parts(groups, max_chunks=4)]
    # A file over the bound goes alone (max_file_chunks bounds it); none is split.
    assert parts == [["a", "b", "c"], ["d"], ["e"]]


def _loose(data_dir: Path) -> dict[str, str]:
    """Everything under the data dir that group or others could read (symlinks aside)."""
    return {
        str(p.relative_to(data_dir)): oct(stat.S_IMODE(p.lstat().st_mode))
        for p in [data_dir, *data_dir.rglob("*")]
        if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
    }


def test_a_one_shot_command_and_a_reopen_keep_every_file_private(
    data_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "one"
    root.mkdir()
    (root / "a.py").write_text("def a():\n    return 1\n")
    git_init(root)
    # A permissive umask, as a login shell has: memoryd must not depend on the caller's.
    done = subprocess.run(
        [MEMORYD, "index", str(root), "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert done.returncode == 0, done.stderr
    assert _loose(data_dir) == {}


async def test_a_reopened_database_keeps_its_files_private(data_dir: Path) -> None:
    previous = os.umask(0o077)  # as every command sets it
    try:
        store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
        try:
            await store.reopen()
        finally:
            await store.close()
    finally:
        os.umask(previous)
    assert _loose(data_dir) == {}


def test_a_data_dir_gone_read_only_stops_without_a_traceback(
    data_dir: Path, tmp_path: Path
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv, to run memoryd as a root bound by file modes")
    root = tmp_path / "one"
    root.mkdir()
    (root / "a.py").write_text("def a():\n    return 1\n")
    git_init(root)
    # Without these capabilities root obeys file modes as any user does.
    bound = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]
    daemon = _daemon(data_dir, root, tuple(bound))
    try:
        lines = Lines(daemon)
        lines.wait_for("index_files")
        for path in [data_dir, *data_dir.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o500 if path.is_dir() else 0o400)
        code, _ = _signalled(daemon)
    finally:
        _stop(daemon)
    stderr = lines.text()
    assert "Traceback" not in stderr, stderr
    assert "memoryd stopped" in stderr, stderr
    assert code == 0, stderr


def test_index_of_a_plain_directory_asks_for_force(data_dir: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("def a():\n    return 1\n")
    refused = subprocess.run(
        [MEMORYD, "index", str(plain), "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "is not in a git working tree" in refused.stderr
    assert "--force" in refused.stderr
    assert not (data_dir / "db").exists()  # refused before anything started
    forced = subprocess.run(
        [MEMORYD, "index", str(plain), "--data-dir", str(data_dir), "--json", "--force"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["indexed"] == 1


async def test_ingest_reports_the_edges_it_stored(data_dir: Path) -> None:
    done = _ingest(data_dir, S37)
    assert done.returncode == 0, done.stderr
    reported = json.loads(done.stdout)["edges"]
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        stored = await store.table_counts()
    finally:
        await store.close()
    assert reported["mentions"] > 0
    assert {table: stored[table] for table in reported} == reported


def test_redis_refusing_writes_stops_the_daemon_with_one_line(
    data_dir: Path, tmp_path: Path
) -> None:
    with small_disk(data_dir / "redis", "8m") as redis_dir:
        daemon = _daemon(data_dir, two_package_tree(tmp_path))
        try:
            lines = Lines(daemon)
            lines.wait_for("memoryd running")
            # Redis's append-only file can no longer grow: it answers writes with MISCONF.
            fill_disk(redis_dir)
            filled = time.monotonic()
            code = daemon.wait(timeout=HANG_BOUND)
            took = time.monotonic() - filled
        finally:
            _stop(daemon)
    stderr = lines.text()
    assert code == 1, stderr
    assert took < HANG_BOUND
    refused = [line for line in stderr.splitlines() if "memoryd stops" in line]
    assert len(refused) == 1, stderr
    # Redis's own words, not the command it refused (a job's payload, binary).
    assert (
        "refuses writes (MISCONF Errors writing to the AOF file: No space left on device)"
        in (refused[0])
    )
    assert "Traceback" not in stderr, stderr
    # No job is reported failed (by memoryd or by arq): they stay queued, to run again.
    assert "job index_files failed" not in stderr and "JobFailed" not in stderr, stderr


def test_redis_refusing_writes_under_a_one_shot_index_ends_it_with_one_line(
    data_dir: Path, tmp_path: Path
) -> None:
    with small_disk(data_dir / "redis", "8m") as redis_dir:
        command = _one_shot_index(data_dir, two_package_tree(tmp_path))
        try:
            lines = Lines(command)
            lines.wait_for(INDEXED_SOME)
            fill_disk(redis_dir)
            filled = time.monotonic()
            # Before, the command waited for its jobs until their timeout (half an hour).
            command.wait(timeout=HANG_BOUND)
            took = time.monotonic() - filled
            out = command.stdout.read() if command.stdout else ""
        finally:
            _stop(command)
    stderr = lines.text()
    assert command.returncode == 1, stderr
    assert out == ""  # no report of a run that did not finish
    assert took < HANG_BOUND
    refused = [line for line in stderr.splitlines() if line.startswith("memoryd: ")]
    assert len(refused) == 1, stderr
    assert (
        "refuses writes (MISCONF Errors writing to the AOF file: No space left on device)"
        in (refused[0])
    )
    assert "Traceback" not in stderr, stderr
    print(f"ended {took:.1f}s after the disk filled")


async def test_an_interrupted_commands_leftovers_do_not_hold_up_the_next_command(
    data_dir: Path, tmp_path: Path
) -> None:
    """An `index` stopped half-way leaves its jobs queued (the append-only file keeps them).
    The next command served them all before its own work: an `ingest` waited behind 600 of
    them. Its own job now goes ahead of them."""
    env = {**os.environ, "MEMORYD_INDEX_BATCH_FILES": "1", "MEMORYD_LOG_FORMAT": "human"}
    command = subprocess.Popen(
        [MEMORYD, "index", str(two_package_tree(tmp_path)), "--data-dir", str(data_dir)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    socket = data_dir / "redis" / "redis.sock"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.RedisError):
                if redis.Redis(unix_socket_path=str(socket)).zcard(jobs.JOBS_QUEUE) >= 20:
                    break
            time.sleep(0.2)
        code, _ = _signalled(command)
    finally:
        _stop(command)
    assert code == 128 + signal.SIGTERM
    started = datetime.now(UTC)
    done = _ingest(data_dir, SMALL)
    assert done.returncode == 0, done.stderr
    rt = Runtime(settings_for(data_dir))
    try:
        queued = await rt.start_queue()
        results = await queued.all_job_results()
        left = await queued.zcard(jobs.JOBS_QUEUE)
    finally:
        await rt.close()
    [ingest] = [r for r in results if r.function == jobs.INGEST_TRANSCRIPT.name]
    ahead = [
        r
        for r in results
        if r.function == jobs.INDEX_FILES.name
        and r.start_time >= started
        and r.finish_time <= ingest.start_time
    ]
    # Only the leftovers the command's worker took up before its own job was queued.
    assert len(ahead) <= HEAVY_JOBS, len(ahead)
    assert left >= 10  # the rest still wait for the daemon or the next command


def test_a_private_redis_that_keeps_dying_stops_the_daemon_with_one_line(
    data_dir: Path, tmp_path: Path
) -> None:
    """Killed once more than the daemon restarts it: `memoryd run` exits 1 with one line that
    says why, and no task's traceback after it ("Task exception was never retrieved")."""
    root = two_package_tree(tmp_path)
    daemon = _daemon(data_dir, root)
    try:
        lines = Lines(daemon)
        pid = _redis_pid(lines.wait_for("redis started"))
        # Killed once the daemon serves, so that each kill is a restart by the supervisor
        # (tests/test_runtime.py kills it at exact moments of the start-up).
        lines.wait_for("memoryd running")
        for _ in range(REDIS_RESTARTS):
            os.kill(pid, signal.SIGKILL)
            again = lines.wait_for(rf"\(pid {pid}\) was killed by signal 9: started it again")
            pid = int(re.search(r"again \(pid (\d+)\)", again).group(1))  # type: ignore[union-attr]
        os.kill(pid, signal.SIGKILL)
        code = daemon.wait(timeout=300)
    finally:
        _stop(daemon)
    stderr = lines.text()
    assert code == 1, stderr
    stops = [line for line in stderr.splitlines() if "memoryd stops" in line]
    assert len(stops) == 1, stderr
    assert (
        f"the private Redis (pid {pid}) was killed by signal 9, {REDIS_RESTARTS + 1} times in "
        "10 minutes"
    ) in stops[0]
    assert "Task exception was never retrieved" not in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.rstrip("\n").endswith(stops[0]), stderr


@pytest.mark.timeout(1800)  # two daemons index a tree each on a machine that may be loaded
def test_the_sync_after_a_crash_counts_the_jobs_queued_before_it(
    data_dir: Path, tmp_path: Path
) -> None:
    """kill -9 mid-index leaves index jobs in the private Redis (its append-only file). The
    restarted daemon's sync leaves their files to them: its progress covers every file and
    counts their work, so `status` never says `ready 0/0` nor waits at `indexing 0/N` while
    the old jobs do the work."""
    root = two_package_tree(tmp_path)
    files = len(list(scan.walk(root)))
    daemon = _daemon(data_dir, root)
    left: list[psutil.Process] = []
    try:
        Lines(daemon)
        wait_daemon(
            data_dir,
            lambda i: i["counts"]["file_state"] > 0 and i["queue"]["jobs"] >= 3,
            timeout=600,
        )
        left = psutil.Process(daemon.pid).children(recursive=True)
        daemon.kill()
        daemon.wait()
    finally:
        _stop(daemon)
    again = _daemon(data_dir, root)
    seen: list[dict] = []

    def indexed(info: dict) -> bool:
        [project] = info["projects"] or [{"index": None}]
        if project["index"] is not None:
            seen.append(project["index"])
        index = project["index"] or {}
        return index.get("state") == "ready" and info["queue"]["jobs"] == 0

    try:
        lines = Lines(again)
        # Asked over the daemon's query channel from here (what `memoryd status --json`
        # prints), not by a CLI process per poll: those starts were most of the test's CPU.
        wait_daemon(data_dir, indexed, timeout=1500)
    finally:
        _stop(again)
        for process in left:  # what the killed daemon left, if the new one did not end it
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
    stderr = lines.text()
    assert seen, stderr
    assert [s for s in seen if s["files_total"] != files] == [], stderr
    assert [s for s in seen if s["state"] == "ready" and s["files_done"] < files] == []
    assert (seen[-1]["state"], seen[-1]["files_done"]) == ("ready", files)
