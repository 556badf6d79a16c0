"""Codex rollout parser on the real fixture, both line formats, and damaged input.

Expected numbers were counted from the file with jq/python (exec_command commands split on
pipes and chains, exit codes in exec_command_end and in outputs, parsed_cmd entries,
patch_apply_end changes, non-empty outputs), independently of the parser.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from typing import Any

import pytest

from tests.fixtures import CODEX_ROLLOUT
from workers.stages.transcripts import ParserState, detect_agent, parser_for
from workers.stages.transcripts import codex as cx
from workers.stages.transcripts.events import Action, Denied, Event, Goal, Memory, Source, Triggered
from workers.stages.transcripts.lines import split_lines
from workers.stages.transcripts.state import ParseResult

SESSION = "019e1625-789d-76c0-80ab-3724b5ddb799"
REPO = "/Users/Sample_User/repos/codemie-ai/codemie-code"
PROJECTS = [("codemie", REPO)]


def parse_bytes(
    data: bytes, path: str = str(CODEX_ROLLOUT), projects: Any = PROJECTS
) -> ParseResult:
    lines, _ = split_lines(data, 0)
    return cx.parse(lines, None, Source.of(path, projects))


def of(result: ParseResult, cls: type) -> list[Any]:
    return [e for e in result.events if isinstance(e, cls)]


def edges(
    result: ParseResult, verb: str, outcome: str | None = None, via: str = "tool"
) -> Counter[str]:
    """Verb edges by target; ``via="shell"`` for those read off shell command lines."""
    return Counter(
        a.entity.key
        for a in of(result, Action)
        if a.verb == verb and (outcome is None or a.outcome == outcome) and a.via == via
    )


@pytest.fixture(scope="module")
def rollout() -> ParseResult:
    return parse_bytes(CODEX_ROLLOUT.read_bytes())


# --- the real rollout --------------------------------------------------------------------------


def test_detected_as_codex() -> None:
    assert detect_agent(CODEX_ROLLOUT.read_bytes()[:4096], str(CODEX_ROLLOUT)) == "codex"
    assert parser_for("codex") is cx
    assert detect_agent(b"", "/h/.codex/sessions/2026/01/01/rollout-x.jsonl") == "codex"
    assert detect_agent(b"", "/h/.claude/projects/-w/abc.jsonl") == "claude-code"
    assert detect_agent(b"hello", "/tmp/notes.txt") is None


def test_session_and_goal(rollout: ParseResult) -> None:
    (session,) = rollout.sessions
    assert session.session_id == session.external_id == SESSION
    assert session.cwd == REPO and session.project_id == "codemie"
    assert (session.git_branch, session.version) == ("feat/codex-agent-plugin", "0.125.0")
    assert session.started_at == "2026-05-11T08:26:55.042Z"
    # the first *user_message* event, not the injected AGENTS.md response item
    assert [g.intent for g in of(rollout, Goal)] == ["show tools"]
    prompts = [m.content for m in of(rollout, Memory) if m.kind == "user_prompt"]
    assert prompts == ["show tools", "let's update the defailt context compart to 90 in env var"]
    assert not any("AGENTS.md instructions" in m.content for m in of(rollout, Memory))


def test_memories(rollout: ParseResult) -> None:
    assert Counter(m.kind for m in of(rollout, Memory)) == {
        "user_prompt": 2,
        "assistant_message": 13,
        "tool_call": 52,  # exec_command 43, apply_patch 3, web_search 3, update_plan 2, stdin 1
        "tool_result": 48,  # 50 non-empty outputs of 102 ...
        "error": 2,  # ... 2 of them from failed commands
    }
    assert rollout.skipped == () and rollout.pending == ()


def test_executes_one_edge_per_program(rollout: ParseResult) -> None:
    assert edges(rollout, "EXECUTES") == {
        "sed": 16,
        "rg": 18,
        "git": 5,
        "npm": 4,
        "nl": 3,
        "strings": 2,
        "cat": 1,
        "find": 1,
        "update_plan": 2,
        "web_search": 3,
    }
    # exit 2 (rg on a missing dir) and the first, failing `npm test` run
    assert edges(rollout, "EXECUTES", "error") == {"rg": 1, "npm": 1}


def test_grep_no_match_exit_is_not_a_failure(rollout: ParseResult) -> None:
    no_match = [a for a in of(rollout, Action) if a.verb == "EXECUTES" and a.exit_code == 1]
    assert {(a.entity.key, a.outcome) for a in no_match} == {("rg", "ok"), ("npm", "error")}


def test_modifies_from_patch_apply_end(rollout: ParseResult) -> None:
    assert edges(rollout, "MODIFIES", "ok") == {
        "codemie:src/agents/plugins/__tests__/codemie-code-reasoning.test.ts": 1,
        "codemie:src/agents/plugins/codemie-code.plugin.ts": 1,
        "codemie:src/agents/plugins/opencode/opencode.plugin.ts": 1,
    }
    assert all(a.detail == "update" for a in of(rollout, Action) if a.verb == "MODIFIES")


def test_reads_from_shell_commands(rollout: ParseResult) -> None:
    # Every path operand of sed/nl/cat/strings/rg/find/`rg --files` in the 43 commands, read
    # by hand; tests/test_fixture_readings.py holds the full list and the parsed_cmd check.
    reads = edges(rollout, "READS", via="shell")
    assert sum(reads.values()) == 66 and len(reads) == 31
    assert reads["codemie:src/agents/plugins/codemie-code.plugin.ts"] == 6
    assert reads["codemie:src/agents/plugins/opencode"] == 3
    assert reads["codemie:."] == 2  # `rg -n … .` and a bare `rg --files -g …`
    assert edges(rollout, "READS", "error", via="shell") == {
        "codemie:node_modules/opencode-ai": 1,
        "codemie:node_modules/opencode": 1,
    }
    outside = [k for k in reads if not k.startswith("codemie:")]
    assert len(outside) == 3 and all(k.endswith("/SKILL.md") for k in outside)
    assert edges(rollout, "READS") == {}  # Codex has no file-reading tool of its own


def test_triggered(rollout: ParseResult) -> None:
    triggered = of(rollout, Triggered)
    assert sorted(t.exit_code for t in triggered) == [1, 2]
    names = sorted(t.error.name for t in triggered)
    assert names[0].startswith("AssertionError: expected undefined to deeply equal")
    assert names[1] == "not found: rg: <path>: No such file or directory (os error <n>)"
    assert of(rollout, Denied) == []


def test_poll_output_belongs_to_the_exec_call(rollout: ParseResult) -> None:
    (poll_output,) = [
        m for m in of(rollout, Memory) if m.source_id == "call_QazIeAavKevvIILVQkrDdKKT"
    ]
    assert poll_output.call_id == "call_Y2p6KmqwoTtpi6atpDPuxC5M"  # the exec_command
    assert poll_output.content.startswith("---\nname: using-superpowers")
    assert "Chunk ID" not in poll_output.content  # the unified-exec header is gone


def parse_in_batches(data: bytes, rng: random.Random) -> list[Event]:
    state: dict | None = None
    offset, size, events = 0, rng.randint(1, 60_000), []
    while offset < len(data):
        lines, next_offset = split_lines(data[offset : offset + size], offset)
        if not lines:
            size *= 2
            continue
        restored = ParserState.from_json(json.loads(json.dumps(state))) if state else None
        result = cx.parse(lines, restored, Source.of(str(CODEX_ROLLOUT), PROJECTS))
        events.extend(result.events)
        state = result.state.to_json()
        offset, size = next_offset, rng.randint(1, 60_000)
    return events


@pytest.mark.parametrize("seed", range(4))
def test_random_byte_batches_give_the_same_events(rollout: ParseResult, seed: int) -> None:
    assert parse_in_batches(CODEX_ROLLOUT.read_bytes(), random.Random(seed)) == list(rollout.events)


# --- damaged lines and secrets -----------------------------------------------------------------


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CODEX_ROLLOUT.read_bytes().splitlines()]


def test_bad_lines_are_skipped_with_reasons(rollout: ParseResult) -> None:
    recs = _records()
    msg = {"timestamp": "2026-05-11T08:30:00.000Z", "type": "event_msg"}

    def prompt(text: str) -> bytes:
        return json.dumps({**msg, "payload": {"type": "user_message", "message": text}}).encode()

    bad = [
        b"\x00" * 30 + prompt("after NULs"),
        prompt("glued one") + prompt("glued two"),
        b'{"timestamp":"2026-05-11T08:30:00.000Z","type":"response_item","payload":{"ty'
        + prompt("after a stub"),
        prompt("BAD").replace(b"BAD", b"bytes \xc3\x28 here"),
        json.dumps({**msg, "type": "brand_new_kind", "payload": {}}).encode(),
        json.dumps({**msg, "type": "response_item", "payload": {"type": "hologram"}}).encode(),
        json.dumps(
            {
                **msg,
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "quantum_tool",
                    "arguments": "{not json",
                    "call_id": "call_q",
                },
            }
        ).encode(),
        b"][ nonsense",
    ]
    lines = [json.dumps(r).encode() for r in recs]
    r = parse_bytes(b"\n".join(lines[:10] + bad + lines[10:]) + b"\n")
    assert [s.reason for s in r.skipped] == [
        "corrupt fragment dropped",
        "unknown record type 'brand_new_kind'",
        "unknown response item 'hologram'",
        "invalid JSON",
    ]

    # offsets moved, so compare what does not depend on them
    def sig(result: ParseResult) -> Counter[tuple[str, str]]:
        return Counter(
            (type(e).__name__, getattr(e, "content", getattr(e, "verb", ""))) for e in result.events
        )

    assert not (sig(rollout) - sig(r))
    prompts = {m.content for m in of(r, Memory) if m.kind == "user_prompt"}
    assert {"after NULs", "glued one", "glued two", "after a stub", "bytes \ufffd( here"} <= prompts
    assert "quantum_tool" in {m.tool for m in of(r, Memory)}  # unknown tool: still a call


SECRET_VALUES = [
    "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234abcd",
    "hunter2hunter2",
    "AKIAIOSFODNN7EXAMPLE",
    "s3cretPassw0rd",
]
PLANTED = (
    "OPENAI_API_KEY=sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX1234abcd\nDB_PASSWORD=hunter2hunter2\n"
    "aws AKIAIOSFODNN7EXAMPLE and postgres://app:s3cretPassw0rd@db:5432/x"
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
    recs = _records()
    for rec in recs:
        p = rec["payload"]
        if p.get("type") == "user_message":
            p["message"] += "\n" + PLANTED
        elif p.get("type") == "function_call" and p["name"] == "exec_command":
            args = json.loads(p["arguments"])
            args["cmd"] = "DB_PASSWORD=hunter2hunter2 psql postgres://app:s3cretPassw0rd@db/x"
            p["arguments"] = json.dumps(args)
        elif p.get("type") == "function_call_output":
            p["output"] += PLANTED
        elif p.get("type") == "message" and p["role"] == "assistant":
            p["content"][0]["text"] += PLANTED
        elif p.get("type") == "exec_command_end":
            p["exit_code"], p["stderr"] = 3, PLANTED
    r = parse_bytes(b"\n".join(json.dumps(x).encode() for x in recs) + b"\n")
    texts = all_strings(list(r.events)) + all_strings(list(r.sessions))
    assert any("[REDACTED:" in t for t in texts) and of(r, Triggered)
    for secret in SECRET_VALUES:
        assert not any(secret in t for t in texts), secret


# --- formats and cases the fixture lacks -------------------------------------------------------


def jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def env(kind: str, payload: dict[str, Any], ts: str = "2026-02-01T10:00:00.000Z") -> dict:
    return {"timestamp": ts, "type": kind, "payload": payload}


def call(name: str, call_id: str, **args: Any) -> dict:
    payload = {"type": "function_call", "name": name, "arguments": json.dumps(args)}
    return env("response_item", {**payload, "call_id": call_id})


def output(call_id: str, text: str) -> dict:
    return env(
        "response_item", {"type": "function_call_output", "call_id": call_id, "output": text}
    )


META = env(
    "session_meta",
    {
        "id": "0199aaaa-0000-7000-8000-000000000001",
        "cwd": "/w/app",
        "cli_version": "0.50.0",
        "git": {"branch": "main"},
    },
)


def test_legacy_bare_format() -> None:
    data = jsonl(
        {
            "id": "0198aaaa-0000-7000-8000-000000000002",
            "timestamp": "2025-08-01T10:00:00Z",
            "instructions": None,
            "git": {"branch": "dev"},
        },
        {"record_type": "state"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {
                    "type": "input_text",
                    "text": "<environment_context>\n  <cwd>/w/app</cwd>\n</environment_context>",
                }
            ],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "fix the failing test"}],
        },
        {
            "type": "function_call",
            "name": "shell",
            "call_id": "call_1",
            "arguments": json.dumps({"command": ["bash", "-lc", "cd /w/app && pytest -q"]}),
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": json.dumps(
                {"output": "1 failed\nE   AssertionError: boom", "metadata": {"exit_code": 1}}
            ),
        },
        {
            "type": "function_call",
            "name": "shell",
            "call_id": "call_2",
            "arguments": json.dumps(
                {
                    "command": [
                        "apply_patch",
                        "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y"
                        "\n*** Add File: src/b.py\n+z\n*** End Patch",
                    ],
                    "workdir": "/w/app",
                }
            ),
        },
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": json.dumps({"output": "Done!", "metadata": {"exit_code": 0}}),
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Fixed."}],
        },
    )
    r = parse_bytes(data, "/h/.codex/sessions/rollout-legacy.jsonl", [("app", "/w/app")])
    (session,) = r.sessions
    assert session.session_id == "0198aaaa-0000-7000-8000-000000000002"
    assert (session.git_branch, session.cwd, session.project_id) == ("dev", "/w/app", "app")
    assert [g.intent for g in of(r, Goal)] == ["fix the failing test"]
    assert edges(r, "EXECUTES", "error") == {"pytest": 1}
    (trig,) = of(r, Triggered)
    assert (trig.exit_code, trig.error.name) == (1, "AssertionError: boom")
    assert edges(r, "MODIFIES", "ok") == {"app:src/a.py": 1, "app:src/b.py": 1}
    assert [m.content for m in of(r, Memory) if m.kind == "assistant_message"] == ["Fixed."]
    assert r.skipped == () and r.pending == ()


def test_unified_exec_exit_reported_by_a_later_poll() -> None:
    data = jsonl(
        META,
        call("exec_command", "c1", cmd="make test", workdir="/w/app"),
        output(
            "c1",
            "Chunk ID: 1\nWall time: 1.0 seconds\nProcess running with session ID 7\n"
            "Original token count: 0\nOutput:\n",
        ),
        call("write_stdin", "c2", session_id=7, chars=""),
        output(
            "c2",
            "Chunk ID: 2\nWall time: 0.1 seconds\nProcess exited with code 3\n"
            "Original token count: 5\nOutput:\nmake: *** [test] Error 3\n",
        ),
    )
    first_lines, _ = split_lines(data, 0)
    head = cx.parse(first_lines[:3], None, Source("/x/rollout-a.jsonl"))
    assert [a.outcome for a in head.pending] == ["pending"]  # still running
    r = cx.parse(first_lines[3:], head.state, Source("/x/rollout-a.jsonl"))
    (action,) = of(r, Action)
    assert (action.entity.key, action.outcome, action.exit_code) == ("make", "error", 3)
    (error,) = [m for m in of(r, Memory) if m.kind == "error"]
    assert error.call_id == "c1" and error.content == "make: *** [test] Error 3"
    assert len(of(r, Triggered)) == 1


def test_rejected_command_is_denied_not_executed() -> None:
    data = jsonl(
        META,
        call("shell_command", "c1", command="rm -rf build"),
        output("c1", "exec command rejected by user"),
    )
    r = parse_bytes(data, "/x/rollout-b.jsonl", ())
    # the command and the directory it would have removed
    assert {(d.reason, d.entity.key) for d in of(r, Denied)} == {
        ("user_rejected", "rm"),
        ("user_rejected", "/w/app/build"),
    }
    assert of(r, Action) == [] and of(r, Triggered) == []


def test_local_shell_call_mcp_tools_and_compaction() -> None:
    data = jsonl(
        META,
        env(
            "response_item",
            {
                "type": "local_shell_call",
                "call_id": "c9",
                "status": "completed",
                "action": {"type": "exec", "command": ["ls", "-la"], "working_directory": "/w"},
            },
        ),
        output("c9", json.dumps({"output": "total 0", "metadata": {"exit_code": 0}})),
        call("github__create_pr", "c10", title="Fix"),
        output("c10", "created #12"),
        env("compacted", {"message": "Summary of the work so far"}),
    )
    r = parse_bytes(data, "/x/rollout-c.jsonl", ())
    assert edges(r, "EXECUTES", "ok") == {"ls": 1, "mcp:github:create_pr": 1}
    assert [m.content for m in of(r, Memory) if m.kind == "summary"] == [
        "Summary of the work so far"
    ]


def test_desktop_prompt_wrapper_is_unwrapped_for_the_goal() -> None:
    message = (
        "# Files mentioned by the user:\n\n## a.py: /w/app/a.py\n\n"
        "## My request for Codex:\nRename foo to bar everywhere\n"
    )
    data = jsonl(META, env("event_msg", {"type": "user_message", "message": message}))
    r = parse_bytes(data, "/x/rollout-d.jsonl", ())
    assert [g.intent for g in of(r, Goal)] == ["Rename foo to bar everywhere"]


def test_session_id_falls_back_to_the_file_name() -> None:
    data = jsonl(env("event_msg", {"type": "user_message", "message": "hello"}))
    name = "rollout-2026-01-01T00-00-00-0199bbbb-0000-7000-8000-00000000000a.jsonl"
    path = f"/h/.codex/sessions/2026/01/01/{name}"
    r = parse_bytes(data, path, ())
    assert r.sessions[0].session_id == "0199bbbb-0000-7000-8000-00000000000a"


def test_codex_0_169_prompts_namespaced_mcp_calls_and_file_changes() -> None:
    """Record shapes as codex-cli 0.169.0 writes them (tests/test_agents.py drives the real
    one): the prompt is an item_completed UserMessage, an MCP tool is called within its
    server's namespace, and a FileChange item stands for patch_apply_end."""

    def completed(item: dict[str, Any]) -> dict:
        return env("event_msg", {"type": "item_completed", "turn_id": "t1", "item": item})

    def patch(old: str) -> str:
        return f"*** Begin Patch\n*** Update File: W.md\n@@\n alpha\n-{old}\n+BETA\n*** End Patch\n"

    data = jsonl(
        META,
        env("token_usage_record", {"turn_id": "t1", "usage": {"input_tokens": 10}}),
        completed(
            {"type": "UserMessage", "id": "u1",
             "content": [{"type": "text", "text": "upper-case beta", "text_elements": []}]}
        ),
        env("response_item", {"type": "tool_search_call", "call_id": "c0", "status": "completed",
                              "execution": "client", "arguments": {"query": "history"}}),
        env("response_item", {"type": "tool_search_output", "call_id": "c0",
                              "status": "completed", "execution": "client", "tools": []}),
        env("response_item", {"type": "function_call", "name": "search",
                              "namespace": "mcp__memoryd", "arguments": '{"query": "q"}',
                              "call_id": "c1"}),
        output("c1", [{"type": "input_text", "text": "Wall time: 0.0119 seconds\nOutput:"},
                      {"type": "input_text", "text": "search 'q': 0 hits"}]),
        env("response_item", {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch",
                              "input": patch("beta")}),
        completed(
            {"type": "FileChange", "id": "c2", "status": "completed", "stderr": "",
             "changes": {"/w/app/W.md": {"type": "update", "unified_diff": "@@ -1,2 +1,2 @@\n",
                                         "move_path": None}},
             "stdout": "Success. Updated the following files:\nM W.md\n"}
        ),
        env("response_item", {"type": "custom_tool_call_output", "call_id": "c2",
                              "output": "Exit code: 0\nWall time: 0.1 seconds\nOutput:\n"
                              "Success. Updated the following files:\nM W.md\n"}),
        env("response_item", {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch",
                              "input": patch("gamma")}),
        env("response_item", {"type": "custom_tool_call_output", "call_id": "c3",
                              "output": "apply_patch verification failed: Failed to find "
                              "expected lines in /w/app/W.md:\nalpha\ngamma"}),
    )  # fmt: skip
    r = parse_bytes(data, "/x/rollout-e.jsonl", ())
    assert r.skipped == ()
    assert [g.intent for g in of(r, Goal)] == ["upper-case beta"]
    assert edges(r, "EXECUTES", "ok") == {"mcp:memoryd:search": 1}
    assert edges(r, "MODIFIES", "ok") == {"/w/app/W.md": 1}
    assert edges(r, "MODIFIES", "error") == {"/w/app/W.md": 1}
    results = [(m.kind, m.content) for m in of(r, Memory) if m.call_id in ("c1", "c2", "c3")]
    assert [kind for kind, _ in results] == [
        "tool_call", "tool_result", "tool_call", "tool_result", "tool_call", "error"
    ]  # fmt: skip
    assert results[3][1] == "Success. Updated the following files:\nM W.md"


def test_a_path_with_escaped_spaces_is_read_as_one_file() -> None:
    # issue 33: one session read `/w/app/Sample\ File.vtt` ten times and none became a file.
    data = jsonl(
        META,
        call("exec_command", "c1", cmd=r"wc -l /w/app/Sample\ File.vtt", workdir="/w/app"),
        output("c1", "Process exited with code 0\nOutput:\n12 /w/app/Sample File.vtt\n"),
        call("exec_command", "c2", cmd=r"rg -n 'WEBVTT' /w/app/Sample\ File.vtt", workdir="/w/app"),
        output("c2", "Process exited with code 0\nOutput:\n1:WEBVTT\n"),
        call("exec_command", "c3", cmd=r"sed -n '1,20p' ./Sample\ File.vtt", workdir="/w/app"),
        output("c3", "Process exited with code 0\nOutput:\nWEBVTT\n"),
    )
    r = parse_bytes(data, "/x/rollout-a.jsonl", projects=())
    assert edges(r, "READS", "ok", via="shell") == {"/w/app/Sample File.vtt": 3}
    assert edges(r, "EXECUTES", "ok") == {"wc": 1, "rg": 1, "sed": 1}
