"""Migration step 009 on databases built by today's code: in today's shape it changes nothing;
in the shape the code before issue 16 left (its own rows for the same fixtures,
tests/fixtures/pre16-graph.jsonl) it ends with today's edges and entities, and a step killed
half-way then run again ends the same."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from memoryd import migrate as migration
from memoryd import queue
from memoryd.ids import stable_id
from memoryd.runtime import Runtime
from memoryd.store import Store, key_of
from tests.fixtures import PRE16_FILES, PRE16_GRAPH, S37
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


async def _ingested(stack: Runtime) -> Store:
    assert stack.redis is not None and stack.store is not None
    jobs = await queue.enqueue_ingest(stack.redis, [str(p) for p in PRE16_FILES], fresh=True)
    for job in jobs:
        await queue.wait_for(job, 600)
    return stack.store


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


@pytest.mark.e2e
async def test_edges_of_before_issue_16_are_derived_again_by_todays_rules(
    stack: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _ingested(stack)
    fresh = await _graph(store)
    counts = await store.table_counts()

    # A database today's code built: nothing to change.
    assert await _rerun(store, stack) == [STEP]
    assert await _graph(store) == fresh

    await _as_before_issue_16(store)
    old = await _graph(store)
    assert old != fresh
    # Killed after a few pages (a page per 20 memories), then run again.
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
    monkeypatch.setattr(store, "replace_edges", replace)
    assert await _rerun(store, stack) == [STEP]
    migrated = await _graph(store)
    # As many rows as a fresh ingest but entities: S37's unstored facts (below) leave out
    # two files under test/test/ and merge three failures into two.
    assert await store.table_counts() == {**counts, "entity": counts["entity"] - 3}
    unstored = _needs_what_was_not_stored()
    (fresh_edges, fresh_entities), (edges, entities) = fresh, migrated
    assert {e for e in edges if e[2] not in unstored} == {
        e for e in fresh_edges if e[2] not in unstored
    }
    # S37's 7 commands run in test/ read against the session's folder instead (5 MENTIONS,
    # 2 READS), and its 5 failures whose line is past the stored output keep another line.
    changed = sorted((e[0], e[2]) for e in edges - fresh_edges)
    assert changed == sorted((e[0], e[2]) for e in fresh_edges - edges)
    assert Counter(table for table, _ in changed) == {"mentions": 5, "reads": 2, "triggered": 5}
    targets = {e[3] for e in edges}
    assert {e[0] for e in entities} == targets  # no entity left that nothing points at
    only = {e[0] for e in entities ^ fresh_entities}
    assert only <= {e[3] for e in edges ^ fresh_edges}
