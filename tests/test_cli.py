"""The `memoryd` command as a user runs it: real processes, real services, exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from memoryd import queue
from memoryd.embedded import socket_alive
from tests.conftest import MEMORYD, wait_daemon, wait_for_workers

pytestmark = pytest.mark.e2e


def memoryd(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MEMORYD, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_index_search_status_without_a_daemon(data_dir: Path, arq_tree: Path) -> None:
    done = memoryd("index", str(arq_tree), "--data-dir", str(data_dir), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["root"] == str(arq_tree)
    assert report["indexed"] == report["files"] > 10

    found = memoryd(
        "search", "parse a redis connection DSN url", "--data-dir", str(data_dir), "--limit", "3"
    )
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert len(lines) == 3
    project, path_range, score, _name = lines[0].split("  ")
    assert project == report["project"]
    assert re.fullmatch(r"connections\.py:\d+-\d+", path_range)
    assert 0 < float(score) < 1
    assert any("from_dsn" in line for line in lines)

    as_json = memoryd(
        "search", "cron", "--data-dir", str(data_dir), "--json", "--limit", "2", "--project", "arq"
    )
    assert as_json.returncode == 0, as_json.stderr
    results = json.loads(as_json.stdout)["results"]
    assert len(results) == 2 and all(r["kind"] == "code" for r in results)

    status = memoryd("status", "--data-dir", str(data_dir), "--json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["counts"]["project"] == 1
    assert info["counts"]["file_state"] == report["files"]
    assert info["counts"]["code_chunk"] == report["chunks"]
    assert info["redis_mode"] == "embedded" and info["surreal_mode"] == "embedded"
    assert info["data_dir"] == str(data_dir)
    assert info["queue"]["jobs"] == 0 and info["queue"]["oldest_job_age_seconds"] is None
    # The index jobs (one per 32 files) and this command's own queries finished just now.
    assert info["queue"]["last_hour"]["done"] >= report["files"] // 32 + 1
    assert info["queue"]["last_hour"]["failed"] == 0
    assert info["database_bytes"] > 0 and info["transcript_lag"] == {}
    # A fresh index has nothing to prune; the shortcut and the maintenance spelling agree.
    for args in (("prune", "--dry-run"), ("maintenance", "run", "prune", "--dry-run")):
        dry = memoryd(*args, "--data-dir", str(data_dir), "--json")
        assert dry.returncode == 0, dry.stderr
        result = json.loads(dry.stdout)
        assert result["dry_run"] is True
        assert result["deleted"] == {"code_chunk": 0, "memory": 0, "entity": 0}
    # The command's own Redis and database are gone again: nothing left running.
    assert not socket_alive(data_dir / "redis" / "redis.sock")


def test_run_watches_serves_and_stops_cleanly(
    data_dir: Path, arq_tree: Path, tmp_path: Path
) -> None:
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(arq_tree, repo)
    daemon = subprocess.Popen(
        [MEMORYD, "run", "--data-dir", str(data_dir), "--repo", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Asked over the daemon's query channel from here, not by a CLI process per poll (each
        # a whole process start that took the CPU the daemon needs); `status` as a command is
        # run below and in the tests after this one.
        wait_daemon(
            data_dir,
            lambda i: (
                i["daemon_running"] and i["counts"]["file_state"] > 10 and i["queue"]["jobs"] == 0
            ),
        )

        # A second daemon on the same data dir is refused.
        second = memoryd("run", "--data-dir", str(data_dir))
        assert second.returncode == 1
        assert "already running" in second.stderr

        # An edit is picked up by the watcher and found through the daemon.
        (repo / "zebra_module.py").write_text("def striped_zebra_counter():\n    return 7\n")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = memoryd(
                "search", "striped_zebra_counter", "--data-dir", str(data_dir), "--limit", "1"
            )
            if found.stdout.split("  ")[1:2] == ["zebra_module.py:1-2"]:
                break
            time.sleep(1)
        else:
            pytest.fail(f"new file never found: {found.stdout} {found.stderr}")
    finally:
        daemon.send_signal(signal.SIGTERM)
        output, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, output
    assert "memoryd stopped" in output
    assert not socket_alive(data_dir / "redis" / "redis.sock")
    # The database lock is released: a new command can open it.
    again = memoryd("status", "--data-dir", str(data_dir), "--json")
    assert again.returncode == 0, again.stderr


def test_error_messages_and_exit_codes(data_dir: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "plain-file"
    a_file.write_text("x")

    bad_dir = memoryd("status", "--data-dir", str(a_file / "sub"))
    assert bad_dir.returncode == 1
    assert "not writable" in bad_dir.stderr and "Traceback" not in bad_dir.stderr

    missing = memoryd("index", str(tmp_path / "nope"), "--data-dir", str(data_dir))
    assert missing.returncode == 1 and "does not exist" in missing.stderr

    not_dir = memoryd("index", str(a_file), "--data-dir", str(data_dir))
    assert not_dir.returncode == 1 and "is not a directory" in not_dir.stderr

    # A transcript that is not there fails before anything is ingested, even beside one that is.
    transcript = tmp_path / "session.jsonl"
    transcript.write_text("{}\n")
    gone = tmp_path / "gone.jsonl"
    no_file = memoryd("ingest", str(transcript), str(gone), "--data-dir", str(data_dir))
    assert no_file.returncode == 1 and f"{gone} does not exist" in no_file.stderr
    assert not (data_dir / "db").exists()  # no database was even opened
    empty = tmp_path / "empty"
    empty.mkdir()
    no_transcripts = memoryd("ingest", str(empty), "--data-dir", str(data_dir))
    assert no_transcripts.returncode == 1
    assert "no transcript files (*.jsonl, *.jsonl.zst) found" in no_transcripts.stderr

    unreachable = memoryd(
        "status", "--data-dir", str(data_dir), "--redis-url", "redis://127.0.0.1:1/0"
    )
    assert unreachable.returncode == 1
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in unreachable.stderr

    config = tmp_path / "config.toml"
    config.write_text('bogus_key = 1\nmodel = "sentence-transformers/all-MiniLM-L6-v2"\n')
    unknown = memoryd("status", "--data-dir", str(data_dir), env={"MEMORYD_CONFIG": str(config)})
    assert unknown.returncode == 1
    assert "bogus_key" in unknown.stderr and "Extra inputs are not permitted" in unknown.stderr


async def test_locked_database_says_so(data_dir: Path) -> None:
    from memoryd.store import Store

    holder = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        locked = memoryd("status", "--data-dir", str(data_dir))
        assert locked.returncode == 1
        assert "locked by another memoryd process" in locked.stderr
        assert "server mode" in locked.stderr
    finally:
        await holder.close()


async def _worker_announced(socket: Path) -> None:
    """Until the worker, its model loaded, has put its heartbeat into its Redis."""
    redis = await queue.connect(f"unix://{socket}")
    try:
        await wait_for_workers(redis, 1, 120)
    finally:
        await redis.aclose()


def test_worker_and_watcher_as_separate_processes(
    data_dir: Path, arq_tree: Path, tmp_path: Path
) -> None:
    """The two halves of the daemon run apart and share the work through the queue."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(arq_tree, repo)
    worker = subprocess.Popen(
        [MEMORYD, "worker", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watcher = None
    try:
        socket = data_dir / "redis" / "redis.sock"
        deadline = time.monotonic() + 60
        while not socket_alive(socket):
            assert time.monotonic() < deadline, "worker did not start its Redis"
            time.sleep(0.2)
        asyncio.run(_worker_announced(socket))
        watcher = subprocess.Popen(
            [MEMORYD, "watch", "--data-dir", str(data_dir), "--repo", str(repo)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(2)
            found = memoryd(
                "search",
                "parse a redis connection DSN url",
                "--data-dir",
                str(data_dir),
                "--limit",
                "3",
            )
            if found.returncode == 0 and "from_dsn" in found.stdout:
                break
        else:
            pytest.fail("the watcher's reconciliation never reached the worker")
        status = json.loads(memoryd("status", "--data-dir", str(data_dir), "--json").stdout)
        assert status["daemon_running"] is True  # a worker answers the queue
        assert status["counts"]["project"] == 1
    finally:
        for process in (watcher, worker):
            if process is not None:
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=60)
    assert watcher is not None and watcher.returncode == 0 and worker.returncode == 0


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def test_commands_run_while_the_daemon_starts_never_take_its_database(
    data_dir: Path, tmp_path: Path
) -> None:
    """`memoryd status` while `memoryd run` was starting opened the database itself, and the
    daemon exited 1 ("locked by another memoryd process"). The start is held open here by
    holding the data dir's serving lock, as a one-shot command that serves it does: status
    answers what it knows without the database (exit 3) and a search waits for the daemon."""
    from memoryd.liveness import HeldLock
    from memoryd.paths import serving_lock_path

    data_dir.mkdir(mode=0o700, exist_ok=True)
    held = HeldLock(serving_lock_path(data_dir))
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [MEMORYD, "run", "--data-dir", str(data_dir), "--log-format", "human"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    searching = None
    try:
        _wait_for_line(log, "a command using the data dir, to end", daemon, 120)
        status = memoryd("status", "--data-dir", str(data_dir))
        assert status.returncode == 3, status.stderr
        assert f"daemon        starting or stopping (pid {daemon.pid})" in status.stdout
        assert f"data dir      {data_dir}" in status.stdout
        as_json = json.loads(memoryd("status", "--data-dir", str(data_dir), "--json").stdout)
        assert (as_json["daemon_running"], as_json["daemon_starting"]) == (False, daemon.pid)
        said_by_search = tmp_path / "search.err"
        with said_by_search.open("wb") as err:
            searching = subprocess.Popen(
                [MEMORYD, "search", "anything", "--data-dir", str(data_dir), "--json"],
                stdout=subprocess.PIPE,
                stderr=err,
            )
        # The search waits, and says so: it serves nothing itself (nor did status).
        _wait_for_line(said_by_search, "waiting for it", searching, 120)
        waiting = f"memoryd (pid {daemon.pid}) is starting with data dir {data_dir}"
        assert waiting in said_by_search.read_text()
        held.release()
        out, _ = searching.communicate(timeout=300)
        assert searching.returncode == 0, said_by_search.read_text()
        assert json.loads(out)["results"] == []
        assert daemon.poll() is None
        assert memoryd("status", "--data-dir", str(data_dir)).returncode == 0
    finally:
        held.release()
        if searching is not None and searching.poll() is None:
            searching.kill()
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(120)
    said = log.read_text()
    assert code == 0, said
    assert "locked" not in said and "left by a memoryd that was killed" not in said
