"""The first pass (memoryd/static_embedding.py) on a real tree, with the real model: every chunk
is searchable by meaning as soon as its words are indexed, and the full model's vector replaces
its first-pass one later, with no moment where the row has neither.

The full model's phase is held as in test_index_phases (its one batch thread kept busy), never
by timing."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memoryd import jobs, queue, static_embedding
from memoryd.config import DEFAULT_MODEL
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.results import SearchRequest
from memoryd.scan import read_source, walk
from memoryd.searchindex import Doc, Filters, SearchIndex
from memoryd.searchindex.index import FIRST_PARTS, PARTS
from memoryd.searchindex.index import STAMP as INDEX_STAMP
from memoryd.searchindex.indexsync import SEARCH_DIR
from tests.conftest import settings_for
from tests.test_index_phases import (
    EVERY_KIND,
    first_phase,
    model_held,
    stopped_between_the_phases,
    stored_chunks,
)
from workers.stages.file_plan import plan_file

pytestmark = pytest.mark.e2e

# A word no file of arq holds (BM25 finds nothing), whose meaning is arq's cron module (its
# top 3 hits by first-pass vectors include a chunk of cron.py).
MEANING_ONLY = "crontab"


def chunk_ids(rows: list[dict[str, object]]) -> list[str]:
    return [str(row["id"].id) for row in rows]  # type: ignore[attr-defined]


async def test_a_chunk_is_found_by_meaning_before_the_full_model_reaches_it(
    stack: Runtime, arq_tree: Path
) -> None:
    rt = stack
    assert rt.redis is not None and rt.embedder is not None and rt.search is not None
    index = rt.search.index
    with model_held(rt.embedder):
        reports = await first_phase(rt, arq_tree)
        rows = await stored_chunks(rt)
        ids = chunk_ids(rows)
        assert len(ids) == sum(r["chunks"] for r in reports) > 50
        # The full model reached none, and every chunk has its first-pass vector.
        assert all(row.get("embedding") is None for row in rows)
        assert index.vector_of("code_chunk", ids) == dict.fromkeys(ids, "first")
        assert sum(index.vectors_held()[name] for name in PARTS) == 0
        # Words find nothing; meaning finds arq's cron module, through the daemon's search.
        assert index.bm25(MEANING_ONLY, Filters(kinds=EVERY_KIND), 10) == []
        found = await queue.call(rt.redis, jobs.SEARCH, SearchRequest(MEANING_ONLY, limit=3).wire())
        assert "cron.py" in {hit["path"] for hit in found["hits"]}

    for report in reports:
        await queue.embedded_later(rt.redis, report, timeout=600)
    # Every row switched to the full model's vector; no first-pass vector is left.
    assert index.vector_of("code_chunk", ids) == dict.fromkeys(ids, "full")
    assert sum(index.vectors_held()[name] for name in FIRST_PARTS) == 0
    assert all(row["embedding"] is not None for row in await stored_chunks(rt))


def test_a_row_switches_to_its_full_vector_without_being_unsearchable(
    tmp_path: Path, embedder: Embedder, arq_tree: Path
) -> None:
    """A reader that asks, over and over while the full vectors arrive one row at a time,
    which vector each row has never finds a row with none."""
    docs = []
    for rel in walk(arq_tree):
        if not rel.endswith(".py"):
            continue
        content = read_source((arq_tree / rel).read_bytes())
        assert content.text is not None
        for chunk in plan_file("p", rel, content.text, content.hash, 2000).chunks:
            docs.append(Doc("code_chunk", chunk["id"], "code", chunk["content"], "p", rel))
    index = SearchIndex(tmp_path / "search", first_pass=static_embedding.load())
    index.upsert(docs)
    index.commit(1)
    ids = [doc.id for doc in docs]
    assert index.vector_of("code_chunk", ids) == dict.fromkeys(ids, "first")
    switched = docs[:40]
    vectors = embedder.embed([doc.content for doc in switched])

    stop = threading.Event()

    def watch() -> tuple[int, set[str]]:
        rounds, missing = 0, set()
        while not stop.is_set() or rounds == 0:
            missing |= set(ids) - set(index.vector_of("code_chunk", ids))
            rounds += 1
        return rounds, missing

    with ThreadPoolExecutor(1) as pool:
        watcher = pool.submit(watch)
        for generation, (doc, vector) in enumerate(zip(switched, vectors, strict=True), 2):
            index.set_vectors("code_chunk", {doc.id: vector}, DEFAULT_MODEL)
            index.commit(generation)
        stop.set()
        rounds, missing = watcher.result()
    assert rounds >= 1 and missing == set()
    held = index.vector_of("code_chunk", ids)
    assert {i for i, which in held.items() if which == "full"} == {d.id for d in switched}
    assert len(held) == len(ids)
    # Each kind of query vector meets its own rows: the full model's k-NN finds the switched
    # rows only, nearest first the row whose text the query is.
    found = index.knn(vectors[0], DEFAULT_MODEL, Filters(kinds=("code",)), len(ids))
    assert {hit.id for hit in found} == {d.id for d in switched}
    assert found[0].id == switched[0].id
    index.close()
    # Reopened from its files: the same vectors held.
    again = SearchIndex(tmp_path / "search", first_pass=static_embedding.load())
    assert again.vector_of("code_chunk", ids) == held
    again.close()


async def test_a_kill_between_the_passes_heals_at_the_next_start(
    data_dir: Path, embedder: Embedder, arq_tree: Path
) -> None:
    """The first pass written, the full model's jobs lost, and the index's stamp lost too (a
    kill between the database's write and the index's commit leaves the stamp behind the
    database): the next start rebuilds every chunk's first-pass vector from the records, and
    the full model then reaches every chunk."""
    ids = chunk_ids(await stopped_between_the_phases(data_dir, embedder, arq_tree))
    assert len(ids) > 50
    (data_dir / SEARCH_DIR / INDEX_STAMP).unlink()

    second = Runtime(settings_for(data_dir), embedder)
    try:
        await second.start_queue(exclusive=True)
        with model_held(embedder):
            await second.serve()  # rebuilds the indexes, queues the rows owed a vector
            assert second.search is not None and second.store is not None
            index = second.search.index
            assert index.vector_of("code_chunk", ids) == dict.fromkeys(ids, "first")
            assert second.redis is not None
            found = await queue.call(
                second.redis, jobs.SEARCH, SearchRequest(MEANING_ONLY, limit=3).wire()
            )
            assert "cron.py" in {hit["path"] for hit in found["hits"]}
        full = dict.fromkeys(ids, "full")
        for _ in range(6000):  # the full model on a loaded machine: minutes
            if index.vector_of("code_chunk", ids) == full:
                break
            await asyncio.sleep(0.1)
        assert index.vector_of("code_chunk", ids) == full
        assert sum(index.vectors_held()[name] for name in FIRST_PARTS) == 0
        counts = await second.store.vectors_by_project(embedder.model)
        assert [(c["done"], c["owed"]) for c in counts.values()] == [(len(ids), 0)]
    finally:
        await second.close()
