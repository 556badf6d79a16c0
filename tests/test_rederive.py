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

from memoryd import queue
from memoryd.daemon.runtime import Runtime
from memoryd.database import migrate as migration
from memoryd.ids import stable_id
from memoryd.store import Store, key_of
from tests.fixtures import PRE16_FILES, PRE16_GRAPH, S37, TRANSCRIPTS
from workers.migrations.rederive import CALL_EDGE_TABLES

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
    store: Store, stack: Runtime, monkeypatch: pytest.MonkeyPatch, page: int = 20, at: int = 4
) -> None:
    """The step stopped as it writes its `at`-th page (of `page` memories), then run again."""
    monkeypatch.setattr(migration, "_PAGE", page)
    replace, pages = store.replace_edges, 0

    async def killed(*args: Any) -> None:
        nonlocal pages
        pages += 1
        if pages == at:
            raise Killed
        await replace(*args)

    monkeypatch.setattr(store, "replace_edges", killed)
    with pytest.raises(Killed):
        await _rerun(store, stack)
    assert pages == at
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
    # As many rows as a fresh ingest but entities: two files under test/test/ are not named.
    # The five failures are two errors either way (one test failing four times, and a
    # TypeError), each read off another line.
    assert await store.table_counts() == {**counts, "entity": counts["entity"] - 2}


def _env(kind: str, payload: dict[str, Any]) -> str:
    return json.dumps({"timestamp": "2026-11-20T10:00:00.000Z", "type": kind, "payload": payload})


def _exec(call_id: str, cmd: str) -> str:
    args = json.dumps({"cmd": cmd, "workdir": "/home/ann/repo"})
    payload = {"type": "function_call", "name": "exec_command", "arguments": args}
    return _env("response_item", payload | {"call_id": call_id})


def _out(call_id: str, text: str) -> str:
    return _env(
        "response_item", {"type": "function_call_output", "call_id": call_id, "output": text}
    )


def _exited(code: int, body: str) -> str:
    header = "Chunk ID: 4f1a\nWall time: 0.0512 seconds\n"
    return f"{header}Process exited with code {code}\nOutput:\n{body}"


# Codex 0.125 records: a command the sandbox stopped (`rg` ends the pipeline, so exit 1 looked
# like "no match" to the code before), a search that found nothing, and a browser action
# Codex Desktop's policy rejected (an answer, to the code before).
SANDBOX_ROLLOUT = [
    _env("session_meta", {"id": "019e0000-0000-7000-8000-00000000c0de", "cwd": "/home/ann/repo"}),
    _exec("c1", "ps aux | rg memoryd"),
    _out("c1", _exited(1, "zsh:1: operation not permitted: ps\n")),
    _exec("c2", "rg -n TODO src"),
    _out("c2", _exited(1, "")),
    _env(
        "response_item",
        {"type": "function_call", "name": "js", "arguments": '{"code": "1"}', "call_id": "c3"},
    ),
    _out("c3", "Codex rejected this action due to browser security policy."),
]


async def _codex_as_before(store: Store) -> None:
    """What the Codex parser before issue 16 stored for SANDBOX_ROLLOUT: every call answered
    (outcome ok, its result a tool_result), no TRIGGERED and no DENIED, no `via`."""
    dump = await store.dump()
    doomed = [(t, key_of(e["id"])) for t in CALL_EDGE_TABLES for e in dump.get(t) or []]
    edges: dict[str, list[dict[str, Any]]] = {}
    for table in ("executes", "reads"):
        for e in dump.get(table) or []:
            fields = {k: v for k, v in e.items() if k not in ("id", "in", "out", "via")}
            row = {"key": key_of(e["id"]), "memory": key_of(e["in"]), "entity": key_of(e["out"])}
            edges.setdefault(table, []).append(
                {**row, "fields": {**fields, "outcome": "ok", "session": key_of(e["session"])}}
            )
    [js] = dump["denied"]
    fields = {k: js[k] for k in ("tool", "event_time")} | {"session": key_of(js["session"])}
    edges["executes"].append(
        {
            "key": stable_id("EXECUTES", key_of(js["in"]), "tool", "js"),
            "memory": key_of(js["in"]),
            "entity": key_of(js["out"]),
            "fields": {**fields, "outcome": "ok", "exit_code": None, "detail": ""},
        }
    )
    kinds = {key_of(m["id"]): "tool_result" for m in dump["memory"] if m["kind"] == "error"}
    await store.replace_edges(doomed, edges, [], kinds)


async def _kinds(store: Store) -> dict[str, str]:
    return {key_of(m["id"]): m["kind"] for m in (await store.dump())["memory"]}


@pytest.mark.e2e
async def test_codex_calls_the_sandbox_stopped_or_the_browser_refused_are_told_apart_again(
    stack: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert stack.redis is not None and stack.store is not None
    store = stack.store
    rollout = tmp_path / "rollout-2026-11-20T10-00-00-019e0000-0000-7000-8000-00000000c0de.jsonl"
    rollout.write_text("".join(line + "\n" for line in SANDBOX_ROLLOUT))
    [job] = await queue.enqueue_ingest(stack.redis, [str(rollout)], fresh=True)
    await queue.wait_for(job, 300)
    fresh, kinds = await _graph(store), await _kinds(store)
    assert sorted(kinds.values()).count("error") == 1
    verbs = sorted((e[0], json.loads(e[4]).get("outcome")) for e in fresh[0])
    assert verbs == [
        ("denied", None),
        ("executes", "error"),
        ("executes", "error"),
        ("executes", "ok"),
        ("reads", "ok"),
        ("triggered", None),
    ]
    for present in (True, False):
        await _codex_as_before(store)
        assert await _graph(store) != fresh and await _kinds(store) != kinds
        if not present:
            rollout.unlink()
        # a page per memory: stopped after the first call's edges (and its result's kind)
        await _killed_then_run_again(store, stack, monkeypatch, page=1, at=2)
        assert (await _graph(store), await _kinds(store)) == (fresh, kinds)


# --- step 026: issue 33's rules ------------------------------------------------------------------

STEP_26 = "026_rederive_edges_2"
REFUSED = (
    "touch in '/w/proj/made.txt' needs approval. The path is inside the working directories "
    "for this session ('/w/proj'), and Claude Code asks before a shell command creates, "
    "changes or removes files there."
)


def _claude_session() -> str:
    """A Claude Code 2.1.330 session whose Bash call was refused for approval."""
    base = {"sessionId": "5e0c1b2a-3d4e-4f60-8a9b-0c1d2e3f4a5b", "cwd": "/w/proj"}
    base |= {"timestamp": "2026-11-20T10:00:00.000Z", "version": "2.1.330"}
    use = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "Bash",
        "input": {"command": "touch made.txt"},
    }
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": REFUSED, "is_error": True}
    records = [
        {**base, "type": "user", "uuid": "u1", "message": {"role": "user", "content": "make it"}},
        {
            **base,
            "type": "assistant",
            "uuid": "a1",
            "message": {"role": "assistant", "content": [use]},
        },
        {
            **base,
            "type": "user",
            "uuid": "r1",
            "message": {"role": "user", "content": [result]},
            "toolUseResult": f"Error: {REFUSED}",
            "permissionDecision": {"decision": "reject", "source": "config"},
        },
    ]
    return "".join(json.dumps(r) + "\n" for r in records)


def _gemini_chat() -> str:
    """A current Gemini CLI chat: a grep_search, and a shell call whose command failed."""
    meta = {"sessionId": "9f0c2d4e-1111-4222-8333-444455556666", "projectHash": "ab" * 32}
    meta["startTime"] = "2026-11-20T10:00:00.000Z"

    def call(cid: str, name: str, args: dict[str, Any], output: str) -> dict[str, Any]:
        response = {"functionResponse": {"id": cid, "name": name, "response": {"output": output}}}
        return {"id": cid, "name": name, "args": args, "result": [response], "status": "success"}

    shell = "Output: bash: line 1: pytest: command not found\nExit Code: 127"
    calls = [
        call("c1", "grep_search", {"dir_path": "/w/shop/src", "pattern": "def pay"}, "Found 1"),
        call("c2", "run_shell_command", {"command": "pytest -q"}, shell),
    ]
    message = {"id": "m1", "timestamp": "2026-11-20T10:01:00.000Z", "type": "gemini"}
    records = [meta, {**message, "content": "", "toolCalls": calls}]
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.mark.e2e
async def test_step_26_brings_issue_33s_rules_to_a_database_built_before_them(
    stack: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.stages.transcripts import claude_code, gemini

    assert stack.redis is not None and stack.store is not None
    store = stack.store
    claude = tmp_path / ".claude" / "projects" / "-w-proj" / "5e0c1b2a.jsonl"
    chat = tmp_path / ".gemini" / "tmp" / ("ab" * 32) / "chats" / "session-2026-11-20.jsonl"
    for path, text in ((claude, _claude_session()), (chat, _gemini_chat())):
        path.parent.mkdir(parents=True)
        path.write_text(text)

    async def ingest() -> None:
        for path in (claude, chat):
            [job] = await queue.enqueue_ingest(stack.redis, [str(path)], fresh=True)
            await queue.wait_for(job, 300)

    await ingest()
    fresh, kinds = await _graph(store), await _kinds(store)
    verbs = Counter((e[0], json.loads(e[4]).get("outcome")) for e in fresh[0])
    assert verbs == {
        ("denied", None): 2,  # the command touch and the file it would have made
        ("reads", "ok"): 1,  # the folder grep_search searched
        ("executes", "error"): 1,  # pytest, exit 127
        ("triggered", None): 1,
    }

    # The same transcripts as the code before issue 33 read them (its rules, in the parsers).
    entities = [key_of(e["id"]) for e in (await store.dump())["entity"]]
    await store.delete_rows("entity", entities)  # and every edge pointing at them
    await store.query("DELETE transcript_cursor;")
    with monkeypatch.context() as old:
        old.setattr(claude_code, "denial_reason", lambda text, decision=None: None)
        old.setattr(gemini, "_SEARCH_TOOLS", frozenset({"glob"}))
        old.setattr(gemini, "_exit_code", lambda output: None)
        await ingest()
    before = await _graph(store)
    assert Counter((e[0], json.loads(e[4]).get("outcome")) for e in before[0]) == {
        ("executes", "error"): 1,  # touch, as a failure
        ("modifies", "error"): 1,  # made.txt: `history` listed it as written
        ("triggered", None): 1,
        ("executes", "ok"): 2,  # grep_search as a program, and pytest
    }
    assert await _kinds(store) != kinds

    await store.query(f"DELETE schema_version:{STEP_26};")
    assert await migration.migrate(store, stack.settings, None) == [STEP_26]
    assert (await _graph(store), await _kinds(store)) == (fresh, kinds)
