"""Tailing a transcript while it is written, with the daemon killed and restarted in between,
ends with exactly the graph a one-shot ingest of the finished file produces."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from memoryd import queue
from memoryd.daemon.runtime import Runtime
from memoryd.store import Store
from tests.conftest import MEMORYD
from tests.fixtures import BIG_LINE

pytestmark = pytest.mark.e2e

SESSION = BIG_LINE.stem
# Fields that record when memoryd did something, not what the transcript says.
VOLATILE = {"ingestion_time", "updated_at", "valid_from", "embedding", "applied_at", "id"}
COMPARED = (
    "session",
    "memory",
    "goal",
    "entity",
    "summary",
    "has_goal",
    "reads",
    "modifies",
    "executes",
    "triggered",
    "denied",
    "spawned",
)


def _start(data_dir: Path, transcripts: Path, log: Path) -> subprocess.Popen[str]:
    # os.environ has no scheduled upkeep (tests/conftest.py, QUIET_SCHEDULE): an hourly decay
    # would lower the old transcript's importance in this database only.
    env = {**os.environ, "MEMORYD_TRANSCRIPTS": json.dumps([str(transcripts)])}
    with log.open("a") as out:
        return subprocess.Popen(
            [MEMORYD, "run", "--data-dir", str(data_dir)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _events(data_dir: Path) -> int:
    done = subprocess.run(
        [MEMORYD, "session", SESSION, "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        return -1
    return len(json.loads(done.stdout)["events"])


def _normalise(dump: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    out = {}
    for table in COMPARED:
        rows = [
            {k: v for k, v in row.items() if k not in VOLATILE} | {"key": str(row["id"])}
            for row in dump.get(table, [])
        ]
        out[table] = sorted(repr(sorted(row.items())) for row in rows)
    return out


async def test_tailing_with_kills_equals_one_shot(
    short_tmp: Path, tmp_path: Path, stack: Runtime
) -> None:
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    target = transcripts / f"{SESSION}.jsonl"
    target.write_bytes(b"")
    payload = BIG_LINE.read_bytes()
    rng = random.Random(20261121)
    # Random cut points, many of them inside lines (and inside the 1 MB line).
    cuts = [*sorted(rng.sample(range(1, len(payload)), 24)), len(payload)]
    kill_after = {6, 15}  # kill the daemon after these pieces were written

    tail_dir = Path(tempfile.mkdtemp(dir=short_tmp))
    log = tmp_path / "daemon.log"
    daemon = _start(tail_dir, transcripts, log)
    try:
        written = 0
        for index, cut in enumerate(cuts):
            with target.open("ab") as f:
                f.write(payload[written:cut])
            written = cut
            # Random pauses, so the daemon sees the pieces in varied bursts and is killed at
            # varied points of its work.
            await asyncio.sleep(rng.uniform(0.05, 0.4))
            if index in kill_after:
                await asyncio.sleep(rng.uniform(0.5, 2.0))
                daemon.send_signal(signal.SIGKILL)
                await asyncio.to_thread(daemon.wait, 30)
                daemon = _start(tail_dir, transcripts, log)
        deadline = time.monotonic() + 180
        while await asyncio.to_thread(_events, tail_dir) != 41:
            if time.monotonic() > deadline:
                pytest.fail(f"tailed session incomplete; daemon log:\n{log.read_text()[-4000:]}")
            await asyncio.sleep(1)  # each check is a process start: the daemon needs the CPU
    finally:
        daemon.send_signal(signal.SIGTERM)
        await asyncio.to_thread(daemon.wait, 60)
    assert daemon.returncode == 0

    # The one-shot reference: the finished file, ingested whole into another database.
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(target)])
    report = await queue.wait_for(job, 300)
    assert report["memories"] == 41
    reference = _normalise(await stack.store.dump())

    tailed_store = await Store.open(f"surrealkv://{tail_dir / 'db'}", "memoryd", "memory")
    try:
        tailed_dump = await tailed_store.dump()
        cursor = await tailed_store.transcript_cursor(str(target))
    finally:
        await tailed_store.close()
    assert cursor is not None and cursor["offset"] == len(payload)
    # File order carried across the tail's batches: one seq each, none twice, none skipped.
    assert sorted(m["seq"] for m in tailed_dump["memory"]) == list(range(41))
    tailed = _normalise(tailed_dump)
    for table in COMPARED:
        assert tailed[table] == reference[table], table
