"""The embedded database is reopened to give its memory back, and nothing notices."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd import heap, jobs, queue
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.store import connection as engine
from tests.conftest import queued_search, settings_for
from tests.fixtures import S37


@pytest.mark.e2e
async def test_reopening_under_load_loses_nothing(data_dir: Path, embedder: Embedder) -> None:
    rt = Runtime(settings_for(data_dir, transcripts=[]), embedder)
    try:
        redis = await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        store = rt.store
        assert store is not None
        [job] = await queue.enqueue_ingest(redis, [str(S37)])
        searches = reopens = 0
        # Searches keep coming and the database is reopened under them while the ingest writes.
        while not await queue.job_done(job):
            hits = await queued_search(redis, "render the html template", 3, "memory")
            assert isinstance(hits, list)
            searches += 1
            if searches % 3 == 0:
                await store.reopen()
                reopens += 1
        report = await queue.wait_for(job, 60)
        assert report["memories"] == 282 and report["edges"]["modifies"] == 30
        assert reopens >= 2 and store.reopened >= reopens  # >=: it may also reopen on its own
        counts = await store.counts()
        assert counts["memory"] == 282 and counts["session"] == 1
        replay = await queue.call(redis, jobs.SESSION, "37f83ec9")
        assert len(replay["events"]) == 282
    finally:
        await rt.close()


GIB = 1 << 30


def test_the_installed_engine_is_the_one_the_memtable_table_was_measured_on() -> None:
    assert importlib.metadata.version("surrealdb-embedded") == engine.MEASURED_ENGINE


def test_memtable_size_follows_the_engines_table() -> None:
    """surrealdb-core 3.2 (kvs/surrealkv/cnf.rs): 64 MiB under 1 GiB of memory, 128 MiB under
    4, 256 MiB under 16, 1 GiB under 64, 4 GiB above."""
    sizes = [engine.memtable_bytes(gib * GIB) for gib in (0.5, 2, 8, 24, 64, 256)]
    assert [s >> 20 for s in sizes] == [64, 128, 256, 1024, 4096, 4096]


def test_reopen_comes_before_the_memtable_fills() -> None:
    """A full memtable is never written out by this engine build and writes wait for ever, so
    the configured growth is capped at half the memtable the engine chose."""
    mib = 1 << 20
    assert engine.reopen_threshold(96 * mib, 24 * GIB) == 96 * mib
    assert engine.reopen_threshold(96 * mib, 512 * mib) == 32 * mib  # a small container
    assert engine.reopen_threshold(600 * mib, 8 * GIB) == 128 * mib
    assert engine.reopen_threshold(96 * mib, None) == 96 * mib  # no /proc: as configured


def test_an_open_that_merged_is_given_back_at_the_next_check_but_never_in_a_loop() -> None:
    """The floor is the heap with the datastore closed: an open that took the threshold or more
    (the engine merged its table files) counts from the floor, so the next check reopens; a
    second such open in a row counts from itself, so a large engine never reopens for ever."""
    mib = 1 << 20
    threshold = 96 * mib
    # An ordinary open: growth counts from after it.
    assert engine.count_growth_from(300 * mib, 340 * mib, threshold, False) == (340 * mib, False)
    # A merge: 174 MiB more than the floor, counted as growth at once.
    assert engine.count_growth_from(474 * mib, 648 * mib, threshold, False) == (474 * mib, True)
    # The reopen that gave the merge back was big too: count from after it, no loop.
    assert engine.count_growth_from(358 * mib, 460 * mib, threshold, True) == (460 * mib, True)
    # Then an ordinary open again.
    assert engine.count_growth_from(358 * mib, 380 * mib, threshold, True) == (380 * mib, False)
    # Nothing measured (no /proc) or a server connection (no threshold): as opened.
    assert engine.count_growth_from(None, None, threshold, False) == (None, False)
    assert engine.count_growth_from(300 * mib, 340 * mib, None, False) == (340 * mib, False)


def test_engine_memory_is_what_this_machine_reports() -> None:
    meminfo = Path("/proc/meminfo").read_text()
    total = int(meminfo.split("MemTotal:")[1].split()[0]) * 1024
    found = engine.engine_memory_bytes()
    assert found is not None and 0 < found <= total
    # Where there is no /proc (macOS) the machine's memory comes from sysconf: the same number.
    assert engine._physical_memory() == total


async def test_the_models_memory_is_not_counted_as_the_databases(
    stack: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """Counted from the database's open, the model loaded after it made the first check reopen
    the database for nothing ("reopened to give back its memory: 187 MiB -> 215 MiB")."""
    store = stack.store
    assert store is not None
    if heap.anon_rss_bytes() is None:
        pytest.skip("this system's memory is not measured (neither Linux nor macOS)")
    growth = store.memory_growth
    assert growth is not None and growth < 16 << 20
    caplog.set_level(logging.INFO, logger=engine.__name__)
    await store.reopen()
    [line] = [r.getMessage() for r in caplog.records if "reopened" in r.getMessage()]
    assert re.fullmatch(
        r"database reopened \(what it held in memory is on disk now\): "
        r"(\d+ MiB given back|nothing given back) \(\d+ MiB -> \d+ MiB\) in \d+\.\d\ds",
        line,
    )
    given, before, after = re.findall(
        r"(\d+|nothing) (?:MiB )?given back \((\d+) MiB -> (\d+)", line
    )[0]
    assert (given == "nothing") == (int(before) <= int(after))


# Run in a process of its own: closing the engine under a running query aborts the process.
_CLOSE_UNDER_A_QUERY = """
import asyncio, sys
from memoryd.store.connection import Connection

async def main(url: str, rows: int) -> None:
    db = await Connection.open(url, "t", "t")
    await db.query_raw("DEFINE TABLE x SCHEMALESS", {})
    write = asyncio.create_task(
        db.query_raw(f"FOR $i IN 0..{rows} {{ CREATE x SET v = $i; }}", {})
    )
    await asyncio.sleep(0)  # the write's engine call is under way
    write.cancel()  # its caller gives up (a job cut short, a shutdown)
    await db.close()
    db = await Connection.open(url, "t", "t")
    counted = await db.query_raw("RETURN count(SELECT * FROM x)", {})
    print(counted["result"][0]["result"])
    await db.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def test_closing_waits_for_the_engines_calls_even_when_their_callers_gave_up(
    tmp_path: Path,
) -> None:
    """Closing under a running query aborted the process ('panic in a function that cannot
    unwind': a one-shot `memoryd status` exited -6 on a loaded machine). The engine finishes a
    call whose caller was cancelled, so close waits for it: no abort, and every row is there."""
    rows = 500
    done = subprocess.run(
        [sys.executable, "-c", _CLOSE_UNDER_A_QUERY, f"surrealkv://{tmp_path}/db", str(rows)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(rows)]


_ENDED = """
import atexit, sys
atexit.register(lambda: print("finalized", file=sys.stderr))
from memoryd.entry import main
sys.argv = ["memoryd", *sys.argv[1:]]
main()
"""


def test_a_command_that_opened_the_database_ends_without_finalizing(tmp_path: Path) -> None:
    """The engine's threads may still drop what they held when a command is done; one that
    touches the interpreter while it finalizes aborts the process (134 after the work was
    done: open, write, close and exit aborted 5 times in 100 at load ~6; ended without
    finalizing, 0 in 150). Its exit code and output stay the command's."""

    def memoryd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _ENDED, *args], capture_output=True, text=True, timeout=600
        )

    data = str(tmp_path / "data")
    status = memoryd("status", "--data-dir", data, "--json")
    assert (status.returncode, status.stderr) == (0, "")
    assert json.loads(status.stdout)["data_dir"] == data
    missing = memoryd("session", "nope", "--data-dir", data)
    assert (missing.returncode, missing.stderr) == (1, "memoryd: no session 'nope'\n")
    light = memoryd("--version")  # no database: an ordinary end
    assert (light.returncode, light.stdout, light.stderr) == (0, "memoryd 0.1.0\n", "finalized\n")
