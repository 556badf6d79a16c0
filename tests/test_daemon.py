"""The daemon as a service: no TCP port, private files, and SIGTERM mid-indexing loses nothing."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

import psutil
import pytest

from memoryd import projects
from memoryd.config import Settings
from memoryd.scan import walk
from memoryd.store import Store
from tests.conftest import (
    MEMORYD,
    daemon_status,
    expected_index,
    wait_daemon,
)

pytestmark = pytest.mark.e2e


def test_default_mode_opens_no_port_and_keeps_files_private(data_dir: Path, arq_tree: Path) -> None:
    daemon = subprocess.Popen(
        [MEMORYD, "run", "--data-dir", str(data_dir), "--repo", str(arq_tree)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_daemon(data_dir, lambda i: i["daemon_running"] and i["counts"]["code_chunk"] > 0)
        processes = [psutil.Process(daemon.pid), *psutil.Process(daemon.pid).children(True)]
        names = {p.name() for p in processes}
        assert any("redis" in n for n in names), names
        listening = [
            c
            for p in processes
            for c in p.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening == []
        unix = [c.laddr for p in processes for c in p.net_connections(kind="unix") if c.laddr]
        assert str(data_dir / "redis" / "redis.sock") in unix
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    db_files = [p for p in (data_dir / "db").rglob("*") if p.is_file()]
    assert db_files
    loose = {
        str(p): oct(stat.S_IMODE(p.stat().st_mode))
        for p in db_files
        if stat.S_IMODE(p.stat().st_mode) & 0o077
    }
    assert loose == {}


async def test_sigterm_mid_indexing_then_restart_equals_an_uninterrupted_run(
    data_dir: Path, arq_tree: Path
) -> None:
    root = arq_tree
    total = len(list(walk(root)))
    stopped_dir = Path(str(data_dir) + "-stopped")
    cmd = [MEMORYD, "run", "--data-dir", str(stopped_dir), "--repo", str(root)]
    # Small jobs, so the stop lands between commits with much of the work still to do (the
    # chunks of the tree, or their vectors, which follow them).
    env = {**os.environ, "MEMORYD_INDEX_BATCH_FILES": "4"}
    daemon = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_daemon(stopped_dir, lambda i: i["counts"]["file_state"] > 0, timeout=300)
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0
    partial = daemon_status(stopped_dir)
    assert partial is not None and partial["counts"]["file_state"] > 0
    owed = sum(p["vectors_owed"] for p in partial["projects"])
    assert partial["counts"]["file_state"] < total or owed > 0
    daemon = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_daemon(
            stopped_dir,
            lambda i: (
                i["queue"]["jobs"] == 0
                and i["counts"]["file_state"] >= total
                and not any(p["vectors_owed"] for p in i["projects"])
            ),
            timeout=600,
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0

    # What an uninterrupted run leaves: every chunk as the pure stages cut the tree (the
    # expectation the index tests compare every finished index with; indexing it once more
    # here cost a third of the test) and a file state for every file the walk lists.
    project = projects.resolve(root)
    expected = expected_index(root, project.id, Settings().chunk_max_chars)
    store = await Store.open(f"surrealkv://{stopped_dir / 'db'}", "memoryd", "memory")
    try:
        assert await store.code_index(project.id) == expected
        assert await store.indexed_paths(project.id) == sorted(walk(root))
        assert await store.valid_chunk_count() == sum(len(c) for c in expected.values())
    finally:
        await store.close()
