"""Indexing in two phases on a real tree (private Redis, embedded SurrealDB, the real model):
chunks are written and found by words first, their vectors follow from a job of their own, and
rows a stop left without vectors get them at the next start.

The model's one batch thread (`Embedder._batches`, which runs every batch) is kept busy by the
test to keep the second phase waiting while the first is looked at: nothing is replaced, only
delayed."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from arq.jobs import Job

from memoryd import jobs, projects, queue
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.jobs import JOBS_QUEUE
from memoryd.searchindex.lexical import Filters
from tests.conftest import queued_search, settings_for

pytestmark = pytest.mark.e2e

EVERY_KIND = ("code", "docs")


@contextmanager
def model_held(embedder: Embedder) -> Iterator[None]:
    """No batch reaches the model until the block ends (queries have their own session): its
    one batch thread waits here first."""
    release = threading.Event()
    embedder._batches.submit(release.wait)
    try:
        yield
    finally:
        release.set()


async def first_phase(rt: Runtime, root: Path) -> list[dict[str, Any]]:
    """Sync the tree and wait for its index jobs (not for the embedding they queue)."""
    assert rt.redis is not None
    project = projects.resolve(root)
    synced = await projects.sync(rt.redis, project, rt.settings.index_batch_files)
    return [await queue.wait_for(job, timeout=300) for job, _ in synced]


def all_vectors(rt: Runtime, project: str, vector: list[float]) -> list[Any]:
    assert rt.search is not None and rt.embedder is not None
    filters = Filters(kinds=EVERY_KIND, project=project)
    return rt.search.index.knn(vector, rt.embedder.model, filters, 100_000)


async def stored_chunks(rt: Runtime) -> list[dict[str, Any]]:
    assert rt.store is not None
    return (await rt.store.dump())["code_chunk"]


async def test_found_by_words_before_the_vectors_and_by_meaning_after(
    stack: Runtime, arq_tree: Path
) -> None:
    rt = stack
    assert rt.redis is not None and rt.store is not None and rt.embedder is not None
    pid, model = projects.resolve(arq_tree).id, rt.embedder.model
    query_vector = rt.embedder.embed_query("parse a redis connection DSN url")
    with model_held(rt.embedder):
        reports = await first_phase(rt, arq_tree)
        chunks = sum(r["chunks"] for r in reports)
        # A fresh database has no vector to reuse: every chunk waits for one.
        assert chunks > 50 and sum(r["owed"] for r in reports) == chunks
        assert sum(r["embedded"] for r in reports) == 0
        rows = await stored_chunks(rt)
        assert len(rows) == chunks
        assert {(r.get("embedding"), r["embedding_model"]) for r in rows} == {(None, model)}
        [progress] = await queue.call(rt.redis, jobs.INDEX_PROGRESS)
        assert progress["index"]["state"] == "ready"
        assert progress["index"]["chunks"] == chunks and progress["vectors_owed"] == chunks
        # Found by words (a symbol's name, then plain words), through the daemon's search...
        hits = await queued_search(rt.redis, "from_dsn", 3)
        assert (hits[0]["path"], hits[0]["name"]) == ("connections.py", "RedisSettings.from_dsn")
        hits = await queued_search(rt.redis, "redis version memory", 5)
        assert "log_redis_info" in {h["name"] for h in hits}
        # ...while the vector index holds none of them yet.
        assert all_vectors(rt, pid, query_vector) == []
        # Rows deleted before their vectors come (a prune, a forget) stay deleted.
        assert rt.search is not None
        gone = sorted(str(r["id"].id) for r in rows if r["path"] == "version.py")
        texts = {r["content_hash"] for r in rows}
        assert gone
        await rt.search.delete_rows("code_chunk", gone)

    embedded = [await queue.embedded_later(rt.redis, r, timeout=300) for r in reports]
    rows = await stored_chunks(rt)
    assert len(rows) == chunks - len(gone)
    assert not {str(r["id"].id) for r in rows} & set(gone)
    chunks -= len(gone)
    # Each distinct text embedded once (the deleted rows' too when the embed job had read them
    # before they went); every chunk left has its vector, in both stores.
    assert len({r["content_hash"] for r in rows}) <= sum(embedded) <= len(texts)
    assert all(r["embedding"] is not None and r["embedding_model"] == model for r in rows)
    assert len(all_vectors(rt, pid, query_vector)) == chunks
    [progress] = await queue.call(rt.redis, jobs.INDEX_PROGRESS)
    assert progress["vectors_owed"] == 0
    # Hybrid search ranks by meaning too now: the nearest rows by vector are the fused ones'.
    near = [h.id for h in all_vectors(rt, pid, query_vector)[:3]]
    hits = await queued_search(rt.redis, "parse a redis connection DSN url", 10)
    assert near[0] in {h["id"] for h in hits}
    assert any(
        h["path"] == "connections.py" and h["name"] == "RedisSettings.from_dsn" for h in hits[:3]
    )


async def stopped_between_the_phases(
    data_dir: Path, embedder: Embedder, root: Path
) -> list[dict[str, Any]]:
    """A runtime that wrote the tree's chunks and stopped before the second phase was queued
    (a kill right after the write): its jobs are taken off the queue, as if never enqueued.
    Returns the chunks stored."""
    first = Runtime(settings_for(data_dir), embedder)
    closed = False
    try:
        await first.start_queue(exclusive=True)
        await first.serve()
        assert first.redis is not None
        with model_held(embedder):
            reports = await first_phase(first, root)
            embed_jobs = [r["embed_job"] for r in reports if r["embed_job"]]
            assert embed_jobs and len(embed_jobs) == len(reports)
            assert await first.redis.zrem(JOBS_QUEUE, *embed_jobs) == len(embed_jobs)
            rows = await stored_chunks(first)
            await first.close()
            closed = True
    finally:
        if not closed:
            await first.close()
    assert len(rows) == sum(r["chunks"] for r in reports)
    return rows


async def test_a_stop_between_the_phases_heals_at_the_next_start(
    data_dir: Path, embedder: Embedder, arq_tree: Path
) -> None:
    pid, model = projects.resolve(arq_tree).id, embedder.model
    chunks = len(await stopped_between_the_phases(data_dir, embedder, arq_tree))
    assert chunks > 50

    second = Runtime(settings_for(data_dir), embedder)
    try:
        await second.start_queue(exclusive=True)
        assert second.redis is not None and await queue.queue_depth(second.redis) == 0
        await second.serve()  # sees no live worker: queues the rows left without vectors
        assert second.store is not None
        for _ in range(3000):
            # The catch-up job's end, not only the database's rows: it writes the search
            # index after them (the index was read empty between the two under load).
            counted = await second.store.vectors_by_project(model)
            owed = any(n["owed"] for n in counted.values())
            if not owed and await queue.queue_depth(second.redis) == 0:
                break
            await asyncio.sleep(0.1)
        rows = await stored_chunks(second)
        assert len(rows) == chunks
        assert all(r["embedding"] is not None and r["embedding_model"] == model for r in rows)
        vector = embedder.embed_query("parse a redis connection DSN url")
        assert len(all_vectors(second, pid, vector)) == chunks
    finally:
        await second.close()


async def test_each_text_is_embedded_once_when_embedding_jobs_and_reembed_overlap(
    stack: Runtime, arq_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold index's embedding jobs, the catch-up a start queues for every owed chunk and the
    scheduled reembed all name the same chunks while the model is busy: each distinct text
    reaches the model once (counted at the model), and every chunk gets its vector."""
    rt = stack
    assert rt.redis is not None and rt.embedder is not None
    embedder = rt.embedder
    given: list[str] = []
    real_embed = embedder.embed

    def counting(texts: Any, *args: Any, **kwargs: Any) -> Any:
        given.extend(texts)
        return real_embed(texts, *args, **kwargs)

    monkeypatch.setattr(embedder, "embed", counting)
    with model_held(embedder):
        reports = await first_phase(rt, arq_tree)
        # The same chunks, named again: the catch-up of a start, twice, and a reembed run.
        catch_up = [await queue.enqueue_embed(rt.redis) for _ in range(2)]
        reembed = await queue.enqueue(rt.redis, jobs.REEMBED)
        assert reembed is not None
    for report in reports:
        await queue.embedded_later(rt.redis, report, timeout=300)
    for job_id in catch_up:
        await queue.wait_for(Job(job_id, rt.redis, _queue_name=JOBS_QUEUE), 300)
    reembedded = await queue.wait_for(reembed, 300)
    assert reembedded["reembedded"]["code_chunk"] == 0
    rows = await stored_chunks(rt)
    assert all(r["embedding"] is not None for r in rows)
    distinct = {r["content"] for r in rows}
    assert len(given) == len(set(given)) == len(distinct)


async def test_status_says_what_a_first_index_waits_for(
    data_dir: Path,
    embedder: Embedder,
    arq_tree: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new user's first index, between its two phases: `status` said `ready`, "re-embedding
    N rows wait for the configured model" (it is the first embedding), and `repos -` while the
    daemon watched the `--repo` it was given (the asking process's config has none). Per
    project it says the vectors done, the pass the rest wait for, and the time left at the
    model's rate of late; once embedded, every valid chunk's vector is done."""
    from memoryd import embedding
    from memoryd.cli.text import print_status
    from memoryd.client import Client

    # The model's rate, measured on texts of its own (no batch runs while the model is held,
    # however long the first phase takes on a loaded machine: the window is made to hold them).
    monkeypatch.setattr(embedding, "RATE_SECONDS", 3600.0)
    embedder._done.clear()
    assert embedder.batch_size == 1
    embedder.embed([f"def step_{n}(job): return job.run({n})" for n in range(10)])
    rate = embedder.rate()
    assert rate is not None
    rt = Runtime(settings_for(data_dir, extra_repos=[arq_tree]), embedder)
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        assert rt.redis is not None
        asking = Client(rt.redis, settings_for(data_dir))
        with model_held(embedder):
            reports = await first_phase(rt, arq_tree)
            chunks = sum(r["chunks"] for r in reports)
            info = await asking.status()
            assert info["waiting_for_first_vector"]["code_chunk"] == chunks
            assert info["waiting_for_reembed"]["code_chunk"] == 0  # their embed_chunks job's
            assert info["remembered"]["repos"] == [str(arq_tree)]
            [waiting] = info["projects"]
            assert (waiting["vectors_done"], waiting["vectors_owed"]) == (0, chunks)
            assert waiting["vector_pass"] == "full"
            assert waiting["vectors_seconds_left"] == round(chunks / rate)
            print_status(info)
        lines = capsys.readouterr().out.splitlines()
        assert f"repos         {arq_tree}" in lines
        assert f"vectors       {chunks} rows wait for their first vector" in lines
        assert "re-embedding  0 rows wait for the configured model" in lines
        [project] = [line for line in lines if line.startswith("project ")]
        waiting_line = (
            rf"  embedding (\d+)/\1 files, {chunks} chunks \(0 vectors done, {chunks} waiting "
            r"for the full pass, about \d+ ?(s|min|h) left"
        )
        assert re.search(waiting_line, project), project
        for report in reports:
            await queue.embedded_later(rt.redis, report, timeout=300)
        [done] = await queue.call(rt.redis, jobs.INDEX_PROGRESS)
        assert (done["vectors_done"], done["vectors_owed"]) == (chunks, 0)
        assert (done["vector_pass"], done["vectors_seconds_left"]) == (None, None)
    finally:
        await rt.close()


async def test_a_long_embedding_says_what_it_does(
    data_dir: Path,
    embedder: Embedder,
    arq_tree: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six and a half minutes passed with no log line between "initial index … done" and the
    end of the first embedding job (the model runs at low priority; the machine was busy)."""
    import logging

    from workers import vectors

    caplog.set_level(logging.INFO, logger="workers.vectors")
    monkeypatch.setattr(vectors, "EMBED_PROGRESS_SECONDS", 0.0)  # a line before every part
    rt = Runtime(settings_for(data_dir, index_write_chunks=40), embedder)
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        assert rt.redis is not None
        reports = await first_phase(rt, arq_tree)
        for report in reports:
            await queue.embedded_later(rt.redis, report, 300)
    finally:
        await rt.close()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embed_chunks")]
    long = [r["owed"] for r in reports if r["owed"] > 40]
    assert long  # embedded in more than one part
    for owed in long:
        assert (
            f"embed_chunks: {owed} chunks to give vectors, 40 at a time (at low priority: other "
            "work on this machine goes first)"
        ) in said
        for done in range(40, owed, 40):
            assert any(
                line.startswith(f"embed_chunks: {done} of {owed} chunks given vectors so far (")
                for line in said
            ), (done, owed, said)
