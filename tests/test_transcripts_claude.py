"""Claude Code parser on every real fixture, plus the layouts and damage the fixtures lack.

Expected numbers were counted from the files with jq (tool_use names, is_error results and
their texts, Edit/MultiEdit/Write targets joined with their results), independently of the
parser.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import (
    BIG_LINE,
    CLAUDE_FILES,
    CODERABBIT_SESSION,
    CODERABBIT_SUBAGENT,
    S37,
    SMALL,
    SUMMARY_ONLY,
)
from workers.stages.transcripts import ParserState, detect_agent, parser_for
from workers.stages.transcripts import claude_code as cc
from workers.stages.transcripts.events import (
    Action,
    Denied,
    Event,
    Goal,
    Memory,
    Source,
    Spawned,
    Summary,
    Triggered,
)
from workers.stages.transcripts.lines import split_lines
from workers.stages.transcripts.state import ParseResult

CB2E = "cb2e607c-c758-415a-8b45-c49e4631906a"
CCLOG = "/Users/dain/workspace/claude-code-log"
HELPER = "/Users/dain/workspace/coderabbit-review-helper"


def parse_bytes(data: bytes, path: str, projects: Any = ()) -> ParseResult:
    lines, _ = split_lines(data, 0)
    return cc.parse(lines, None, Source.of(path, projects))


def parse_file(path: Path, projects: Any = ()) -> ParseResult:
    return parse_bytes(path.read_bytes(), str(path), projects)


def of(result: ParseResult, cls: type) -> list[Any]:
    return [e for e in result.events if isinstance(e, cls)]


def kinds(result: ParseResult) -> dict[str, int]:
    return dict(Counter(m.kind for m in of(result, Memory)))


def edges(
    result: ParseResult, verb: str, outcome: str | None = None, via: str = "tool"
) -> Counter[str]:
    """Verb edges by target; ``via="shell"`` for those read off shell command lines."""
    return Counter(
        a.entity.key
        for a in of(result, Action)
        if a.verb == verb and (outcome is None or a.outcome == outcome) and a.via == via
    )


def denied_calls(result: ParseResult) -> set[str]:
    return {d.memory_id for d in of(result, Denied)}


# --- every fixture -----------------------------------------------------------------------------

EXPECTED_MEMORIES = {
    # user prompts / assistant text blocks / tool calls / results, counted with jq
    BIG_LINE: {"user_prompt": 4, "assistant_message": 9, "tool_call": 14, "tool_result": 14},
    S37: {
        "user_prompt": 6,
        "assistant_message": 76,
        "tool_call": 101,
        "tool_result": 80,  # 101 results: 2 empty, 19 failures
        "error": 19,
    },
    SUMMARY_ONLY: {},
    CODERABBIT_SESSION: {
        "user_prompt": 5,
        "assistant_message": 44,
        "tool_call": 76,
        "tool_result": 71,
        "error": 5,
    },
    CODERABBIT_SUBAGENT: {
        "user_prompt": 1,
        "assistant_message": 4,
        "tool_call": 14,
        "tool_result": 14,
    },
    SMALL: {"user_prompt": 1, "assistant_message": 3, "tool_call": 9, "tool_result": 9},
}

EXPECTED_GOALS = {
    BIG_LINE: "Hey Claude, I'd like your help with refactoring the timeline filtering so that we "
    "hide the group instead of all items",
    S37: "Hey Claude, please have a look at the git diff of claude_code_log/renderer.py and "
    "explain what does _get_enhanced_session_navigation and _generate_html_with_navigation do",
    CODERABBIT_SESSION: "How can I make this possible to install as a library with `uv` so I "
    "can run from any directory?",
    CODERABBIT_SUBAGENT: "I need to understand the current project structure to help make it "
    "installable as a library with uv. Please:",
    SMALL: "Search if claude -p can make use of WebSearch and Task tool. Especially the Task "
    "with Haiku model. Summarize the findings.",
}


@pytest.mark.parametrize("path", CLAUDE_FILES, ids=lambda p: p.name[:8])
def test_fixture_memories_goal_and_cleanliness(path: Path) -> None:
    result = parse_file(path)
    assert kinds(result) == EXPECTED_MEMORIES[path]
    goals = of(result, Goal)
    if path in EXPECTED_GOALS:
        assert len(goals) == 1
        assert goals[0].intent.startswith(EXPECTED_GOALS[path])
    else:
        assert goals == []
    assert result.skipped == ()
    assert result.pending == ()  # every call in these files got its result
    ids = [m.id for m in of(result, Memory)]
    assert len(ids) == len(set(ids))
    assert [m.seq for m in of(result, Memory)] == list(range(len(ids)))


@pytest.mark.parametrize("path", CLAUDE_FILES, ids=lambda p: p.name[:8])
def test_detected_as_claude_code(path: Path) -> None:
    head = path.read_bytes()[:4096]
    assert detect_agent(head, str(path)) == "claude-code"
    assert parser_for("claude-code") is cc


def test_37f83ec9_edges() -> None:
    r = parse_file(S37)
    assert edges(r, "MODIFIES", "ok") == {
        f"{CCLOG}/claude_code_log/renderer.py": 6,
        f"{CCLOG}/test/test_combined_transcript_link.py": 15,
        f"{CCLOG}/claude_code_log/templates/transcript.html": 5,
        f"{CCLOG}/claude_code_log/templates/components/session_nav_styles.css": 1,
    }
    # "Found 2 matches of the string to replace" ×3: failed edits, not modifications
    assert edges(r, "MODIFIES", "error") == {f"{CCLOG}/test/test_combined_transcript_link.py": 3}
    assert sum(edges(r, "READS").values()) == 24  # Read 15 + Grep 8 + LS 1
    assert set(edges(r, "EXECUTES")) == {"git", "grep", "pytest", "python", "ruff", "find"}
    assert len(of(r, Triggered)) == 19  # 21 is_error results minus 2 user rejections
    assert len(denied_calls(r)) == 2
    assert {d.reason for d in of(r, Denied)} == {"user_rejected"}
    summaries = [s.text for s in of(r, Summary)]
    assert len(summaries) == 6
    assert summaries[0] == "Centralizing Project Name Logic Across Codebase"
    (session,) = r.sessions
    assert session.session_id == "37f83ec9-f2ea-42a9-925e-0d5c105cb6e8"
    assert session.cwd == CCLOG  # the start directory, though later records are in test/
    assert (session.version, session.started_at) == ("1.0.51", "2025-07-14T22:59:30.699Z")


def test_37f83ec9_pipeline_that_hid_a_failure_is_not_called_an_error() -> None:
    # `git diff HEAD~1 … | grep …` printed "fatal:" but exited 1 via grep: Claude Code says
    # is_error false ("No matches found"). We keep what we can tell: not a reported failure,
    # and no exit code claimed.
    r = parse_file(S37)
    pipe = [
        a for a in of(r, Action) if a.detail.startswith("git diff HEAD~1") and a.verb == "EXECUTES"
    ]
    assert {(a.entity.key, a.outcome, a.exit_code) for a in pipe} == {
        ("git", "ok", None),
        ("grep", "ok", None),
    }


def test_37f83ec9_error_signatures_repeat() -> None:
    r = parse_file(S37)
    by_key = Counter(t.error.key for t in of(r, Triggered))
    names = {t.error.key: t.error.name for t in of(r, Triggered)}
    # the same "Found 2 matches" failure three times is one error entity
    found = [k for k, n in names.items() if n.startswith("error: Found <n> matches")]
    assert len(found) == 1 and by_key[found[0]] == 3
    assert any(n.startswith("ImportError: cannot import name") for n in names.values())


def test_0d3a8e6f_one_megabyte_image_line_and_rejections() -> None:
    r = parse_file(BIG_LINE)
    (with_image,) = [m for m in of(r, Memory) if m.media]
    assert with_image.kind == "user_prompt"
    assert with_image.content.startswith("I think the library is setting it")
    assert [(x.media_type, x.size) for x in with_image.media] == [("image/png", 1046384 * 3 // 4)]
    assert len(with_image.content) < 1000  # the base64 data is gone
    # 5 MultiEdit calls: 3 rejected by the user (DENIED, no MODIFIES), 2 applied
    assert len(denied_calls(r)) == 3
    assert edges(r, "MODIFIES") == {
        f"{CCLOG}/claude_code_log/templates/components/timeline.html": 2
    }
    assert of(r, Triggered) == []
    # the /doctor, /status, /mcp UI commands and their output are not prompts
    assert not any(m.content.startswith("/") for m in of(r, Memory) if m.kind == "user_prompt")


def test_4e27c414_summary_only() -> None:
    r = parse_file(SUMMARY_ONLY)
    assert r.sessions == () and of(r, Goal) == [] and r.skipped == ()
    (summary,) = of(r, Summary)
    assert summary.text == "TUI Cache Handling: Empty State Fix"
    assert summary.leaf_uuid


def test_cb2e607c_and_its_flat_subagent_file_are_linked() -> None:
    parent = parse_file(CODERABBIT_SESSION)
    child = parse_file(CODERABBIT_SUBAGENT)
    (spawned,) = of(parent, Spawned)
    (child_session,) = child.sessions
    assert spawned.child_session_id == child_session.session_id == f"{CB2E}:agent-ea02459f"
    assert spawned.agent_id == "ea02459f"
    assert (spawned.agent_type, spawned.description) == (
        "Plan",
        "Explore project structure for packaging",
    )
    task_call = next(m for m in of(parent, Memory) if m.id == spawned.memory_id)
    assert task_call.kind == "tool_call" and task_call.tool == "task"
    assert child_session.parent_session_id == CB2E
    assert child_session.external_id == CB2E
    assert child_session.agent_id == "ea02459f"
    # the subagent's work: 7 Globs (of its cwd) + 6 Reads, one `ls`
    assert sum(edges(child, "READS", "ok").values()) == 13
    assert edges(child, "READS")[HELPER] == 7
    assert edges(child, "EXECUTES") == {"ls": 1}


def test_subagent_meta_path() -> None:
    path = f"/h/.claude/projects/-w/{CB2E}/subagents/agent-a1b2c3d4e5f607182.jsonl"
    assert cc.subagent_meta_path(path) == path.replace(".jsonl", ".meta.json")
    assert cc.subagent_meta_path(str(CODERABBIT_SUBAGENT)) is None  # the flat 2.0 layout has none


def test_state_keeps_no_dangling_links() -> None:
    r = parse_file(CODERABBIT_SESSION)
    assert r.state.pending == {} and r.state.links == {}


def test_cb2e607c_edges_errors_and_denials() -> None:
    r = parse_file(CODERABBIT_SESSION)
    assert edges(r, "MODIFIES", "ok") == {
        f"{HELPER}/README.md": 8,
        f"{HELPER}/extract-coderabbit-feedback.py": 8,
        f"{HELPER}/pyproject.toml": 5,
    }
    # "File has not been read yet" → the edit failed
    assert edges(r, "MODIFIES", "error") == {f"{HELPER}/README.md": 1}
    assert edges(r, "READS") == {
        f"{HELPER}/README.md": 5,
        f"{HELPER}/extract-coderabbit-feedback.py": 6,  # 4 Reads + 2 Greps
        f"{HELPER}/pyproject.toml": 1,
    }
    commands = set(edges(r, "EXECUTES")) - {"todowrite", "exitplanmode", "askuserquestion"}
    assert commands == {"uv", "coderabbit-extract", "gh", "grep", "head", "python3", "rm"}
    triggered = of(r, Triggered)
    assert len(triggered) == 5
    assert sorted(t.exit_code for t in triggered if t.exit_code is not None) == [1, 1, 1]
    assert {t.error.name.split(":")[0] for t in triggered} >= {"tool_use_error", "ValueError"}
    assert len(denied_calls(r)) == 2  # ExitPlanMode and a Bash call rejected by the user


def test_cb2e607c_background_bash_is_settled_by_bash_output() -> None:
    r = parse_file(CODERABBIT_SESSION)
    background = [a for a in of(r, Action) if "uv cache clean" in a.detail]
    assert background and all(a.outcome == "ok" and a.exit_code == 0 for a in background)


def test_2b4ed4c0_permission_denials() -> None:
    r = parse_file(SMALL)
    assert len(denied_calls(r)) == 6
    assert {d.reason for d in of(r, Denied)} == {"permission_denied"}
    denied_targets = {(d.entity.kind, d.entity.key) for d in of(r, Denied)}
    assert ("tool", "websearch") in denied_targets
    # Read ~/.claude/CLAUDE.md: whose home that is, nothing here tells (cwd /src/…), so the
    # file keeps its "~/" key: the writer's home (issue 33: before, it named no file)
    assert ("file", "~/.claude/CLAUDE.md") in denied_targets
    assert ("tool", "read") not in denied_targets
    assert of(r, Triggered) == []  # denials are not failures
    assert edges(r, "EXECUTES") == {"claude": 2, "head": 1, "grep": 1}
    assert edges(r, "READS") == {"/src/experiments/claude_p": 1}  # the Glob


def test_project_relative_keys() -> None:
    r = parse_file(CODERABBIT_SESSION, projects=[("crh", HELPER)])
    assert edges(r, "MODIFIES", "ok")["crh:README.md"] == 8
    assert r.sessions[0].project_id == "crh"


# --- incremental parsing -----------------------------------------------------------------------


def parse_in_batches(data: bytes, path: str, rng: random.Random) -> tuple[list[Event], dict]:
    """Feed random byte windows; only complete lines go in, state and offset carry over."""
    state: dict | None = None
    offset, size = 0, rng.randint(1, 150_000)
    events: list[Event] = []
    sessions: dict = {}
    while offset < len(data):
        end = min(len(data), offset + size)
        lines, next_offset = split_lines(data[offset:end], offset)
        if not lines:
            size *= 2  # a line longer than the window (the 1 MB one): read more
            continue
        result = cc.parse(
            lines,
            ParserState.from_json(json.loads(json.dumps(state))) if state else None,
            Source(path),
        )
        events.extend(result.events)
        sessions.update({s.session_id: s for s in result.sessions})
        state = result.state.to_json()
        offset, size = next_offset, rng.randint(1, 150_000)
    return events, sessions


@pytest.mark.parametrize("path", CLAUDE_FILES, ids=lambda p: p.name[:8])
def test_random_byte_batches_give_the_same_events(path: Path) -> None:
    data = path.read_bytes()
    whole = parse_bytes(data, str(path))
    for seed in range(3):
        events, sessions = parse_in_batches(data, str(path), random.Random(seed))
        assert events == list(whole.events)
        assert sessions == {s.session_id: s for s in whole.sessions}


def test_pending_call_crosses_a_batch_boundary() -> None:
    data = SMALL.read_bytes()
    lines, _ = split_lines(data, 0)
    cut = 7  # after the assistant record holding the second tool call (a Bash)
    first = cc.parse(lines[:cut], None, Source(str(SMALL)))
    assert [a.outcome for a in first.pending] == ["pending", "pending"]  # claude | head
    second = cc.parse(lines[cut:], first.state, Source(str(SMALL)))
    assert second.pending == ()
    assert edges(second, "EXECUTES") == {"claude": 2, "head": 1, "grep": 1}


def test_reparsing_from_zero_is_identical_and_state_is_not_mutated() -> None:
    data = S37.read_bytes()
    lines, _ = split_lines(data, 0)
    state = cc.new_state()
    a = cc.parse(lines, state, Source(str(S37)))
    b = cc.parse(lines, state, Source(str(S37)))
    assert a.events == b.events and state.seq == 0


# --- damaged lines -----------------------------------------------------------------------------


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _line(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec).encode()


def test_bad_lines_are_skipped_with_reasons_and_the_rest_still_parses() -> None:
    recs = _records(SMALL)
    clean = parse_file(SMALL)
    prompt = next(
        r for r in recs if r["type"] == "user" and isinstance(r["message"]["content"], str)
    )

    def extra_prompt(uuid: str, text: str) -> dict[str, Any]:
        return {**prompt, "uuid": uuid, "message": {"role": "user", "content": text}}

    unknown_tool = {
        **next(r for r in recs if r["type"] == "assistant"),
        "uuid": "u-tool",
        "message": {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_x1",
                    "name": "FrobnicateWidget",
                    "input": {"level": 3},
                }
            ],
        },
    }
    tool_result = {
        **prompt,
        "uuid": "u-result",
        "message": {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_x1", "content": "frobnicated"}
            ],
        },
    }
    stub = b'{"parentUuid":"x","type":"user","message":{"content":"truncated mid-wri'
    bad = [
        b"\x00" * 40 + _line(extra_prompt("u-nul", "after NULs")),
        _line(extra_prompt("u-glued1", "glued one")) + _line(extra_prompt("u-glued2", "two")),
        stub + _line(extra_prompt("u-stub", "after a stub")),
        _line(extra_prompt("u-utf8", "bad bytes PLACEHOLDER")).replace(b"PLACEHOLDER", b"\xff\xfe"),
        _line(extra_prompt("u-surrogate", "SURR")).replace(b"SURR", b"cut emoji \\ud83d"),
        _line({"type": "brand-new-record", "sessionId": "s", "foo": 1}),
        _line(unknown_tool),
        _line(tool_result),
        b"complete garbage, not json",
        b"\x00\x00\x00",
        b"[1, 2]",
    ]
    lines = [json.dumps(r).encode() for r in recs]
    damaged = b"\n".join(lines[:5] + bad + lines[5:]) + b"\n"
    r = parse_bytes(damaged, str(SMALL))

    reasons = [s.reason for s in r.skipped]
    # unknown record types are reported once, after the batch (tests/test_shell_and_records.py)
    assert reasons == [
        "corrupt fragment dropped",
        "invalid JSON",
        "only NUL bytes",
        "not a JSON object",
        "unknown record type 'brand-new-record': 1 lines in this batch, skipped",
    ]
    assert {e.id for e in clean.events} <= {e.id for e in r.events}
    prompts = {m.content for m in of(r, Memory) if m.kind == "user_prompt"}
    assert {"after NULs", "glued one", "two", "after a stub"} <= prompts
    assert "bad bytes \ufffd\ufffd" in prompts and "cut emoji \ufffd" in prompts
    for m in of(r, Memory):
        m.content.encode("utf-8")
    # an unknown tool still yields a call and a generic tool edge once its result is in
    assert edges(r, "EXECUTES")["frobnicatewidget"] == 1


# --- secrets -----------------------------------------------------------------------------------

SECRET_VALUES = [
    "sk-ant-api03-AbCdEf0123456789AbCdEf0123456789-xyzXYZ",
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "AKIAIOSFODNN7EXAMPLE",
    "hunter2hunter2",
    "s3cretPassw0rd",
    "abcdef0123456789abcdef0123",
    "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
]
PLANTED = (
    "use key sk-ant-api03-AbCdEf0123456789AbCdEf0123456789-xyzXYZ and "
    "ghp_0123456789abcdefghijABCDEFGHIJ012345\nDB_PASSWORD=hunter2hunter2\n"
    "aws AKIAIOSFODNN7EXAMPLE; jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcDEF123"
)


def all_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if dataclasses.is_dataclass(value):
        return [s for f in dataclasses.fields(value) for s in all_strings(getattr(value, f.name))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in all_strings(v)]
    return []


def test_planted_secrets_never_reach_an_event() -> None:
    recs = _records(SMALL)
    for rec in recs:
        content = rec.get("message", {}).get("content") if rec.get("message") else None
        if rec["type"] == "user" and isinstance(content, str):
            rec["message"]["content"] = content + "\n" + PLANTED
        elif rec["type"] == "assistant":
            for block in content:
                if block.get("type") == "tool_use" and block["name"] == "Bash":
                    block["input"]["command"] = (
                        "API_KEY=hunter2hunter2 curl -H 'Authorization: Bearer "
                        "abcdef0123456789abcdef0123' https://admin:s3cretPassw0rd@db.example.com"
                    )
                elif block.get("type") == "text":
                    block["text"] += "\n" + PLANTED
        elif rec["type"] == "user" and isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result":
                    block["content"] = f"{block['content']}\n{PLANTED}"
                    block["is_error"] = True  # also exercises error signatures and Triggered
    data = b"\n".join(json.dumps(r).encode() for r in recs) + b"\n"
    r = parse_bytes(data, str(SMALL))
    texts = all_strings(list(r.events)) + all_strings(list(r.sessions)) + all_strings(r.pending)
    assert any("[REDACTED:" in t for t in texts)
    for secret in SECRET_VALUES:
        assert not any(secret in t for t in texts), secret


# --- layouts and records the fixtures do not have ----------------------------------------------

SID = "11111111-2222-4333-8444-555555555555"


def rec(kind: str, uuid: str, parent: str | None, content: Any, **extra: Any) -> dict[str, Any]:
    role = "assistant" if kind == "assistant" else "user"
    base = {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SID,
        "cwd": "/w/proj",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "isSidechain": False,
        "message": {"role": role, "content": content},
    }
    return {**base, **extra}


def jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def tool_use(call_id: str, name: str, **inp: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": call_id, "name": name, "input": inp}]


def tool_result(call_id: str, content: str, is_error: bool = False) -> list[dict[str, Any]]:
    return [
        {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}
    ]


def test_subagents_directory_layout_with_meta_json() -> None:
    agent_id = "a1b2c3d4e5f60718a"
    parent = jsonl(
        rec("user", "p1", None, "Refactor the parser"),
        rec(
            "assistant",
            "p2",
            "p1",
            tool_use(
                "toolu_a",
                "Agent",
                subagent_type="Explore",
                description="Look around",
                prompt="Find the parser",
            ),
        ),
        rec(
            "user",
            "p3",
            "p2",
            tool_result("toolu_a", "done"),
            toolUseResult={"agentId": agent_id, "status": "completed"},
        ),
    )
    path = f"/h/.claude/projects/-w-proj/{SID}/subagents/agent-{agent_id}.jsonl"
    child = jsonl(
        rec(
            "user",
            "c1",
            None,
            "Find the parser",
            isSidechain=True,
            agentId=agent_id,
            cwd="/w/proj/.claude/worktrees/agent-x",
        ),
        rec(
            "assistant",
            "c2",
            "c1",
            tool_use("toolu_b", "Read", file_path="src/parser.py"),
            isSidechain=True,
            agentId=agent_id,
            cwd="/w/proj/.claude/worktrees/agent-x",
        ),
        rec(
            "user",
            "c3",
            "c2",
            tool_result("toolu_b", "code"),
            isSidechain=True,
            agentId=agent_id,
            cwd="/w/proj/.claude/worktrees/agent-x",
        ),
    )
    p = parse_bytes(parent, f"/h/.claude/projects/-w-proj/{SID}.jsonl")
    meta = {"agentType": "Explore", "description": "Look around"}
    lines, _ = split_lines(child, 0)
    c = cc.parse(lines, None, Source.of(path, [("proj", "/w/proj")], subagent_meta=meta))
    (spawned,) = of(p, Spawned)
    (session,) = c.sessions
    assert spawned.child_session_id == session.session_id == f"{SID}:agent-{agent_id}"
    assert (session.agent_type, session.description) == ("Explore", "Look around")
    assert session.parent_session_id == SID
    assert of(c, Goal)[0].intent == "Find the parser"
    # the worktree is inside the project root here, so the key stays project-relative
    assert edges(c, "READS") == {"proj:.claude/worktrees/agent-x/src/parser.py": 1}


def test_inline_sidechain_becomes_a_linked_session() -> None:
    data = jsonl(
        rec("user", "m1", None, "Audit the tests"),
        rec(
            "assistant",
            "m2",
            "m1",
            tool_use("toolu_t", "Task", description="audit", prompt="List every test file"),
        ),
        rec("user", "s1", None, "List every test file", isSidechain=True),
        rec(
            "assistant",
            "s2",
            "s1",
            tool_use("toolu_g", "Glob", pattern="tests/*.py"),
            isSidechain=True,
        ),
        rec("user", "s3", "s2", tool_result("toolu_g", "tests/a.py"), isSidechain=True),
        rec("assistant", "s4", "s3", [{"type": "text", "text": "Found one"}], isSidechain=True),
        rec("user", "m3", "m2", tool_result("toolu_t", "Found one")),
    )
    r = parse_bytes(data, f"/h/.claude/projects/-w-proj/{SID}.jsonl")
    child = f"{SID}:sidechain-s1"
    (spawned,) = of(r, Spawned)
    assert spawned.child_session_id == child and spawned.agent_id is None
    goals = {g.session_id: g.intent for g in of(r, Goal)}
    assert goals == {SID: "Audit the tests", child: "List every test file"}
    assert {m.session_id for m in of(r, Memory) if m.content == "Found one"} == {SID, child}
    assert {s.session_id: s.parent_session_id for s in r.sessions} == {SID: None, child: SID}


def test_compaction_summary_is_a_summary_not_a_goal() -> None:
    data = jsonl(
        {
            "type": "system",
            "subtype": "compact_boundary",
            "parentUuid": None,
            "uuid": "b",
            "sessionId": SID,
            "content": "Conversation compacted",
            "compactMetadata": {"trigger": "auto", "preTokens": 150000},
        },
        rec(
            "user",
            "c1",
            None,
            "This session is being continued from a previous conversation that ran out of context.",
            isCompactSummary=True,
            isVisibleInTranscriptOnly=True,
        ),
        rec(
            "user",
            "c2",
            "c1",
            "<command-name>/review</command-name>\n<command-message>review"
            "</command-message>\n<command-args>src/app.py</command-args>",
        ),
    )
    r = parse_bytes(data, f"/h/.claude/projects/-w-proj/{SID}.jsonl")
    assert kinds(r) == {"summary": 1, "user_prompt": 1}
    assert [g.intent for g in of(r, Goal)] == ["/review src/app.py"]  # slash command unwrapped


def test_warmup_subagent_is_flagged_and_has_no_goal() -> None:
    data = jsonl(rec("user", "w1", None, "Warmup", isSidechain=True, agentId="0abc1234"))
    r = parse_bytes(data, "/h/.claude/projects/-w/agent-0abc1234.jsonl")
    assert of(r, Goal) == [] and r.sessions[0].warmup


def test_record_without_session_id_is_skipped() -> None:
    data = jsonl({"type": "user", "uuid": "x", "message": {"role": "user", "content": "hi"}})
    r = parse_bytes(data, "x.jsonl")
    assert r.events == () and r.skipped[0].reason == "user record without sessionId"


# --- issue 33 ------------------------------------------------------------------------------------

# What Claude Code 2.1.330 (the pinned client, run against tests/clients.py's scripted server
# with no allowed tools) wrote for two Bash calls it refused: the result text, the
# toolUseResult string and the permissionDecision beside it.
NEEDS_APPROVAL = (
    "touch in '/w/proj/made.txt' needs approval. The path is inside the working directories "
    "for this session ('/w/proj'), and Claude Code asks before a shell command creates, "
    "changes or removes files there."
)
PARTS_NEED_APPROVAL = (
    "This Bash command contains multiple operations. The following parts require approval: "
    "touch made.txt, echo hi"
)


def refused(call_id: str, text: str, uuid: str, parent: str) -> dict[str, Any]:
    return rec(
        "user",
        uuid,
        parent,
        tool_result(call_id, text, is_error=True),
        toolUseResult=f"Error: {text}",
        toolDenialKind="user-rejected",
        permissionDecision={"decision": "reject", "source": "config", "reasonCode": "unknown"},
    )


def test_a_bash_command_refused_for_approval_is_denied_not_a_failed_write() -> None:
    data = jsonl(
        rec("user", "u1", None, "make a file"),
        rec("assistant", "a1", "u1", tool_use("t1", "Bash", command="touch made.txt")),
        refused("t1", NEEDS_APPROVAL, "r1", "a1"),
        rec("assistant", "a2", "r1", tool_use("t2", "Bash", command="touch made.txt && echo hi")),
        refused("t2", PARTS_NEED_APPROVAL, "r2", "a2"),
    )
    r = parse_bytes(data, "/h/.claude/projects/-w-proj/s.jsonl")
    assert of(r, Triggered) == [] and of(r, Action) == []
    assert sorted((d.entity.kind, d.entity.key, d.reason) for d in of(r, Denied)) == [
        ("command", "echo", "permission_denied"),
        ("command", "touch", "permission_denied"),
        ("command", "touch", "permission_denied"),
        ("file", "/w/proj/made.txt", "permission_denied"),
        ("file", "/w/proj/made.txt", "permission_denied"),
    ]
    assert kinds(r) == {"user_prompt": 1, "tool_call": 2, "tool_result": 2}


def test_the_mode_record_of_a_resumed_session_is_known() -> None:
    # 2.1.330 appends it when a session is resumed (`claude -p … --resume <id>`).
    data = jsonl(
        rec("user", "u1", None, "and now?"), {"type": "mode", "mode": "normal", "sessionId": SID}
    )
    r = parse_bytes(data, "/h/.claude/projects/-w-proj/s.jsonl")
    assert r.skipped == ()
    assert [g.intent for g in of(r, Goal)] == ["and now?"]


def test_home_paths_in_glob_and_read_make_edges() -> None:
    data = jsonl(
        rec("user", "u1", None, "what do my notes say"),
        rec("assistant", "a1", "u1", tool_use("t1", "Glob", pattern="~/notes/**/*.md")),
        rec("user", "r1", "a1", tool_result("t1", "/Users/ann/notes/a.md")),
        rec("assistant", "a2", "r1", tool_use("t2", "Read", file_path="~/notes/a.md")),
        rec("user", "r2", "a2", tool_result("t2", "1\thello")),
    )
    # the transcript lies under the writer's home: ~ is theirs
    r = parse_bytes(data, "/Users/ann/.claude/projects/-w-proj/s.jsonl")
    assert edges(r, "READS", "ok") == {"/Users/ann/notes": 1, "/Users/ann/notes/a.md": 1}
    # a copy elsewhere tells no home: the keys keep the ~
    r = parse_bytes(data, "fixtures/s.jsonl")
    assert edges(r, "READS", "ok") == {"~/notes": 1, "~/notes/a.md": 1}


def test_a_relative_file_path_under_a_relative_cwd_is_not_doubled() -> None:
    # An anonymised transcript: the same leading folders stripped off the cwd and the paths.
    cwd = "work/shop"
    data = jsonl(
        rec("user", "u1", None, "fix the cart", cwd=cwd),
        rec(
            "assistant", "a1", "u1", tool_use("t1", "Read", file_path="work/shop/cart.py"), cwd=cwd
        ),
        rec("user", "r1", "a1", tool_result("t1", "1\tx"), cwd=cwd),
        rec(
            "assistant", "a2", "r1", tool_use("t2", "Edit", file_path="work/shop/cart.py"), cwd=cwd
        ),
        rec("user", "r2", "a2", tool_result("t2", "updated"), cwd=cwd),
    )
    r = parse_bytes(data, "fixtures/s.jsonl")
    assert edges(r, "READS") == {"work/shop/cart.py": 1}
    assert edges(r, "MODIFIES") == {"work/shop/cart.py": 1}
