"""The search indexes kept in step with the records, through the real stack (private Redis,
embedded SurrealDB, the real model): a rebuild from the database changes no result, a crash
between the record write and the index write heals at the next start, `as_of` sees what was
valid then, prune takes rows out of both, and the filters hold."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import blake3
import pytest

from memoryd import client, jobs, projects, queue
from memoryd.daemon.runtime import Runtime
from memoryd.ids import file_entity_id, file_key
from memoryd.results import SearchRequest
from memoryd.searchindex import Filters, indexsync, micros
from memoryd.searchindex.indexsync import IndexSync
from memoryd.store import QueryFailed
from memoryd.store.code import FileIndexWrite
from tests.conftest import git_init, settings_for
from workers.indexing import plan_file

# Each test here runs a whole scenario through a daemon or the full stack: not the quick loop.
pytestmark = pytest.mark.e2e

# (query, search options): code with and without filters, a file named, memories and goals.
CRON_QUERY = "when does the cron job run next"
QUERIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("run a job again after it failed", {}),
    (CRON_QUERY, {"path": "cron.py"}),
    ("redis connection pool settings", {"language": "python"}),
    ("fix the type of the result in jobs.py", {}),
    ("serialize the job arguments", {"path": "**/*.py"}),
    ("No PR found for the current branch", {"kind": "memory"}),
    ("make the project installable as a library", {"kind": "goal"}),
)
NEW_CRON = '''"""Cron, rewritten."""


def lunar_phase_schedule(moon):
    """Run the job at every full moon."""
    return moon.next_full()
'''


SESSION = "5e55a0c1-0000-4000-8000-00000000beef"


def _transcript(path: Path) -> Path:
    """A short Claude Code session, in the agent's own record format: a prompt (the goal),
    an answer, a Bash call and its failure."""
    common = {"sessionId": SESSION, "cwd": "/src/shop", "version": "2.1.17", "gitBranch": ""}
    records = [
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": "make the project installable as a library with uv",
            },
        },
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I will open a pull request for the packaging change."}
                ],
            },
        },
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "gh pr view"},
                    }
                ],
            },
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "is_error": True,
                        "content": "no pull requests found for branch main: No PR found for the "
                        "current branch",
                    }
                ],
            },
        },
    ]
    lines, parent = [], None
    for n, record in enumerate(records):
        uuid = f"00000000-0000-4000-8000-{n:012d}"
        stamp = f"2026-01-23T17:13:{10 + n}.000Z"
        lines.append(
            json.dumps({**common, **record, "uuid": uuid, "parentUuid": parent, "timestamp": stamp})
        )
        parent = uuid
    path.write_text("\n".join(lines) + "\n")
    return path


def _tree(arq_tree: Path, target: Path) -> Path:
    shutil.copytree(arq_tree, target, ignore=shutil.ignore_patterns(".git"))
    git_init(target)
    return target


async def _sync(rt: Runtime, root: Path) -> str:
    assert rt.redis is not None
    project = projects.resolve(root)
    for job, _ in await projects.sync(rt.redis, project, 500):
        report = await queue.wait_for(job, timeout=300)
        await queue.embedded_later(rt.redis, report, timeout=300)  # the vectors follow
    return project.id


async def _results(memoryd: client.Client, **extra: Any) -> dict[str, list[dict[str, Any]]]:
    found = {}
    for query, options in QUERIES:
        kind = options.get("kind", "code")
        where = {k: v for k, v in options.items() if k != "kind"}
        answer = await memoryd.search(SearchRequest(query, (kind,), limit=8, **where, **extra))
        found[f"{query} {options}"] = [hit.as_dict() for hit in answer.hits]
    return found


async def test_a_rebuild_gives_the_same_results_and_as_of_sees_the_past(
    stack: Runtime, arq_tree: Path, tmp_path: Path
) -> None:
    assert stack.redis is not None and stack.store is not None and stack.search is not None
    memoryd = client.Client(stack.redis, stack.settings)
    root = _tree(arq_tree, tmp_path / "arq")
    project_id = await _sync(stack, root)
    [ingested] = await memoryd.ingest([str(_transcript(tmp_path / f"{SESSION}.jsonl"))])
    assert (ingested["memories"], ingested["goals"]) >= (3, 1), ingested
    before = await _results(memoryd)
    assert all(before.values()), [q for q, hits in before.items() if not hits]
    # The filters hold; a file named in the query comes first.
    assert {h["path"] for h in before["when does the cron job run next {'path': 'cron.py'}"]} == {
        "cron.py"
    }
    assert before["fix the type of the result in jobs.py {}"][0]["path"] == "jobs.py"
    top = before["No PR found for the current branch {'kind': 'memory'}"][0]
    assert "No PR found" in top["text"] and top["session"] == SESSION

    counts = await stack.store.counts()
    rebuilt = await memoryd.reindex()
    assert rebuilt["rows"] == {t: counts[t] for t in ("code_chunk", "memory", "goal")}
    assert rebuilt["generation"] == await stack.store.search_generation()
    assert await _results(memoryd) == before

    # cron.py rewritten: its old chunks are retired, kept for as_of.
    old = [h["id"] for h in before["when does the cron job run next {'path': 'cron.py'}"]]
    then = datetime.now(UTC)
    (root / "cron.py").write_text(NEW_CRON)
    await _sync(stack, root)
    now = (
        await memoryd.search(SearchRequest("cron schedule next run", path="cron.py", limit=20))
    ).hits
    valid = await stack.store.valid_chunks(project_id, "cron.py")
    assert {(h.start_line, h.end_line) for h in now} == {
        (c["start_line"], c["end_line"]) for c in valid
    }
    assert not {h.id for h in now} & set(old)
    past = (await memoryd.search(SearchRequest(CRON_QUERY, path="cron.py", as_of=then))).hits
    assert {h.id for h in past} >= set(old[:3])
    assert "lunar_phase_schedule" not in {h.name for h in past}
    with_history = await _results(memoryd, as_of=then) | await _results(memoryd)
    await memoryd.reindex()
    assert await _results(memoryd, as_of=then) | await _results(memoryd) == with_history

    # A prune far in the future deletes the retired chunks: gone from both stores.
    job = await queue.enqueue(stack.redis, jobs.PRUNE, at="2100-01-01T00:00:00+00:00")
    assert job is not None
    pruned = await queue.wait_for(job, timeout=300)
    assert pruned["deleted"]["code_chunk"] >= len(old)
    assert (await memoryd.search(SearchRequest(CRON_QUERY, path="cron.py", as_of=then))).hits == ()
    counts = await stack.store.counts()
    assert len(stack.search.index) == counts["code_chunk"] + counts["memory"] + counts["goal"]


async def test_a_crash_between_the_record_write_and_the_index_write_heals_at_start(
    data_dir: Path, arq_tree: Path, tmp_path: Path
) -> None:
    root = _tree(arq_tree, tmp_path / "arq")
    text = 'def quasar_flux_capacitor():\n    """Charge the quasar flux."""\n    return 88\n'
    rt = Runtime(settings_for(data_dir))
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve()
        assert rt.store is not None and rt.search is not None and rt.redis is not None
        project_id = await _sync(rt, root)
        plan = plan_file(
            project_id, "flux.py", text, blake3.blake3(text.encode()).hexdigest(), 1500
        )
        # As the indexer writes them: with their vectors (without, a k-NN neighbour ties
        # with the chunk in the fusion).
        assert rt.embedder is not None
        vectors = rt.embedder.embed([c["content"] for c in plan.chunks])
        for chunk, vector in zip(plan.chunks, vectors, strict=True):
            chunk.update(embedding=list(vector), embedding_model=rt.embedder.model)
        file = {
            "entity_id": file_entity_id(project_id, "flux.py"),
            "key": file_key(project_id, "flux.py"),
            "path": "flux.py",
        }
        # The record write commits; the process dies before the index write.
        written = await rt.store.write_file_index(
            project_id, plan.chunks, [], [file], ["flux.py"], plan.symbols
        )
        assert rt.search.index.generation == written.generation - 1
        memoryd = client.Client(rt.redis, rt.settings)
        hits = (await memoryd.search(SearchRequest("quasar flux capacitor"))).hits
        assert [h.path for h in hits][:1] != ["flux.py"]
    finally:
        await rt.close()

    again = Runtime(settings_for(data_dir))
    try:
        await again.start_queue(exclusive=True)
        await again.serve()
        assert again.store is not None and again.search is not None and again.redis is not None
        assert again.search.index.generation == written.generation
        assert await again.store.search_generation() == written.generation
        memoryd = client.Client(again.redis, again.settings)
        hits = (await memoryd.search(SearchRequest("quasar flux capacitor"))).hits
        assert (hits[0].path, hits[0].name) == ("flux.py", "quasar_flux_capacitor")
    finally:
        await again.close()


def _file_write(project_id: str, rel: str, text: str) -> tuple[Any, ...]:
    """`IndexSync.write_file_index`'s arguments for one new file, as the indexer plans it."""
    plan = plan_file(project_id, rel, text, blake3.blake3(text.encode()).hexdigest(), 1500)
    file = {"entity_id": file_entity_id(project_id, rel), "key": file_key(project_id, rel)}
    return (project_id, plan.chunks, [], [file | {"path": rel}], [rel], plan.symbols)


async def test_writes_queued_together_share_one_index_commit_and_an_error_does_not_strand_it(
    stack: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert stack.store is not None and stack.search is not None
    sync, store = stack.search, stack.store
    await store.upsert_project("grouped", {"root": "/src/grouped", "name": "grouped"})
    commits: list[int | None] = []
    commit = sync.index.commit

    def counted(generation: int | None = None) -> None:
        commits.append(generation)
        commit(generation)

    monkeypatch.setattr(sync.index, "commit", counted)
    # Long enough for any machine: the group is cut by who waits, not by the clock.
    monkeypatch.setattr(indexsync, "GROUP_SECONDS", 600.0)
    names = [f"pulsar_beacon_{n}" for n in range(6)]
    writes = [
        sync.write_file_index(
            *_file_write("grouped", f"{name}.py", f"def {name}():\n    return {n}\n")
        )
        for n, name in enumerate(names)
    ]
    done = await asyncio.gather(*writes)
    generation = await store.search_generation()
    # Six writes, six generations, one commit: the last write's, stamped with the newest.
    assert sorted(d.generation for d in done) == list(range(generation - 5, generation + 1))
    assert commits == [generation]
    assert sync.index.generation == generation
    for name in names:
        hits = sync.index.bm25(name, Filters(), 1)
        assert [(h.path, h.name) for h in hits] == [(f"{name}.py", name)]

    # The write left to commit fails (the database refuses its row): it commits all the same.
    good = _file_write("grouped", "nebula_lantern.py", "def nebula_lantern():\n    return 1\n")
    bad = _file_write("grouped", "broken.py", "def broken():\n    return 2\n")
    bad[1][0]["start_line"] = "not a line number"
    outcomes = await asyncio.gather(
        sync.write_file_index(*good), sync.write_file_index(*bad), return_exceptions=True
    )
    assert isinstance(outcomes[0], FileIndexWrite) and isinstance(outcomes[1], QueryFailed)
    assert commits == [generation, generation + 1]
    assert sync.index.generation == await store.search_generation() == generation + 1
    hits = sync.index.bm25("nebula_lantern", Filters(), 1)
    assert [h.path for h in hits] == ["nebula_lantern.py"]


async def test_in_server_mode_each_workers_indexes_follow_the_others_writes(
    stack: Runtime, arq_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers' own indexes over one database (as in server mode, here over the embedded
    one): what one writes, the other finds once it catches up (new chunks, a rewrite that
    retires the old ones, a delete); a write recorded nowhere (its worker died between its two
    writes) makes a copy rebuild once it stops waiting; a copy reopened catches up from the
    recorded changes."""
    assert stack.store is not None and stack.embedder is not None
    store, model = stack.store, stack.embedder.model
    root = _tree(arq_tree, tmp_path / "arq")
    project_id = await _sync(stack, root)
    one = await IndexSync.open(store, tmp_path / "one", model, follow=True)
    two = await IndexSync.open(store, tmp_path / "two", model, follow=True)

    async def write(sync: IndexSync, path: str, text: str) -> FileIndexWrite:
        plan = plan_file(project_id, path, text, blake3.blake3(text.encode()).hexdigest(), 1500)
        file = {
            "entity_id": file_entity_id(project_id, path),
            "key": file_key(project_id, path),
            "path": path,
        }
        return await sync.write_file_index(project_id, plan.chunks, [], [file], [path])

    def found(sync: IndexSync, query: str, **filters: Any) -> list[tuple[str | None, str | None]]:
        return [(h.path, h.name) for h in sync.index.bm25(query, Filters(**filters), 10)]

    flux = 'def quasar_flux_capacitor():\n    """Charge the quasar flux."""\n    return 88\n'
    written = await write(one, "flux.py", flux)
    assert found(two, "quasar flux capacitor") == []
    await two.catch_up()
    assert found(two, "quasar flux capacitor")[0] == ("flux.py", "quasar_flux_capacitor")
    assert two.index.generation == one.index.generation == written.generation

    # The other way: a rewrite retires the old chunk (kept for as_of), then a delete.
    then = max(written.valid_from.values())
    await write(two, "flux.py", flux.replace("quasar", "pulsar"))
    await one.catch_up()
    for sync in (one, two):
        assert ("flux.py", "quasar_flux_capacitor") not in found(sync, "quasar flux")
        assert found(sync, "pulsar flux capacitor")[0] == ("flux.py", "pulsar_flux_capacitor")
        past = found(sync, "quasar flux", as_of=micros(then))
        assert past[0] == ("flux.py", "quasar_flux_capacitor")
    pulsar = [h.id for h in two.index.bm25("pulsar flux", Filters(path="flux.py"), 10)]
    await one.delete_rows("code_chunk", pulsar)
    await two.catch_up()
    assert ("flux.py", "pulsar_flux_capacitor") not in found(two, "pulsar flux capacitor")
    assert len(two.index) == len(one.index)

    # A write recorded nowhere: `two` waits for it, then rebuilds.
    plan = plan_file(project_id, "nova.py", "def nova_burst():\n    return 1\n", "h", 1500)
    await store.write_file_index(project_id, plan.chunks, [], [], ["nova.py"])
    await two.catch_up()
    assert ("nova.py", "nova_burst") not in found(two, "nova burst")
    assert two.index.generation == written.generation + 2
    monkeypatch.setattr(indexsync, "MISSING_SECONDS", 0.0)
    await two.catch_up()
    assert found(two, "nova burst")[0] == ("nova.py", "nova_burst")
    assert two.index.generation == await store.search_generation()

    # Closed, written past, reopened: it catches up from what was recorded, no rebuild.
    await two.close()
    await write(one, "comet.py", "def comet_tail_length():\n    return 3\n")
    rebuilds = 0

    async def counted() -> dict[str, int]:
        nonlocal rebuilds
        rebuilds += 1
        return {}

    monkeypatch.setattr(IndexSync, "_rebuild", lambda self: counted())
    again = await IndexSync.open(store, tmp_path / "two", model, follow=True)
    assert rebuilds == 0
    assert found(again, "comet tail length")[0] == ("comet.py", "comet_tail_length")
    assert again.index.generation == await store.search_generation()
    for sync in (one, again):
        await sync.close()
