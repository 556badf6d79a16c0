"""The schema: applied in order at start-up, idempotent, recorded; SurrealQL only in store.py."""

from __future__ import annotations

import re
from pathlib import Path

from memoryd.config import Settings
from memoryd.daemon.runtime import Runtime
from memoryd.database.migrate import DATA_STEPS, migrate
from memoryd.store import SCHEMA_DIR, Store

ROOT = Path(__file__).resolve().parent.parent


async def test_applying_the_schema_twice_changes_nothing(data_dir: Path) -> None:
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        first = await migrate(store, Settings(), None)
        files = [p.name for p in SCHEMA_DIR.glob("*.surql")]
        numbers = [name[:3] for name in [*files, *(step.step for step in DATA_STEPS)]]
        assert len(numbers) == len(set(numbers))  # one series: a number names one step
        assert first == sorted([*files, *(step.step for step in DATA_STEPS)])
        info = (await store.query("INFO FOR DB"))[0]
        versions = (await store.dump())["schema_version"]
        assert await migrate(store, Settings(), None) == []
        assert (await store.query("INFO FOR DB"))[0] == info
        assert (await store.dump())["schema_version"] == versions
    finally:
        await store.close()
    tables = set(info["tables"])
    for table in (
        "project",
        "file_state",
        "transcript_cursor",
        "code_chunk",
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
        "defined_in",
        "mentions",
    ):
        assert table in tables, table
    # A session's memories and their order are the memories' own fields (vocabulary.py).
    assert not tables & {"contains", "next"}


async def test_the_database_defines_no_search_index_of_its_own(stack: Runtime) -> None:
    """Search runs on the derived indexes; SurrealDB's would only cost writes and bytes."""
    assert stack.store is not None
    for table in ("code_chunk", "memory", "goal"):
        indexes = (await stack.store.query(f"INFO FOR TABLE {table}"))[0]["indexes"]
        assert not [d for d in indexes.values() if "HNSW" in d or "FULLTEXT" in d], table


async def test_step_005_drops_the_search_indexes_an_earlier_memoryd_defined(
    stack: Runtime,
) -> None:
    assert stack.store is not None
    store = stack.store
    await store.query(
        "DEFINE ANALYZER IF NOT EXISTS memoryd_text TOKENIZERS blank FILTERS lowercase;"
        "DEFINE INDEX code_chunk_vec ON code_chunk FIELDS embedding HNSW DIMENSION 384 "
        "DIST COSINE;"
        "DEFINE INDEX memory_text ON memory FIELDS content FULLTEXT ANALYZER memoryd_text BM25;"
        "DELETE schema_version:005_drop_search_indexes;"
    )
    assert "code_chunk_vec" in (await store.query("INFO FOR TABLE code_chunk"))[0]["indexes"]
    backups = stack.settings.data_dir / "backups"
    assert await migrate(store, stack.settings, backups) == ["005_drop_search_indexes"]
    assert "code_chunk_vec" not in (await store.query("INFO FOR TABLE code_chunk"))[0]["indexes"]
    assert "memory_text" not in (await store.query("INFO FOR TABLE memory"))[0]["indexes"]


def test_only_the_store_speaks_surrealql() -> None:
    statement = re.compile(r"\b(SELECT|UPSERT|INSERT INTO|RELATE|DEFINE TABLE|DELETE FROM)\b")
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("memoryd", "workers")
        for path in (ROOT / package).rglob("*.py")
        if "store" not in path.relative_to(ROOT).parts and statement.search(path.read_text())
    ]
    assert offenders == []
