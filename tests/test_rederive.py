"""Migration step 009 on databases built by today's code: in today's shape it changes nothing;
in the shape the code before issue 16 left (its own rows for the same fixtures,
tests/fixtures/pre16-graph.jsonl) it ends with today's edges and entities: exactly those of a
fresh ingest while the transcripts are there, and all that the stored facts allow once they
are gone. Each time the step is stopped half-way and run again."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd import migrate as migration
from memoryd import queue
from memoryd.ids import stable_id
from memoryd.runtime import Runtime
from memoryd.store import Store, key_of
from tests.fixtures import PRE16_FILES, PRE16_GRAPH, S37, TRANSCRIPTS
from workers.rederive import CALL_EDGE_TABLES

STEP = "009_rederive_edges"


class Killed(Exception):
    """The process ended between two pages."""


Graph = tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]


async def _graph(store: Store) -> Graph:
    """Every call edge with its fields, and every entity (error entities with their aliases)."""
    dump = await store.dump()
    edges = {
        (
            table,
            key_of(row["id"]),
            key_of(row["in"]),
            key_of(row["out"]),
            json.dumps({k: v for k, v in row.items() if k not in ("id", "in", "out")}, default=str),
        )
        for table in CALL_EDGE_TABLES
        for row in dump.get(table) or []
    }
    entities = {
        (
            key_of(e["id"]),
            e["kind"],
            e["key"],
            e["name"],
            str(e.get("project")),
            tuple(e["aliases"]) if e["kind"] == "error" else (),
        )
        for e in dump["entity"]
    }
    return edges, entities


def _needs_what_was_not_stored() -> set[str]:
    """The memories of S37's calls whose edges need what memoryd does not store: the folder
    a command ran in when an earlier `cd test` moved the session (Claude Code records it per
    line), and a failure's output past its first 4,000 characters."""
    records = [json.loads(line) for line in S37.read_text().splitlines()]
    start = next(r["cwd"] for r in records if r.get("cwd"))
    calls: set[str] = set()
    for r in records:
        content = (
            r.get("message", {}).get("content") if isinstance(r.get("message"), dict) else None
        )
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and r.get("cwd") != start:
                calls.add(block["id"])
            if block.get("type") == "tool_result" and block.get("is_error"):
                output = block.get("content")
                if isinstance(output, list):
                    output = "\n".join(b.get("text", "") for b in output)
                if len(output or "") > 4000:
                    calls.add(block["tool_use_id"])
    return {stable_id("claude-code", S37.stem, "call", call) for call in calls}


def _ref(value: str) -> str:
    return value.split(":", 1)[1]


async def _as_before_issue_16(store: Store) -> None:
    """Today's entities and call edges out, the ones the code before stored in."""
    entities = [key_of(e["id"]) for e in (await store.dump())["entity"]]
    await store.delete_rows("entity", entities)  # and every edge pointing at them
    old = [json.loads(line) for line in PRE16_GRAPH.read_text().splitlines()]
    edges: dict[str, list[dict[str, Any]]] = {}
    rows = []
    for item in old:
        row = item["row"]
        if item["table"] == "entities":
            seen = {k: datetime.fromisoformat(row[k]) for k in ("first_seen", "last_seen")}
            rows.append({**row, **seen, "project": row["project"] and _ref(row["project"])})
            continue
        fields = {k: v for k, v in row.items() if k not in ("id", "in", "out")}
        fields["session"] = _ref(fields["session"])
        if fields.get("event_time"):
            fields["event_time"] = datetime.fromisoformat(fields["event_time"])
        table = edges.setdefault(item["table"], [])
        if any(e["key"] == _ref(row["id"]) for e in table):
            continue  # written again by a later batch: the stored row kept its first fields
        table.append(
            {
                "key": _ref(row["id"]),
                "memory": _ref(row["in"]),
                "entity": _ref(row["out"]),
                "fields": fields,
            }
        )
    for row in rows:
        row.pop("id")
    await store.replace_edges([], edges, rows)


async def _rerun(store: Store, stack: Runtime) -> list[str]:
    await store.query(f"DELETE schema_version:{STEP};")
    return await migration.migrate(store, stack.settings, None)


async def _killed_then_run_again(
    store: Store, stack: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step stopped after three pages (of 20 memories) were written, then run again."""
    monkeypatch.setattr(migration, "_PAGE", 20)
    replace, pages = store.replace_edges, 0

    async def killed(*args: Any) -> None:
        nonlocal pages
        pages += 1
        if pages == 4:
            raise Killed
        await replace(*args)

    monkeypatch.setattr(store, "replace_edges", killed)
    with pytest.raises(Killed):
        await _rerun(store, stack)
    assert pages == 4
    monkeypatch.setattr(store, "replace_edges", replace)
    assert await _rerun(store, stack) == [STEP]


@pytest.mark.e2e
async def test_edges_of_before_issue_16_are_derived_again_by_todays_rules(
    stack: Runtime, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert stack.redis is not None and stack.store is not None
    store = stack.store
    copies = [tmp_path / path.relative_to(TRANSCRIPTS) for path in PRE16_FILES]
    for path, copy in zip(PRE16_FILES, copies, strict=True):
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    for job in await queue.enqueue_ingest(stack.redis, [str(c) for c in copies], fresh=True):
        await queue.wait_for(job, 600)
    fresh = await _graph(store)
    counts = await store.table_counts()

    # A database today's code built: nothing to change.
    assert await _rerun(store, stack) == [STEP]
    assert await _graph(store) == fresh

    # The transcripts are still there: read again, exactly what a fresh ingest made.
    await _as_before_issue_16(store)
    assert await _graph(store) != fresh
    await _killed_then_run_again(store, stack, monkeypatch)
    assert await _graph(store) == fresh
    assert await store.table_counts() == counts

    # The transcripts are gone: calls made by today's rules stay as they are (they were made
    # knowing more than was stored), the others are derived from what was stored.
    for copy in copies:
        copy.unlink()
    assert await _rerun(store, stack) == [STEP]
    assert await _graph(store) == fresh
    await _as_before_issue_16(store)
    await _killed_then_run_again(store, stack, monkeypatch)
    (fresh_edges, fresh_entities), (edges, entities) = fresh, await _graph(store)
    unstored = _needs_what_was_not_stored()
    assert {e for e in edges if e[2] not in unstored} == {
        e for e in fresh_edges if e[2] not in unstored
    }
    # S37's 7 commands run in test/ read against the session's folder instead (5 MENTIONS,
    # 2 READS), and its 5 failures whose line is past the stored output keep another line.
    changed = sorted((e[0], e[2]) for e in edges - fresh_edges)
    assert changed == sorted((e[0], e[2]) for e in fresh_edges - edges)
    assert Counter(table for table, _ in changed) == {"mentions": 5, "reads": 2, "triggered": 5}
    assert {e[0] for e in entities} == {e[3] for e in edges}  # none that nothing points at
    assert {e[0] for e in entities ^ fresh_entities} <= {e[3] for e in edges ^ fresh_edges}
    # As many rows as a fresh ingest but entities: two files under test/test/ are not named,
    # and three failures are two.
    assert await store.table_counts() == {**counts, "entity": counts["entity"] - 3}
