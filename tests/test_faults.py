"""Faults the daemon must survive or report: Redis lost, disk full, signals at any stage."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import MEMORYD
from tests.test_daemon import _tree, _wait

pytestmark = pytest.mark.e2e

# Generous: the machine may be loaded; the real figures come from the kill-trial bench.
HANG_BOUND = 30


def _redis_server(daemon: subprocess.Popen[str]) -> psutil.Process:
    children = psutil.Process(daemon.pid).children(recursive=True)
    return next(p for p in children if "redis" in p.name())


def _daemon(data_dir: Path, root: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MEMORYD_INDEX_BATCH_FILES": "4", "MEMORYD_LOG_FORMAT": "human"}
    return subprocess.Popen(
        [MEMORYD, "run", "--data-dir", str(data_dir), "--repo", str(root)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(daemon: subprocess.Popen[str]) -> None:
    """Whatever happened, leave no process behind (SIGKILL only after the hang bound)."""
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=HANG_BOUND)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(daemon.pid).children(recursive=True):
                child.kill()
            daemon.kill()
            daemon.wait()


def test_redis_killed_mid_indexing_stops_the_daemon_with_one_line(
    data_dir: Path, tmp_path: Path
) -> None:
    root = _tree(tmp_path)
    daemon = _daemon(data_dir, root)
    try:
        _wait(data_dir, lambda i: i["counts"]["file_state"] > 0, timeout=300)
        redis_server = _redis_server(daemon)
        redis_server.kill()
        killed = time.monotonic()
        code = daemon.wait(timeout=HANG_BOUND)
        took = time.monotonic() - killed
    finally:
        _stop(daemon)
    stderr = daemon.stderr.read() if daemon.stderr else ""
    assert code != 0, stderr
    assert took < HANG_BOUND
    lost = [line for line in stderr.splitlines() if "private Redis" in line and "exited" in line]
    assert len(lost) == 1, stderr
    assert f"pid {redis_server.pid}" in lost[0]
    assert "Traceback" not in stderr, stderr
