"""Server mode: several `memoryd worker` processes share one Redis queue; no job runs twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from memoryd import projects, queue
from memoryd.embedded import EmbeddedRedis
from memoryd.store import Store
from tests.conftest import MEMORYD, wait_for_workers

pytestmark = pytest.mark.e2e

SERVER_URL = os.environ.get("MEMORYD_TEST_SURREAL_URL")


async def test_two_workers_share_the_queue_and_split_the_jobs(
    arq_tree: Path, tmp_path: Path
) -> None:
    """No SurrealDB server can be installed on this machine (it is not a Python, Debian or
    npm package), so each worker writes to its own embedded database here: what each did is
    then visible apart, and the two halves must add up to every job exactly once."""
    redis_dir = tmp_path / "r"
    server = EmbeddedRedis(redis_dir)
    server.start()
    workers = []
    try:
        for name in ("w1", "w2"):
            workers.append(
                subprocess.Popen(
                    [
                        MEMORYD,
                        "worker",
                        "--data-dir",
                        str(tmp_path / name),
                        "--redis-url",
                        server.url,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        redis = await queue.connect(server.url)
        try:
            await wait_for_workers(redis, 2, 120)
            project = projects.resolve(arq_tree)
            paths = sorted(p.relative_to(arq_tree).as_posix() for p in arq_tree.glob("*.py"))
            jobs = await queue.enqueue_index(
                redis, project.id, arq_tree, paths, batch=1, fresh=True
            )
            reports = [await queue.wait_for(job, 600) for job, _ in jobs]
        finally:
            await redis.aclose()
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        server.stop()
    assert [r["files"] for r in reports] == [1] * len(paths)
    done: list[set[str]] = []
    for name in ("w1", "w2"):
        store = await Store.open(f"surrealkv://{tmp_path / name / 'db'}", "memoryd", "memory")
        try:
            done.append(set(await store.indexed_paths(project.id)))
        finally:
            await store.close()
    assert done[0] and done[1], "both workers took jobs"
    assert done[0] & done[1] == set()
    assert done[0] | done[1] == set(paths)


@pytest.mark.skipif(
    SERVER_URL is None,
    reason="needs a SurrealDB server "
    "(MEMORYD_TEST_SURREAL_URL=ws://…); none can be installed on this machine",
)
def test_two_workers_against_one_surrealdb_server(arq_tree: Path, tmp_path: Path) -> None:
    redis_dir = tmp_path / "r"
    server = EmbeddedRedis(redis_dir)
    server.start()
    env = {**os.environ, "MEMORYD_REDIS_URL": server.url, "MEMORYD_SURREAL_URL": str(SERVER_URL)}
    workers = [
        subprocess.Popen([MEMORYD, "worker", "--data-dir", str(tmp_path / n)], env=env)
        for n in ("w1", "w2")
    ]
    try:
        done = subprocess.run(
            [MEMORYD, "index", str(arq_tree), "--data-dir", str(tmp_path / "c"), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        totals = json.loads(done.stdout)
        assert totals["failed"] == 0 and totals["indexed"] == totals["files"] > 0, totals
        assert totals["embedded"] == totals["chunks"] > 0, totals
        # What the workers wrote to the server is what a client of the server finds.
        found = subprocess.run(
            [MEMORYD, "search", "parse a redis connection DSN url", "-n", "3", "--json",
             "--data-dir", str(tmp_path / "c")],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
        assert found.returncode == 0, found.stderr
        source = (arq_tree / "connections.py").read_text().splitlines()
        line = next(n for n, text in enumerate(source, 1) if "def from_dsn" in text)
        hits = json.loads(found.stdout)["results"]
        assert any(
            h["path"] == "connections.py" and h["start_line"] <= line <= h["end_line"] for h in hits
        ), hits
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        server.stop()
