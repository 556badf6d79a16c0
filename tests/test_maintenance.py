"""Decay and prune with the clock driven by the test: exact outcomes per memory."""

from __future__ import annotations

import asyncio
import math
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memoryd import jobs, queue
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.store.maintenance import DECAY_STEP
from tests.conftest import queued_search
from tests.fixtures import SMALL


async def _memories(rt: Runtime) -> dict[str, dict]:
    assert rt.store is not None
    return {str(row["id"].id): row for row in (await rt.store.dump())["memory"]}


async def _run(rt: Runtime, task: str, at: datetime, **kwargs: object) -> dict:
    assert rt.redis is not None
    job = await rt.redis.enqueue_job(task, at.isoformat(), _queue_name=jobs.JOBS_QUEUE, **kwargs)
    assert job is not None
    return await queue.wait_for(job, 300)


async def test_decay_pin_access_and_prune(stack: Runtime, tmp_path: Path) -> None:
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(SMALL.read_bytes())
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(transcript)])
    await queue.wait_for(job, 300)
    # Taken in as it happened, as live capture does (prune's idle window runs from then).
    await stack.store.query("UPDATE memory SET ingestion_time = event_time;")
    memories = await _memories(stack)
    assert len(memories) == 22
    kinds: dict[str, list[str]] = {}
    for key, row in memories.items():
        kinds.setdefault(row["kind"], []).append(key)
    prompt = min(kinds["user_prompt"], key=lambda k: memories[k]["seq"])
    t0 = memories[prompt]["event_time"]
    pinned = kinds["tool_result"][0]
    assert (await queue.call(stack.redis, jobs.PIN, pinned, True)) == {
        "memory": pinned,
        "pinned": True,
    }

    # 90 days on, a prompt (half-life 90 days, never read) is worth exactly half.
    result = await _run(stack, "decay", t0 + timedelta(days=90))
    assert result["memories"] == 21  # all but the pinned one
    after = await _memories(stack)
    assert math.isclose(after[prompt]["importance"], 0.5, rel_tol=1e-9)
    assert after[pinned]["importance"] == 1.0
    for key in kinds["tool_call"]:
        age = (t0 + timedelta(days=90) - after[key]["event_time"]).total_seconds() / 86400
        # The database counts whole seconds of age.
        assert math.isclose(after[key]["importance"], 0.5 ** (age / 14.0), rel_tol=1e-6)

    # Reading the prompt (a search returned it) restarts its clock and boosts it.
    read_at = t0 + timedelta(days=90)
    await stack.store.bump_access("memory", [prompt], read_at)
    await _run(stack, "decay", read_at)
    assert (await _memories(stack))[prompt]["importance"] == 1.0  # capped at 1

    # 200 days on: what faded below the floor and was not read for 60 days goes; prompts
    # (half-life 90) stay above it, the pinned result stays whatever it is.
    later = t0 + timedelta(days=200)
    await _run(stack, "decay", later)
    faded = await _memories(stack)
    expected_gone = {
        k for k, row in faded.items() if row["importance"] < 0.05 and k != pinned and k != prompt
    }
    survivors = set(kinds["user_prompt"]) | {pinned}
    assert expected_gone == set(faded) - survivors
    dry = await _run(stack, "prune", later, dry_run=True)
    assert dry["deleted"]["memory"] == len(expected_gone)
    assert len(await _memories(stack)) == 22  # a dry run deletes nothing
    done = await _run(stack, "prune", later)
    assert done["deleted"]["memory"] == len(expected_gone)
    assert done["deleted"]["entity"] > 0  # targets only the deleted tool calls pointed at
    assert set(await _memories(stack)) == survivors
    dump = await stack.store.dump()
    memory_ids = {str(row["id"].id) for row in dump["memory"]}
    # No edge is left pointing at a deleted memory, no entity is left without edges.
    for table in ("reads", "executes", "triggered", "denied"):
        for edge in dump.get(table, []):
            assert str(edge["in"].id) in memory_ids
    assert await stack.store.orphan_entities(100) == []
    info = await queue.call(stack.redis, jobs.STATUS)
    assert set(info["maintenance"]) == {"decay", "prune"}
    assert info["maintenance"]["prune"]["result"]["deleted"]["memory"] == len(expected_gone)


async def test_history_ingested_today_is_kept_its_idle_window_whatever_its_age(
    stack: Runtime, tmp_path: Path
) -> None:
    """A new user's first start ingests months of transcripts: what faded with age is still
    theirs to find for prune_idle_days after memoryd took it in."""
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(SMALL.read_bytes())
    assert stack.redis is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(transcript)])
    await queue.wait_for(job, 300)
    memories = await _memories(stack)
    taken_in = max(row["ingestion_time"] for row in memories.values())
    idle = timedelta(days=stack.settings.prune_idle_days)
    inside = taken_in + idle - timedelta(hours=1)
    past = taken_in + idle + timedelta(hours=1)
    # A year after the session, most of it has faded below the floor (worked out from the
    # stored 1.0, so every faded row is rewritten: the set is exact).
    assert inside - max(row["event_time"] for row in memories.values()) > timedelta(days=365)
    await _run(stack, "decay", past)
    faded = {k for k, row in (await _memories(stack)).items() if row["importance"] < 0.05}
    assert len(faded) > 10
    # Just inside the window, nothing goes; past it, unread, what faded goes.
    kept = await _run(stack, "prune", inside)
    assert kept["deleted"]["memory"] == 0
    assert set(await _memories(stack)) == set(memories)
    gone = await _run(stack, "prune", past)
    assert gone["deleted"]["memory"] == len(faded)
    assert set(await _memories(stack)) == set(memories) - faded


@pytest.mark.e2e
async def test_switching_model_reembeds_everything(
    data_dir: Path, arq_indexed: Path, tmp_path: Path, embedder: Embedder
) -> None:
    from memoryd.embedding import CLS_MODEL
    from tests.conftest import copy_data_dir, settings_for

    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(SMALL.read_bytes())
    copy_data_dir(arq_indexed, data_dir)  # arq's tree indexed, with its vectors
    first = Runtime(settings_for(data_dir), embedder)
    try:
        await first.start_queue(exclusive=True)
        await first.serve()
        assert first.redis is not None
        [job] = await queue.enqueue_ingest(first.redis, [str(transcript)])
        await queue.wait_for(job, 300)
    finally:
        await first.close()

    # The configured model changes: nothing is re-embedded at start, search keeps working.
    second = Runtime(settings_for(data_dir, model=CLS_MODEL, maintenance_batch=20))
    try:
        await second.start_queue(exclusive=True)
        await second.serve()
        assert second.redis is not None and second.store is not None
        waiting = (await queue.call(second.redis, jobs.STATUS))["waiting_for_reembed"]
        assert waiting["code_chunk"] > 0 and waiting["memory"] > 0 and waiting["goal"] == 1
        # Before migration only BM25 can find code (no k-NN across two models).
        hits = await queued_search(second.redis, "from_dsn", 3)
        assert any(h["name"] == "RedisSettings.from_dsn" for h in hits)
        # One run with a single small batch per table is partial; runs resume until done.
        job = await second.redis.enqueue_job("reembed", 1, _queue_name=jobs.JOBS_QUEUE)
        assert job is not None
        partial = await queue.wait_for(job, 300)
        assert sum(partial["remaining"].values()) > 0
        while sum(partial["remaining"].values()):
            job = await second.redis.enqueue_job("reembed", _queue_name=jobs.JOBS_QUEUE)
            assert job is not None
            partial = await queue.wait_for(job, 600)
        models = {
            row.get("embedding_model")
            for t in ("code_chunk", "goal")
            for row in (await second.store.dump())[t]
        }
        assert models == {CLS_MODEL}
        hits = await queued_search(second.redis, "parse a redis connection DSN url", 3)
        assert any(
            h["path"] == "connections.py" and h["name"] == "RedisSettings.from_dsn" for h in hits
        ), hits
    finally:
        await second.close()


async def _ingest(rt: Runtime, transcript: Path) -> dict[str, dict]:
    assert rt.redis is not None
    transcript.write_bytes(SMALL.read_bytes())
    [job] = await queue.enqueue_ingest(rt.redis, [str(transcript)])
    await queue.wait_for(job, 300)
    return await _memories(rt)


def _unix(moment: datetime) -> int:
    """Whole seconds, as the database's time::unix counts them."""
    return math.floor(moment.timestamp())


async def test_decay_counts_a_time_in_the_future_as_age_zero(
    stack: Runtime, tmp_path: Path
) -> None:
    """The clock stands in the middle of the transcript: what happened (or was read) after it
    is worth exactly 1, the rest decays from its own time, and prune at that clock works."""
    assert stack.store is not None
    memories = await _ingest(stack, tmp_path / "session.jsonl")
    times = sorted({row["event_time"] for row in memories.values()})
    clock = times[len(times) // 2]
    early = min(memories, key=lambda k: memories[k]["event_time"])
    # Read "tomorrow" by a machine whose clock runs fast.
    await stack.store.bump_access("memory", [early], clock + timedelta(days=1))
    half_lives = stack.settings.half_life_days

    decayed = await _run(stack, "decay", clock)
    assert decayed["memories"] == 22
    after = await _memories(stack)
    future = {k for k, row in after.items() if row["event_time"] > clock} | {early}
    assert 0 < len(future) < 22
    assert {k: after[k]["importance"] for k in future} == dict.fromkeys(future, 1.0)
    rewritten = 0
    for key in set(after) - future:
        row = after[key]
        age_days = (_unix(clock) - _unix(row["event_time"])) / 86400
        expected = 0.5 ** (age_days / half_lives[row["kind"]])
        # Stored only where it moved by DECAY_STEP from the 1.0 it was ingested with.
        moved = 1.0 - expected >= DECAY_STEP
        rewritten += moved
        stored = expected if moved else 1.0
        assert math.isclose(row["importance"], stored, rel_tol=1e-9), (key, row["kind"])
    assert decayed["rewritten"] == rewritten
    # Prune compares the same ages: a time after its clock is simply not old.
    pruned = await _run(stack, "prune", clock)
    assert pruned["deleted"]["memory"] == 0 and pruned["deleted"]["code_chunk"] == 0


@pytest.mark.e2e
async def test_prune_dry_run_counts_all_that_would_go_not_one_batch(
    data_dir: Path, arq_tree: Path, tmp_path: Path, embedder: Embedder
) -> None:
    from memoryd import projects
    from tests.conftest import git, orphaned_by, settings_for

    tree = tmp_path / "tree"
    shutil.copytree(arq_tree, tree)
    batch = 3
    rt = Runtime(settings_for(data_dir, maintenance_batch=batch), embedder)
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        assert rt.redis is not None and rt.store is not None
        project = projects.resolve(tree)
        for job, _ in await projects.sync(rt.redis, project, 32):
            await queue.wait_for(job, 300)
        # Two files go: their chunks are retired now, expired a retention later.
        git(tree, "rm", "-q", "worker.py", "jobs.py")
        for job, _ in await projects.sync(rt.redis, project, 32):
            await queue.wait_for(job, 300)
        memories = await _ingest(rt, tmp_path / "session.jsonl")
        t0 = min(row["event_time"] for row in memories.values())
        later = max(t0, datetime.now(UTC)) + timedelta(days=200)
        await _run(rt, "decay", later)
        dump = await rt.store.dump()
        expired = {str(r["id"].id) for r in dump["code_chunk"] if r.get("valid_until")}
        # 200 days on, every memory is idle for longer than prune_idle_days.
        faded = {
            str(r["id"].id)
            for r in dump["memory"]
            if r["importance"] < rt.settings.importance_floor and not r["pinned"]
        }
        doomed = {("code_chunk", k) for k in expired} | {("memory", k) for k in faded}
        expected = {
            "code_chunk": len(expired),
            "memory": len(faded),
            "entity": len(orphaned_by(dump, doomed)),
        }
        # Each is more than one batch: a dry run that stopped after one would say `batch`.
        assert min(expected.values()) > batch, expected

        dry = await _run(rt, "prune", later, dry_run=True)
        assert dry["dry_run"] is True and dry["deleted"] == expected
        # A dry run deletes nothing (it only records that it ran).
        sizes = {t: len(r) for t, r in (await rt.store.dump()).items() if t != "maintenance_run"}
        assert sizes == {t: len(r) for t, r in dump.items() if t != "maintenance_run"}
        done = await _run(rt, "prune", later)
        assert done["deleted"] == expected
        assert set(dry["ids"]["memory"]) <= faded and len(dry["ids"]["memory"]) == len(faded)
        left = await rt.store.dump()
        assert {str(r["id"].id) for r in left["memory"]} == set(memories) - faded
        assert {str(r["id"].id) for r in left["code_chunk"]} == {
            str(r["id"].id) for r in dump["code_chunk"]
        } - expired
    finally:
        await rt.close()


async def _search_code(rt: Runtime, text: str) -> list[dict]:
    assert rt.redis is not None
    return await queued_search(rt.redis, text, 3)


async def _models(rt: Runtime) -> dict[str, dict[str | None, int]]:
    """Rows per embedding model, per vector table; None: rows that hold no vector."""
    from collections import Counter

    from memoryd.store import VECTOR_TABLES

    assert rt.store is not None
    dump = await rt.store.dump()
    return {
        table: dict(
            Counter(row.get("embedding_model") if row.get("embedding") else None for row in rows)
        )
        for table, rows in dump.items()
        if table in VECTOR_TABLES
    }


@pytest.mark.e2e
async def test_a_model_of_another_dimension_is_reembedded_into_the_vector_index(
    data_dir: Path, arq_indexed: Path, tmp_path: Path, embedder: Embedder
) -> None:
    from memoryd.config import DEFAULT_MODEL
    from memoryd.embedding import TRUNCATED_DIM, TRUNCATED_MODEL
    from tests.conftest import copy_data_dir, settings_for

    query = "parse a redis connection DSN url"
    copy_data_dir(arq_indexed, data_dir)  # arq's tree indexed, with its vectors
    first = Runtime(settings_for(data_dir), embedder)
    try:
        await first.start_queue(exclusive=True)
        await first.serve(scheduled=False)
        assert first.redis is not None and first.store is not None
        await _ingest(first, tmp_path / "session.jsonl")
        assert first.search is not None
        assert (first.search.index.model, first.search.index.dim) == (DEFAULT_MODEL, 384)
        before = await _models(first)
        assert (await _search_code(first, query))[0]["name"] == "RedisSettings.from_dsn"
    finally:
        await first.close()
    embedded = {table: counts[DEFAULT_MODEL] for table, counts in before.items()}
    assert set(before["code_chunk"]) == {DEFAULT_MODEL} and embedded["goal"] == 1

    second = Runtime(settings_for(data_dir, model=TRUNCATED_MODEL, maintenance_batch=10))
    try:
        await second.start_queue(exclusive=True)
        await second.serve(scheduled=False)
        assert second.redis is not None and second.store is not None
        # At start every row that had a vector waits for the new model; the k-NN compares no
        # vector of the old one with the new model's.
        assert await second.store.count_stale_vectors(TRUNCATED_MODEL) == embedded
        # Meanwhile BM25 still finds the code, and every chunk is found by meaning too: the
        # start rebuilt the indexes, giving each its first-pass vector (or, once reembed
        # reached it, the new model's).
        hits = await _search_code(second, "from_dsn")
        assert any(h["name"] == "RedisSettings.from_dsn" for h in hits)
        assert second.search is not None
        chunks = [str(r["id"].id) for r in (await second.store.dump())["code_chunk"]]
        held = second.search.index.vector_of("code_chunk", chunks)
        assert set(held) == set(chunks) and set(held.values()) <= {"first", "full"}
        runs = 0
        while True:
            job = await second.redis.enqueue_job("reembed", _queue_name=jobs.JOBS_QUEUE)
            assert job is not None
            result = await queue.wait_for(job, 600)
            runs += 1
            if not sum(result["remaining"].values()):
                break
        assert runs > 1  # batches of 10: the migration took several runs
        after = await _models(second)
        for table, n in embedded.items():
            assert after[table].get(TRUNCATED_MODEL) == n, table
            assert DEFAULT_MODEL not in after[table], table
        dump = await second.store.dump()
        # Stored as half floats: two bytes a dimension.
        assert {len(r["embedding"]) for t in embedded for r in dump[t] if r.get("embedding")} == {
            2 * TRUNCATED_DIM
        }
        assert second.search is not None
        assert (second.search.index.model, second.search.index.dim) == (
            TRUNCATED_MODEL,
            TRUNCATED_DIM,
        )
        assert (await _search_code(second, query))[0]["name"] == "RedisSettings.from_dsn"
        held = second.search.index.vector_of("code_chunk", chunks)
        assert held == dict.fromkeys(chunks, "full")
    finally:
        await second.close()


async def test_a_memory_search_counts_as_a_read_of_what_it_returns(
    stack: Runtime, tmp_path: Path
) -> None:
    """Recorded after the answer (a write no answer waits for), but recorded."""
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(SMALL.read_bytes())
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(transcript)])
    await queue.wait_for(job, 300)
    query = "what did the user ask for"
    hits = await queued_search(stack.redis, query, 3, "memory")
    assert len(hits) == 3
    await stack.store.settled()  # the bookkeeping write runs after the answer
    read = {k: row for k, row in (await _memories(stack)).items() if row["access_count"]}
    assert set(read) == {hit["id"] for hit in hits}
    assert all(row["access_count"] == 1 and row["last_accessed"] for row in read.values())

    # Searches answered at once bump the same memories at once: every read counts (the engine
    # refuses all but one of such writes at once; before they took turns, reads were lost).
    keys = sorted(read)
    for _ in range(30):
        stack.store.later(stack.store.bump_access("memory", keys, datetime.now(UTC)), "reads")
    await stack.store.settled()
    counts = {k: row["access_count"] for k, row in (await _memories(stack)).items() if k in read}
    assert counts == dict.fromkeys(keys, 31)


async def test_a_scheduled_run_cut_short_by_a_stop_runs_again_in_full(
    scheduled_stack: Runtime,
) -> None:
    """A stop or a Redis restart cancels a scheduled run under way; arq leaves it queued with
    the try it started counted ("cancelled, will be run again"). Its next run must do the
    work, where it failed with "max retries 1 exceeded" and nothing done."""
    assert scheduled_stack.redis is not None
    job_id = "cron:decay:1700000000000"
    # The state a cut-short run leaves: the job queued, one try counted.
    await scheduled_stack.redis.set(f"arq:retry:{job_id}", 1)
    job = await scheduled_stack.redis.enqueue_job(
        "cron:decay", _job_id=job_id, _queue_name=jobs.JOBS_QUEUE
    )
    assert job is not None
    for _ in range(300):
        if (info := await job.result_info()) is not None:
            break
        await asyncio.sleep(0.1)
    assert info is not None, "the scheduled run did not run again within 30 s"
    assert (info.success, info.job_try) == (True, 2), info.result
    assert info.result["memories"] == 0
