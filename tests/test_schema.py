"""The schema: applied in order at start-up, idempotent, recorded; SurrealQL only in store.py."""

from __future__ import annotations

import re
from pathlib import Path

from memoryd.config import Settings
from memoryd.migrate import DATA_STEPS, migrate
from memoryd.runtime import Runtime
from memoryd.store import SCHEMA_DIR, Store

ROOT = Path(__file__).resolve().parent.parent


async def test_applying_the_schema_twice_changes_nothing(data_dir: Path) -> None:
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        first = await migrate(store, Settings(), 384, None)
        files = [p.name for p in SCHEMA_DIR.glob("*.surql")]
        assert first == sorted([*files, *(step.step for step in DATA_STEPS)])
        info = (await store.query("INFO FOR DB"))[0]
        versions = (await store.dump())["schema_version"]
        assert await migrate(store, Settings(), 384, None) == []
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
        "contains",
        "next",
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


async def test_vector_rows_record_their_model(stack: Runtime) -> None:
    assert stack.store is not None
    info = (await stack.store.query("INFO FOR TABLE code_chunk"))[0]
    assert "HNSW DIMENSION 384 DIST COSINE" in info["indexes"]["code_chunk_vec"]
    assert "FULLTEXT ANALYZER memoryd_text BM25" in info["indexes"]["code_chunk_text"]


def test_only_the_store_speaks_surrealql() -> None:
    statement = re.compile(r"\b(SELECT|UPSERT|INSERT INTO|RELATE|DEFINE TABLE|DELETE FROM)\b")
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("memoryd", "workers")
        for path in (ROOT / package).rglob("*.py")
        if "store" not in path.relative_to(ROOT).parts and statement.search(path.read_text())
    ]
    assert offenders == []
