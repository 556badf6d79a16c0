"""`memoryd forget --project | --path | --before`: two indexed repos and two real transcripts
(one recorded in the first repo), each scope forgotten on its own; what went is what the scope
names, counted exactly against the graph as it was, and everything else is still there."""

from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd import projects, queue
from memoryd.client import Client
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.results import SearchRequest
from tests.conftest import MEMORYD, _serving, copy_data_dir, git_init, orphaned_by
from tests.fixtures import S37, SMALL

# Each test here runs a whole scenario through the full stack: not the quick loop.
pytestmark = pytest.mark.e2e

RECORDED_IN = b"/Users/dain/workspace/claude-code-log"
RENDERER = "claude_code_log/renderer.py"
Dump = dict[str, list[dict[str, Any]]]


def key(row: dict[str, Any], field: str = "id") -> str:
    """A row's reference (`table:key`) in `field`, or None."""
    value = row.get(field)
    return None if value is None else f"{value.table_name}:{value.id}"  # type: ignore[return-value]


async def _world(stack: Runtime, tmp_path: Path) -> tuple[Client, Path, Path]:
    """claude-code-log (renderer.py and cli.py) and beta (one file), indexed; S37 as if it had
    been recorded in claude-code-log, SMALL in a folder no repo holds."""
    assert stack.redis is not None and stack.store is not None
    repo, beta = tmp_path / "claude-code-log", tmp_path / "beta"
    (repo / "claude_code_log").mkdir(parents=True)
    (repo / RENDERER).write_text(
        "def generate_html(messages):\n    return '<html>' + ''.join(messages) + '</html>'\n"
    )
    (repo / "claude_code_log" / "cli.py").write_text("def main():\n    return 0\n")
    beta.mkdir()
    (beta / "beta.py").write_text("def beta_function():\n    return 2\n")
    for root in (repo, beta):
        git_init(root)
        for job, _ in await projects.sync(stack.redis, projects.resolve(root), 32):
            await queue.wait_for(job, 300)
    transcript = tmp_path / S37.name
    transcript.write_bytes(S37.read_bytes().replace(RECORDED_IN, str(repo).encode()))
    client = Client(stack.redis, stack.settings)
    reports = await client.ingest([str(transcript), str(SMALL)])
    assert [r["memories"] for r in reports] == [282, 22]
    # The sync and ingest jobs waited on above leave follow-up jobs (the co-change job of each
    # git head, the embedding of the chunks indexed) that write later: a test that dumped the
    # database before they ended compared it with rows written after. Nothing more is queued
    # or running once the queue is empty (arq removes a job from it as it finishes).
    deadline = time.monotonic() + 300
    while await queue.queue_depth(stack.redis) > 0:
        assert time.monotonic() < deadline, "the follow-up jobs never ended"
        await asyncio.sleep(0.1)
    # An ingest job ends before the edits' code anchors it left to the store are written
    # (Store.later): a dump taken before they were compared with rows that gained code_hash.
    await stack.store.settled(300)
    return client, repo, beta


@pytest.fixture(scope="module")
def world(
    embedder: Embedder, short_tmp: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """`_world` built once for the module: its folder and a data dir holding it. Each test
    forgets on a copy of the data dir (`data_dir` below), so no test sees another's forget."""
    folder, built = tmp_path_factory.mktemp("world"), Path(tempfile.mkdtemp(dir=short_tmp))

    async def build() -> None:
        async with _serving(built, embedder, scheduled=False) as rt:
            await _world(rt, folder)

    asyncio.run(build())
    return folder, built


@pytest.fixture
def data_dir(world: tuple[Path, Path], short_tmp: Path) -> Path:
    path = Path(tempfile.mkdtemp(dir=short_tmp))
    copy_data_dir(world[1], path)
    return path


def _counts(dump: Dump) -> dict[str, int]:
    return {table: len(rows) for table, rows in dump.items() if rows}


def _gone(before: Dump, after: Dump) -> dict[str, set[str]]:
    """Per table, the rows of `before` that `after` lacks."""
    gone: dict[str, set[str]] = {}
    for table, rows in before.items():
        kept = {key(r) for r in after.get(table, [])}
        missing = {key(r) for r in rows} - kept
        if missing:
            gone[table] = missing
    return gone


def _edges_of(dump: Dump, rows: set[str]) -> dict[str, set[str]]:
    """The edges (per table) with an end among `rows`: they go with them."""
    from memoryd.vocabulary import EDGES

    found: dict[str, set[str]] = {}
    for edge in EDGES:
        ends = {key(e) for e in dump.get(edge.table, []) if {key(e, "in"), key(e, "out")} & rows}
        if ends:
            found[edge.table] = ends
    return found


def _orphans(dump: Dump, doomed: set[str]) -> set[str]:
    """Entities that something doomed pointed at and that nothing else points at, and the
    blobs (long texts) that only doomed memories name."""
    named: dict[str, set[str]] = {}
    for memory in dump.get("memory", []):
        if memory.get("body") is not None:
            named.setdefault(key(memory, "body"), set()).add(key(memory))
    blobs = {blob for blob, memories in named.items() if memories <= doomed}
    pointed = {
        key(e, "out")
        for table in _edges_of(dump, doomed)
        for e in dump[table]
        if key(e, "in") in doomed and key(e, "out").startswith("entity:")
    }
    pairs = {tuple(ref.split(":", 1)) for ref in doomed}
    orphans = {ref for ref in pointed if ref.split(":", 1)[1] in orphaned_by(dump, pairs)}  # type: ignore[arg-type]
    return orphans | blobs


def _counted(expected: dict[str, set[str]]) -> dict[str, int]:
    """What a forget reports it removed: rows per table, not the blobs of their long texts
    (storage, not records)."""
    return {t: len(refs) for t, refs in expected.items() if t != "blob"}


def _by_table(refs: set[str]) -> dict[str, set[str]]:
    tables: dict[str, set[str]] = {}
    for ref in refs:
        tables.setdefault(ref.split(":", 1)[0], set()).add(ref)
    return tables


async def test_forget_project_takes_its_code_sessions_and_entities(
    stack: Runtime, world: tuple[Path, Path]
) -> None:
    assert stack.store is not None
    client, repo = Client(stack.redis, stack.settings), world[0] / "claude-code-log"
    before = await stack.store.dump()
    project = key(next(p for p in before["project"] if p["root"] == str(repo)))
    s37 = f"session:{S37.stem}"
    owned = {
        key(r)
        for table in ("code_chunk", "file_state", "entity")
        for r in before[table]
        if key(r, "project") == project
    }
    memories = {key(m) for m in before["memory"] if key(m, "session") == s37}
    goals = {key(g) for g in before["goal"] if key(g, "session") == s37}
    leaves = {m["source_id"] for m in before["memory"] if key(m) in memories}
    summaries = {key(s) for s in before["summary"] if s["leaf_uuid"] in leaves}
    doomed = {project, s37} | owned | memories | goals | summaries
    expected = _by_table(doomed | _orphans(before, doomed))

    dry = await client.forget_scope("project", "claude-code-log", dry_run=True)
    printed, said = await _cli_forget(stack, "--project", str(repo), "--dry-run")
    counts = ", ".join(f"{t} {n}" for t, n in sorted(dry["removed"].items()))
    assert (printed, said) == (f"would remove: {counts}\n", "")
    assert await stack.store.dump() == before
    done = await client.forget_scope("project", "claude-code-log")
    assert done["sessions"] == dry["sessions"] == [S37.stem]
    after = await stack.store.dump()
    assert [key(r) for r in after["forgotten_session"]] == [f"forgotten_session:{S37.stem}"]
    gone = _gone(before, after)
    rows = {t: refs for t, refs in gone.items() if t in expected}
    assert rows == expected
    assert done["removed"] == _counted(expected)
    # The dry run counts what the scope names; the orphaned entities are found as they go.
    assert dry["removed"] == {t: len(refs) for t, refs in _by_table(doomed).items()}
    assert {t: refs for t, refs in gone.items() if t not in expected} == _edges_of(before, doomed)
    # The other project and the other session are whole.
    assert _counts(after)["code_chunk"] == 1 and _counts(after)["memory"] == 22
    found = (await client.search(SearchRequest("beta_function"))).hits
    assert [h.path for h in found][:1] == ["beta.py"]
    assert {h.path for h in (await client.search(SearchRequest("generate_html"))).hits} == {
        "beta.py"
    }


async def _cli_forget(stack: Runtime, *args: str) -> tuple[str, str]:
    """`memoryd forget` through this test's serving stack (a subprocess the event loop waits
    on without blocking the worker that answers it): its stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        MEMORYD, "forget", *args, "--data-dir", str(stack.settings.data_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()
    return out.decode(), err.decode()


async def test_forget_before_a_time_takes_what_was_over_by_then(
    stack: Runtime, world: tuple[Path, Path]
) -> None:
    assert stack.store is not None
    client = Client(stack.redis, stack.settings)
    before = await stack.store.dump()
    # Half-way through S37 (2025-07-14 22:59 to 23:26): its session is not over by then.
    cut = datetime.fromisoformat("2025-07-14T23:10:00+00:00")
    early = {
        key(r)
        for table in ("memory", "goal")
        for r in before[table]
        if r.get("event_time") is not None and r["event_time"] < cut
    }
    assert 0 < len(early) < 282
    expected = _by_table(early | _orphans(before, early))
    printed, said = await _cli_forget(stack, "--before", cut.isoformat())
    after = await stack.store.dump()
    gone = _gone(before, after)
    assert {t: refs for t, refs in gone.items() if t in expected} == expected
    assert {t: refs for t, refs in gone.items() if t not in expected} == _edges_of(before, early)
    counts = ", ".join(f"{t} {n}" for t, n in sorted(_counted(expected).items()))
    assert printed == f"removed: {counts}\n"
    assert "keep the deleted values' bytes until `memoryd compact`" in " ".join(said.split())

    # The next year: both sessions are over, S37 whole and SMALL's too; the code is current.
    middle = await stack.store.dump()
    done = await client.forget_scope("before", "2027-01-01T00:00:00+00:00")
    assert sorted(done["sessions"]) == sorted([S37.stem, SMALL.stem])
    after = await stack.store.dump()
    assert not after.get("memory") and not after.get("goal") and not after.get("session")
    assert _counts(after)["code_chunk"] == _counts(middle)["code_chunk"] == 3
    assert _counts(after)["file_state"] == 3


async def test_forget_path_takes_the_file_and_the_memories_about_it_alone(
    stack: Runtime, world: tuple[Path, Path]
) -> None:
    assert stack.store is not None
    client, repo = Client(stack.redis, stack.settings), world[0] / "claude-code-log"
    before = await stack.store.dump()
    [entity] = [key(e) for e in before["entity"] if e["kind"] == "file" and e["key"].endswith(
        f":{RENDERER}")]  # fmt: skip
    code = {key(r) for t in ("code_chunk", "file_state") for r in before[t]
            if r["path"] == RENDERER}  # fmt: skip
    # The memories whose every named file is renderer.py, and the results of those calls.
    named: dict[str, set[str]] = {}
    for table in ("reads", "modifies", "denied", "mentions"):
        for e in before[table]:
            if key(e, "out") in {key(x) for x in before["entity"] if x["kind"] == "file"}:
                named.setdefault(key(e, "in"), set()).add(key(e, "out"))
    alone = {memory for memory, files in named.items() if files == {entity}}
    calls = {m["call_id"] for m in before["memory"] if key(m) in alone and m.get("call_id")}
    results = {key(m) for m in before["memory"] if m.get("call_id") in calls}
    memories = alone | results
    assert len(alone) >= 6 and results - alone
    goals = {key(g) for g in before["goal"] if key(g, "memory") in memories}
    doomed = {entity} | code | memories | goals
    expected = _by_table(doomed | _orphans(before, doomed))

    done = await client.forget_scope("path", str(repo / "claude_code_log" / "render*.py"))
    assert done["sessions"] == []
    after = await stack.store.dump()
    gone = _gone(before, after)
    assert {t: refs for t, refs in gone.items() if t in expected} == expected
    assert done["removed"] == _counted(expected)
    assert {t: refs for t, refs in gone.items() if t not in expected} == _edges_of(before, doomed)
    # The rest of the session stays: its other memories, and the session itself.
    assert len(after["memory"]) == 282 + 22 - len(memories) and len(after["session"]) == 2
    assert _counts(after)["code_chunk"] == _counts(before)["code_chunk"] - len(code & {
        key(r) for r in before["code_chunk"]})  # fmt: skip
    history = await client.history(str(repo / RENDERER))
    assert history["sessions"] == [] and history["chunks"] == []
