"""The migration sequence on a database built by today's code: backup first, counts checked,
each step once, and a database from a newer memoryd refused."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import secrets
import stat
import string
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import zstandard

from memoryd import client, projects, queue
from memoryd.config import Settings
from memoryd.daemon.runtime import Runtime
from memoryd.database.migrate import DataStep, migrate
from memoryd.embedding import Embedder
from memoryd.errors import MemorydError
from memoryd.ids import stable_id
from memoryd.results import SearchRequest
from memoryd.searchindex.search import search
from memoryd.store import VECTOR_TABLES, Store
from memoryd.store.base import rid, unpack_vector
from memoryd.store.blobs import BODY_CHARS
from memoryd.views import session
from memoryd.vocabulary import MENTIONS
from tests.conftest import _serving, git_init, index_tree, serving_copy
from tests.fixtures import CODERABBIT_SESSION, CODERABBIT_SUBAGENT, CODEX_ROLLOUT, S37, SMALL


@pytest.fixture(scope="module")
def ingested(embedder: Embedder, short_tmp: Path) -> Path:
    """A data dir holding real Claude Code (a session and its subagent) and Codex transcripts
    ingested, built once for the module: the ingest was most of each test using it."""
    built = Path(tempfile.mkdtemp(dir=short_tmp))

    async def build() -> None:
        async with _serving(built, embedder, scheduled=False) as rt:
            assert rt.redis is not None and rt.store is not None
            files = [S37, CODERABBIT_SESSION, CODERABBIT_SUBAGENT, CODEX_ROLLOUT]
            for job in await queue.enqueue_ingest(rt.redis, [str(f) for f in files]):
                await queue.wait_for(job, 300)
            await rt.store.settled()

    asyncio.run(build())
    return built


@pytest_asyncio.fixture
async def sessions_stack(
    data_dir: Path, embedder: Embedder, ingested: Path
) -> AsyncIterator[Runtime]:
    """`stack` on a copy of `ingested`: each test changes its own."""
    async with serving_copy(ingested, data_dir, embedder) as rt:
        yield rt


async def _blocks(store: Store) -> int:
    rows = await store.query(
        "SELECT count() AS n FROM code_chunk WHERE chunk_type = 'block' GROUP ALL"
    )
    return rows[0][0]["n"] if rows[0] else 0


async def _rename_chunk_types(store: Store, _: Settings) -> None:
    # A real change to stored rows, as a later data step makes one (idempotent).
    await store.query("UPDATE code_chunk SET chunk_type = 'renamed' WHERE chunk_type = 'block'")


@pytest.mark.e2e
async def test_a_data_step_runs_once_after_a_backup(arq_stack: Runtime) -> None:
    stack, store = arq_stack, arq_stack.store
    assert store is not None
    counts = await store.table_counts()
    blocks = await _blocks(store)
    assert blocks > 0
    step = DataStep(900, "rename_blocks", _rename_chunk_types, changes=())
    backups = stack.settings.data_dir / "backups"

    assert await migrate(store, Settings(), backups, (step,)) == ["900_rename_blocks"]

    [backup] = list(backups.iterdir())
    assert backup.name.startswith("before-900_rename_blocks-") and backup.suffix == ".zst"
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    lines = [
        json.loads(line)
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(backup.open("rb")))
    ]
    exported = {}
    for line in lines:
        exported[line["table"]] = exported.get(line["table"], 0) + 1
        assert "embedding" not in line["row"]
    assert exported == {t: n for t, n in counts.items() if n}
    assert (
        sum(
            1
            for line in lines
            if line["table"] == "code_chunk" and line["row"]["chunk_type"] == "block"
        )
        == blocks
    )
    assert await _blocks(store) == 0
    record = (await store.query("SELECT * FROM schema_version:900_rename_blocks"))[0][0]
    assert record["counts"] == {}

    # Once recorded, never again, and no second backup.
    assert await migrate(store, Settings(), backups, (step,)) == []
    assert len(list(backups.iterdir())) == 1


@pytest.mark.e2e
async def test_a_step_that_loses_rows_is_stopped_and_not_recorded(arq_stack: Runtime) -> None:
    stack, store = arq_stack, arq_stack.store
    assert store is not None

    async def drop_entities(s: Store, _: Settings) -> None:
        await s.query("DELETE entity WHERE kind = 'symbol'")

    step = DataStep(901, "careless", drop_entities, changes=("code_chunk",))
    # Edges at the symbols go with them: the code graph's as well as the chunks'.
    changed = "calls, defined_in, defines, entity, inherits,"
    with pytest.raises(MemorydError, match=f"changed the row counts of {changed}"):
        await migrate(store, Settings(), stack.settings.data_dir / "backups", (step,))
    assert "901_careless" not in await store.applied_steps()
    assert len(list((stack.settings.data_dir / "backups").iterdir())) == 1


async def test_a_database_from_a_newer_memoryd_is_refused(stack: Runtime) -> None:
    assert stack.store is not None
    await stack.store.record_step("950_from_the_future", "950_from_the_future", "x")
    with pytest.raises(MemorydError, match=r"newer memoryd .* 950_from_the_future"):
        await migrate(stack.store, stack.settings, None)


def _token(prefix: str, length: int) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


@pytest.mark.e2e
async def test_secrets_stored_raw_by_an_earlier_memoryd_are_scrubbed(
    stack: Runtime, tmp_path: Path
) -> None:
    """A database as memoryd stored it before code was redacted and before repeats were
    tracked: raw tokens in a code chunk and in memories. Step 004 redacts them everywhere,
    drops their vectors, keeps the backup free of them, and after the engine's merge no byte
    of the data dir holds them."""
    assert stack.redis is not None and stack.store is not None
    store = stack.store
    pat, slack = _token("ghp_", 36), "xoxb-2718281828-3141592653589-" + _token("", 24)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "settings.py").write_text("def token():\n    return read_vault('github')\n")
    git_init(repo)
    for job, _ in await projects.sync(stack.redis, projects.resolve(repo), 32):
        await queue.wait_for(job, 300)
    [job] = await queue.enqueue_ingest(stack.redis, [str(SMALL)], fresh=True)
    await queue.wait_for(job, 300)
    # What the code of before stored: the values as they were written.
    await store.query(
        f"UPDATE code_chunk SET content = 'def token():\\n    return \"{pat}\"\\n'; "
        f"UPDATE (SELECT VALUE id FROM memory ORDER BY seq LIMIT 2) "
        f"SET content = content + ' deploy with {slack} and {pat}';"
        "DELETE schema_version:004_scrub_secrets;"
    )
    before = await store.table_counts()

    backups = stack.settings.data_dir / "backups"
    assert await migrate(store, stack.settings, backups) == ["004_scrub_secrets"]

    everything = repr(await store.dump())
    assert pat not in everything and slack not in everything
    assert "[REDACTED:" in everything
    changed = (
        await store.query("SELECT VALUE embedding FROM memory WHERE content CONTAINS 'REDACTED'")
    )[0]
    assert len(changed) == 2 and all(vector is None for vector in changed)
    assert await store.table_counts() == {**before, "schema_version": before["schema_version"] + 1}
    [backup] = list(backups.iterdir())
    copy = zstandard.ZstdDecompressor().stream_reader(backup.open("rb")).read()
    assert pat.encode() not in copy and slack.encode() not in copy
    leaks = {
        path.relative_to(stack.settings.data_dir).parts[:2]
        for path in stack.settings.data_dir.rglob("*")
        if path.is_file() and any(value.encode() in path.read_bytes() for value in (pat, slack))
    }
    # The table files were merged without the old versions; this engine build never rewrites
    # its value log, where values written long ago stay as bytes (README, "Your data").
    assert leaks <= {("db", "vlog")}


def _db_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in (data_dir / "db").rglob("*") if p.is_file())


async def _seen(rt: Runtime, queries: list[tuple[str, str]]) -> dict[str, object]:
    """What a user sees: search results (indexes rebuilt from the database), session replays."""
    assert rt.store is not None and rt.search is not None and rt.embedder is not None
    await rt.search.rebuild()
    results = {
        f"{kind}: {q}": [
            (r.id, r.score)
            for r in (
                await search(rt.store, rt.embedder, rt.search.index, SearchRequest(q, (kind,)))
            ).hits
        ]
        for kind, q in queries
    }
    replays = {key: await session(rt.store, key) for key in await rt.store.session_keys()}
    return {"search": results, "sessions": replays}


@pytest.mark.e2e
async def test_vectors_and_long_texts_are_packed_and_the_database_copied_smaller(
    stack: Runtime, tmp_path: Path
) -> None:
    """A database as memoryd stored it before: vectors as arrays of floats, long texts whole
    in their memories. Steps 010 to 013 give back exactly the rows, the vectors, the search
    results and the session replays, in fewer bytes."""
    assert stack.redis is not None and stack.store is not None
    store = stack.store
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "cron.py").write_text(
        "def next_run(schedule, now):\n    return schedule.after(now)\n\n\n"
        "class Cron:\n    def due(self, now):\n        return next_run(self.schedule, now)\n"
    )
    git_init(repo)
    await index_tree(stack, repo)
    # The same session again under another id: its long tool outputs come twice.
    again = tmp_path / "sessions" / "5f0c2d9e-0000-4000-8000-000000000001.jsonl"
    again.parent.mkdir()
    again.write_text(SMALL.read_text().replace(SMALL.stem, again.stem))
    for job in await queue.enqueue_ingest(
        stack.redis, [str(SMALL), str(again), str(CODEX_ROLLOUT)]
    ):
        await queue.wait_for(job, 300)
    queries = [
        ("memory", "which files were edited"),
        ("memory", "run the tests"),
        ("code", "when is the cron due"),
    ]
    seen = await _seen(stack, queries)
    assert all(seen["search"].values()) and len(seen["sessions"]) >= 3
    rows = await store.dump()
    vectors = {
        (t, r["id"].id): r["embedding"]
        for t in VECTOR_TABLES
        for r in rows[t]
        if r.get("embedding")
    }
    assert {t for t, _ in vectors} == set(VECTOR_TABLES)
    assert {len(v) for v in vectors.values()} == {2 * 384}  # half floats
    bodied = {r["id"].id for r in rows["memory"] if r.get("body")}
    assert len(rows["blob"]) > 1 and len(bodied) > len(rows["blob"])  # some texts came twice
    whole = {r["id"].id: r["content"] for r in await store.memories_by_key(sorted(bodied))}
    assert all(len(text) >= BODY_CHARS for text in whole.values())

    # What the code of before stored: long texts whole, vectors as arrays of floats.
    await store.patch_rows(
        "memory", [{"id": k, "content": t, "body": None} for k, t in whole.items()]
    )
    for table in VECTOR_TABLES:
        await store.query(f"DEFINE FIELD OVERWRITE embedding ON {table} TYPE option<array<float>>")
        keys = sorted(k for t, k in vectors if t == table)
        await store.patch_rows(
            table, [{"id": k, "embedding": unpack_vector(vectors[table, k])} for k in keys]
        )
    await store.query(
        "REMOVE INDEX memory_body ON memory; REMOVE FIELD body ON memory; REMOVE TABLE blob; "
        "DELETE schema_version:010_pack_vectors, schema_version:011_blobs, "
        "schema_version:012_store_bodies, schema_version:013_compact;"
    )
    for _ in range(2):
        await store.reopen()
    arrays = await store.query("SELECT VALUE embedding FROM memory WHERE type::is_array(embedding)")
    assert arrays[0] and all(len(a) == 384 for a in arrays[0])
    before = _db_bytes(stack.settings.data_dir)
    # A copy an earlier run of step 013 left half-written is started again.
    (stack.settings.data_dir / "db.compacting").mkdir()
    (stack.settings.data_dir / "db.compacting" / "junk").write_bytes(b"x" * 1000)

    assert await migrate(store, stack.settings, None) == [
        "010_pack_vectors",
        "011_blobs.surql",
        "012_store_bodies",
        "013_compact",
    ]

    after = await store.dump()
    assert after.pop("schema_version") != rows.pop("schema_version")
    assert after == rows  # every row, the packed vectors byte for byte
    assert await _seen(stack, queries) == seen
    assert sorted(p.name for p in stack.settings.data_dir.iterdir() if p.name.startswith("db")) == [
        "db"
    ]
    fields = (await store.query("INFO FOR TABLE memory"))[0]["fields"]
    assert "bytes" in fields["embedding"] and "embedding.*" not in fields
    assert _db_bytes(stack.settings.data_dir) < 0.75 * before


@pytest.mark.e2e
@pytest.mark.parametrize("renames", [0, 1, 2])
async def test_a_swap_cut_short_is_finished_at_the_next_open(stack: Runtime, renames: int) -> None:
    """A compaction (step 013, `memoryd compact`) died once its copy was complete, before the
    swap's first rename (an old copy an earlier crash left beside it), after it (the files moved
    aside, the copy not in their place yet), or after the second (the old files still there).
    The next open finishes the swap: every row is the copy's, and `db` alone is left."""
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(SMALL)])
    await queue.wait_for(job, 300)
    store, data = stack.store, stack.settings.data_dir
    await store.settled()
    graph = await store.dump()
    assert len(graph["memory"]) == 22
    copy = await Store.open(f"surrealkv://{data / 'db.replacement'}", *store.login)
    await store.copy_into(copy, 7)  # small pages: many of them
    await copy.close()
    await store.query("DELETE memory")  # what the old files held since is gone with them
    login = store.login
    await stack.close()
    # The renames memoryd/store/connection.py makes, as far as the crash let them go.
    if renames == 0:
        (data / "db.replaced").mkdir()
    if renames >= 1:
        (data / "db").rename(data / "db.replaced")
    if renames == 2:
        (data / "db.replacement").rename(data / "db")

    reopened = await Store.open(stack.settings.database_url, *login)
    try:
        assert await reopened.dump() == graph
    finally:
        await reopened.close()
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("db")) == ["db"]


# What `session_outcomes` read before step 025: a session's actions through its CONTAINS edges
# (with the fields it reads today).
_OUTCOMES_THROUGH_CONTAINS = (
    "SELECT string::uppercase(meta::tb(id)) AS verb, out.kind AS target_kind, out.key AS target, "
    "out.project AS project, outcome, exit_code, tool, detail, event_time, code_hash, session, "
    "in.seq AS seq, (SELECT VALUE message FROM $parent.in->triggered LIMIT 1)[0] AS message "
    "FROM $s->contains->memory->(executes, modifies, reads)"
)


def _in_order(outcomes: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(outcomes, key=lambda o: json.dumps(o, sort_keys=True, default=str))


@pytest.mark.e2e
async def test_the_order_edges_an_earlier_memoryd_wrote_are_dropped(
    sessions_stack: Runtime,
) -> None:
    """A database with the CONTAINS and NEXT edges memoryd wrote before step 025 (one per
    memory, one per memory but each session's first): the step leaves every other row as it
    was, and a session's actions (parent and subagent) are found by the sessions their edges
    carry exactly as they were through CONTAINS, in fewer bytes."""
    stack, store = sessions_stack, sessions_stack.store
    assert store is not None
    rows = await store.dump()
    assert not {"contains", "next"} & set(rows)

    # What the earlier memoryd wrote besides: its tables and an edge per memory, in seq order.
    memories = sorted(rows["memory"], key=lambda m: (str(m["session"]), m["seq"]))
    contains = [
        {"id": rid("contains", m["id"].id), "in": m["session"], "out": m["id"]} for m in memories
    ]
    chain = [
        {"id": rid("next", a["id"].id), "in": a["id"], "out": b["id"]}
        for a, b in itertools.pairwise(memories)
        if a["session"] == b["session"]
    ]
    await store.query(
        "DEFINE TABLE contains TYPE RELATION IN session OUT memory SCHEMALESS; "
        "DEFINE TABLE next TYPE RELATION IN memory OUT memory SCHEMALESS; "
        "INSERT RELATION INTO contains $contains RETURN NONE; "
        "INSERT RELATION INTO next $chain RETURN NONE; "
        "DELETE schema_version:025_drop_order_edges;",
        {"contains": contains, "chain": chain},
    )
    sessions = sorted(str(s["id"].id) for s in rows["session"])
    subagent = [s for s in rows["session"] if s.get("parent")]
    assert len(sessions) == 4 and len(subagent) == 1
    assert len(chain) == len(memories) - len(sessions)  # every session holds memories
    through_contains = []
    for key in sessions:
        found = await store.query(_OUTCOMES_THROUGH_CONTAINS, {"s": rid("session", key)})
        through_contains += found[0]
    assert len(through_contains) > 50
    parents = [k for k in sessions if k != str(subagent[0]["id"].id)]
    assert _in_order(await store.session_outcomes(parents)) == _in_order(through_contains)
    for _ in range(2):
        await store.reopen()
    before = _db_bytes(stack.settings.data_dir)

    assert await migrate(store, stack.settings, None) == ["025_drop_order_edges"]

    after = await store.dump()
    versions = {str(v["id"].id): v for v in after.pop("schema_version")}
    assert versions["025_drop_order_edges"]["counts"] == {
        "contains": {"before": len(memories), "after": 0},
        "next": {"before": len(chain), "after": 0},
    }
    rows.pop("schema_version")
    assert after == rows
    assert _in_order(await store.session_outcomes(parents)) == _in_order(through_contains)
    assert sorted(p.name for p in stack.settings.data_dir.iterdir() if p.name.startswith("db")) == [
        "db"
    ]
    assert _db_bytes(stack.settings.data_dir) < 0.8 * before


@pytest.mark.e2e
async def test_what_fixed_each_failure_is_derived_for_sessions_stored_before_it_was(
    sessions_stack: Runtime,
) -> None:
    """Step 027 writes the RESOLVED_BY edges ingest writes today (workers/resolutions.py) for
    a database that has none: the same edges, and nothing else changed."""
    stack, store = sessions_stack, sessions_stack.store
    assert store is not None
    rows = await store.dump()
    written = rows["resolved_by"]
    assert len(written) > 0
    # Each edge joins an error to a later successful call of its session.
    for edge in written:
        [fix] = [m for m in rows["memory"] if m["id"] == edge["out"]]
        assert fix["session"] == edge["session"] and edge["in"].table_name == "entity"
        failed = [
            t
            for t in rows["triggered"]
            if (t["session"], t["out"]) == (edge["session"], edge["in"])
            and t["event_time"] == edge["failed_at"]
        ]
        assert failed and fix["seq"] > edge["failed_seq"]
    await store.query("DELETE resolved_by; DELETE schema_version:027_resolve_errors;")

    assert await migrate(store, stack.settings, None) == ["027_resolve_errors"]

    after = await store.dump()
    versions = {str(v["id"].id): v for v in after.pop("schema_version")}
    assert versions["027_resolve_errors"]["counts"] == {
        "resolved_by": {"before": 0, "after": len(written)}
    }
    rows.pop("schema_version")
    assert after == rows


@pytest.mark.e2e
async def test_notes_mentions_get_the_key_every_edge_has(stack: Runtime, tmp_path: Path) -> None:
    """Notes' MENTIONS edges as an earlier memoryd keyed them (`stable_id("mentions", memory,
    entity key)`): step 033 gives each the key `Edge.row_id` gives, every field and end as it
    was, so the same note remembered again is the same two edges, not four."""
    assert stack.store is not None
    store = stack.store
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "b.md").write_text("# b\n")
    memoryd = client.Client(stack.redis, stack.settings)
    text = "Decision: a.py holds the constants, b.md explains them."
    memory = (await memoryd.remember(text, "decision", ["a.py", "b.md"], cwd=tmp_path))["id"]
    memory = memory.split(":", 1)[1]
    named = {str(e["id"]): e for e in (await store.dump())["entity"]}
    today = {str(e["id"].id): e for e in (await store.dump())["mentions"]}
    ends = {key: named[str(e["out"])] for key, e in today.items()}
    assert sorted(key for key in today) == sorted(
        MENTIONS.row_id(memory, end["kind"], end["key"]) for end in ends.values()
    )
    assert sorted(end["key"].rsplit("/", 1)[-1] for end in ends.values()) == ["a.py", "b.md"]
    # As the earlier memoryd wrote them.
    earlier = [
        e | {"id": rid("mentions", stable_id("mentions", memory, ends[key]["key"]))}
        for key, e in today.items()
    ]
    await store.query(
        "DELETE $today; INSERT RELATION INTO mentions $earlier RETURN NONE; "
        "DELETE schema_version:033_rekey_note_mentions;",
        {"today": [e["id"] for e in today.values()], "earlier": earlier},
    )
    assert not {str(e["id"].id) for e in (await store.dump())["mentions"]} & set(today)

    assert await migrate(store, stack.settings, None) == ["033_rekey_note_mentions"]
    assert {str(e["id"].id): e for e in (await store.dump())["mentions"]} == today
    await memoryd.remember(text, "decision", ["a.py", "b.md"], cwd=tmp_path)
    assert {str(e["id"].id) for e in (await store.dump())["mentions"]} == set(today)
