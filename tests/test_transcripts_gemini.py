"""Gemini CLI chats: the two real legacy documents, the same chats as JSONL, a document
rewritten in place and re-read, byte batches, and a message too big to hold.

Expected numbers were counted from the JSON with python (messages by type, toolCalls by name
and status, their args), independently of the parser.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from workers.stages.transcripts import ParserState, detect_agent
from workers.stages.transcripts import gemini as gm
from workers.stages.transcripts.events import Action, Event, Goal, Memory, Source, Triggered
from workers.stages.transcripts.lines import split_lines
from workers.stages.transcripts.state import ParseResult

ROOT = Path(__file__).parent / "fixtures" / "transcripts" / "gemini"
JANE = ROOT / "session-2025-12-01T21-45-5b959dae.json"
FILE_OPS = ROOT / "session-2026-01-16T11-01-file-ops-37b7abef.json"
ASSISTANTS = "/Users/Jane_Smith/Documents/projects/epm-cdme/assistants"
# sha256 of this path is FILE_OPS's projectHash: watching it tells the chat's directory.
CODEMIE = "/Users/Nikita_Levyankov/repos/EPMCDME/codemie-ai/codemie-code"


def parse_bytes(data: bytes, projects: Any = (), state: ParserState | None = None) -> ParseResult:
    lines, _ = split_lines(data, 0)
    return gm.parse(lines, state, Source.of("chats/session-x.json", projects))


def of(result: ParseResult | list[Event], cls: type) -> list[Any]:
    events = result.events if isinstance(result, ParseResult) else result
    return [e for e in events if isinstance(e, cls)]


def of_edges(result: ParseResult) -> list[tuple[str, str, str]]:
    return [(a.verb, a.entity.key, a.outcome) for a in of(result, Action)]


def edges(result: ParseResult) -> Counter[tuple[str, str, str]]:
    return Counter(of_edges(result))


def test_detected_as_gemini_and_claude_code_still_claude_code() -> None:
    for path in ROOT.iterdir():
        assert detect_agent(path.read_bytes()[:65536], str(path)) == "gemini", path.name
    claude = next((ROOT.parent / "claude-code").glob("*/cb2e607c-*.jsonl"))
    assert detect_agent(claude.read_bytes()[:65536], str(claude)) == "claude-code"


def test_logs_json_is_recognised_and_makes_nothing() -> None:
    r = parse_bytes((ROOT / "logs.json").read_bytes())
    assert r.events == () and r.skipped == ()


def test_absolute_paths_chat() -> None:
    r = parse_bytes(JANE.read_bytes())
    assert Counter(m.kind for m in of(r, Memory)) == {
        "user_prompt": 3,
        "assistant_message": 3,  # the 7 gemini messages with only tool calls have no text
        "tool_call": 10,
        "tool_result": 10,
    }
    # "hi" only greets: the request is the next prompt (issue 33)
    assert [g.intent for g in of(r, Goal)] == ["Explain what this is"]
    (session,) = r.sessions
    assert (session.session_id, session.agent, session.cwd) == (
        "5b959dae-8655-4cd1-b10f-720b8c336ea2",
        "gemini",
        None,  # its projectHash is not the hash of any path it names
    )
    assert (session.started_at, session.ended_at) == (
        "2025-12-01T21:45:34.362Z",
        "2025-12-01T21:50:10.837Z",
    )
    assert edges(r) == {
        ("READS", ASSISTANTS, "ok"): 1,  # list_directory "…/assistants/"
        ("READS", f"{ASSISTANTS}/lead.txt", "ok"): 1,
        ("READS", f"{ASSISTANTS}/lead_memory.txt", "ok"): 2,
        ("READS", f"{ASSISTANTS}/lead_memory_v1.txt", "ok"): 1,
        ("READS", f"{ASSISTANTS}/lead_memor_v2.txt", "ok"): 1,
        ("READS", f"{ASSISTANTS}/lead_gemini.txt", "ok"): 2,
        ("MODIFIES", f"{ASSISTANTS}/lead_gemini.txt", "ok"): 2,  # write_file, replace
    }
    assert r.skipped == ()


def test_relative_paths_resolve_in_the_watched_project_the_hash_names() -> None:
    r = parse_bytes(FILE_OPS.read_bytes(), projects=[("cm", CODEMIE)])
    assert r.sessions[0].cwd == CODEMIE and r.sessions[0].project_id == "cm"
    assert edges(r) == {
        ("EXECUTES", "write_todos", "ok"): 3,
        ("EXECUTES", "delegate_to_agent", "ok"): 1,
        ("READS", "cm:SECURITY.md", "ok"): 1,
        ("READS", "cm:scripts/validate-secrets.js", "ok"): 1,
        ("READS", "cm:src/env/manager.ts", "ok"): 1,
        ("READS", "cm:.husky/pre-commit", "ok"): 1,
        ("READS", "cm:.", "ok"): 1,  # search_file_content with no path: the project
        ("READS", "cm:hello.md", "ok"): 2,
        ("MODIFIES", "cm:hello.md", "ok"): 3,
    }
    assert Counter(m.kind for m in of(r, Memory))["tool_call"] == 14


def test_without_a_watched_project_the_directory_is_learned_from_a_result() -> None:
    # "Successfully created and wrote to new file: <abs>/hello.md": its folder hashes to the
    # projectHash. The five reads before it named relative paths: their edges are made then
    # (issue 33: before, they named no file).
    r = parse_bytes(FILE_OPS.read_bytes())
    assert r.sessions[0].cwd == CODEMIE
    files = Counter(f"{verb} {key}" for verb, key, _ in of_edges(r) if verb != "EXECUTES")
    assert files == {
        f"MODIFIES {CODEMIE}/hello.md": 3,
        f"READS {CODEMIE}/hello.md": 2,
        f"READS {CODEMIE}/SECURITY.md": 1,
        f"READS {CODEMIE}/scripts/validate-secrets.js": 1,
        f"READS {CODEMIE}/src/env/manager.ts": 1,
        f"READS {CODEMIE}/.husky/pre-commit": 1,
        f"READS {CODEMIE}": 1,  # search_file_content with no path: the project
    }
    # as many edges as when the project is watched, only keyed by absolute path
    watched = parse_bytes(FILE_OPS.read_bytes(), projects=[("cm", CODEMIE)])
    assert len(of(r, Action)) == len(of(watched, Action)) == 14


def _doc(chat: dict[str, Any]) -> bytes:
    """The way Gemini CLI writes a chat: JSON.stringify(conversation, null, 2)."""
    return json.dumps(chat, indent=2, ensure_ascii=False).encode()


def test_a_document_rewritten_in_place_is_read_again_without_repeats() -> None:
    chat = json.loads(FILE_OPS.read_text())
    early = {**chat, "messages": json.loads(json.dumps(chat["messages"][:7]))}
    running = early["messages"][6]["toolCalls"][0]  # write_file hello.md, not finished yet
    running["status"] = "executing"
    del running["result"]
    first = parse_bytes(_doc(early) + b"\n", projects=[("cm", CODEMIE)])
    assert [a.verb for a in first.pending] == ["MODIFIES"]
    second = parse_bytes(_doc(chat) + b"\n", projects=[("cm", CODEMIE)], state=first.state)
    whole = parse_bytes(_doc(chat) + b"\n", projects=[("cm", CODEMIE)])
    ids = [e.id for e in [*first.events, *second.events]]
    assert len(ids) == len(set(ids))  # nothing emitted twice
    assert set(ids) == {e.id for e in whole.events}
    seqs = {m.id: m.seq for m in of(whole, Memory)}
    assert {m.id: m.seq for m in of([*first.events, *second.events], Memory)} == seqs
    assert second.pending == ()


def test_the_jsonl_layout_gives_the_same_events() -> None:
    chat = json.loads(FILE_OPS.read_text())
    meta = {k: v for k, v in chat.items() if k != "messages"}
    records: list[dict[str, Any]] = [meta]
    for m in chat["messages"]:
        if m.get("toolCalls"):  # first appended while running, then again when done
            running = [{k: v for k, v in c.items() if k != "result"} for c in m["toolCalls"]]
            records.append({**m, "toolCalls": [c | {"status": "executing"} for c in running]})
        records.append(m)
    records.append({"$set": {"lastUpdated": "2026-01-16T12:40:00.000Z"}})
    records.append({"$rewindTo": chat["messages"][-1]["id"]})
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    jsonl = parse_bytes(data, projects=[("cm", CODEMIE)])
    doc = parse_bytes(_doc(chat) + b"\n", projects=[("cm", CODEMIE)])
    # same events; in JSONL a call's memory comes when it starts, its result when it ends
    assert Counter(e.id for e in jsonl.events) == Counter(e.id for e in doc.events)
    assert jsonl.sessions[0].ended_at == "2026-01-16T12:40:00.000Z"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_byte_batches_give_the_same_events(seed: int) -> None:
    data = _doc(json.loads(JANE.read_text())) + b"\n"
    whole = parse_bytes(data)
    rng = random.Random(seed)
    state: ParserState | None = None
    offset, events = 0, []
    while offset < len(data):
        size = rng.randint(1, 4000)
        lines, next_offset = split_lines(data[offset : offset + size], offset)
        while next_offset == offset:  # no complete line in the window yet: read more
            size *= 2
            lines, next_offset = split_lines(data[offset : offset + size], offset)
        offset = next_offset
        r = gm.parse(lines, state, Source.of("chats/session-x.json"))
        state = ParserState.from_json(json.loads(json.dumps(r.state.to_json())))
        events += r.events
    assert events == list(whole.events)


def test_a_message_too_big_to_hold_is_skipped_and_the_rest_parsed() -> None:
    chat = json.loads(JANE.read_text())
    huge = {**chat["messages"][1], "id": "huge", "content": "x" * (gm.MAX_MESSAGE_BYTES + 10)}
    chat["messages"].insert(2, huge)
    r = parse_bytes(_doc(chat) + b"\n")
    assert [s.reason for s in r.skipped] == [f"message over {gm.MAX_MESSAGE_BYTES} bytes skipped"]
    assert Counter(m.kind for m in of(r, Memory))["tool_call"] == 10
    assert "huge" not in {m.source_id for m in of(r, Memory)}


def test_a_failed_and_a_cancelled_call() -> None:
    meta = {"sessionId": "0c0c0c0c-1111-4222-8333-444444444444", "projectHash": "ab" * 32}
    calls = [
        {
            "id": "run_shell_command-1",
            "name": "run_shell_command",
            "args": {"command": "cat /etc/hostname > /tmp/h.txt"},
            "status": "error",
            "result": [
                {
                    "functionResponse": {
                        "id": "run_shell_command-1",
                        "name": "run_shell_command",
                        "response": {"error": "bash: /tmp/h.txt: Permission denied"},
                    }
                }
            ],
        },
        {"id": "write_file-2", "name": "write_file", "args": {"file_path": "/w/a.txt"}},
    ]
    message = {"id": "m1", "type": "gemini", "content": "", "toolCalls": calls}
    calls[1]["status"] = "cancelled"
    r = parse_bytes(b"\n".join(json.dumps(x).encode() for x in (meta, message)) + b"\n")
    assert sorted((a.verb, a.entity.key, a.outcome, a.via) for a in of(r, Action)) == [
        ("EXECUTES", "cat", "error", "tool"),
        ("MODIFIES", "/tmp/h.txt", "error", "shell"),
        ("READS", "/etc/hostname", "error", "shell"),
    ]
    assert [(d.reason, d.entity.key) for d in r.events if type(d).__name__ == "Denied"] == [
        ("user_rejected", "/w/a.txt")
    ]
    (t,) = [e for e in r.events if type(e).__name__ == "Triggered"]
    assert t.message == "bash: /tmp/h.txt: Permission denied"


# --- issue 33: shapes seen in real Gemini CLI chats ----------------------------------------------

PROJECT = "/home/dev/shop"


def chat_jsonl(*messages: dict[str, Any], project_hash: str = "") -> bytes:
    """A current (JSONL) chat: the metadata line, then one record per message."""
    meta = {
        "sessionId": "9f0c2d4e-1111-4222-8333-444455556666",
        "projectHash": project_hash or gm._hash(PROJECT),
        "startTime": "2026-03-02T10:00:00.000Z",
    }
    return b"".join(json.dumps(r).encode() + b"\n" for r in (meta, *messages))


def calls(mid: str, *tool_calls: dict[str, Any]) -> dict[str, Any]:
    stamp = "2026-03-02T10:01:00.000Z"
    return {
        "id": mid,
        "timestamp": stamp,
        "type": "gemini",
        "content": "",
        "toolCalls": list(tool_calls),
    }


def call(
    cid: str, name: str, args: dict[str, Any], output: str, status: str = "success"
) -> dict[str, Any]:
    response = {"functionResponse": {"id": cid, "name": name, "response": {"output": output}}}
    return {"id": cid, "name": name, "args": args, "result": [response], "status": status}


SHELL_127 = (
    "Command: export PYTHONPATH=$PYTHONPATH:$(pwd)/vendor && python3 -m shop.seed\n"
    "Directory: (root)\n"
    "Output: bash: line 1: python3: command not found\n"
    "Error: (none)\n"
    "Exit Code: 127\n"
    "Signal: (none)\n"
    "Background PIDs: (none)\n"
    "Process Group PGID: 41231"
)


def test_search_tools_read_the_folder_they_searched() -> None:
    data = chat_jsonl(
        calls(
            "m1",
            call(
                "c1",
                "grep_search",
                {"dir_path": f"{PROJECT}/src", "pattern": "def checkout"},
                "Found 1 match",
            ),
            call(
                "c2",
                "glob",
                {"pattern": "**/*.py", "dir_path": f"{PROJECT}/tests"},
                "Found 3 files",
            ),
            call("c3", "list_directory", {"dir_path": f"{PROJECT}/docs"}, "Listed 2 item(s)."),
        )
    )
    r = parse_bytes(data)
    assert edges(r) == {
        ("READS", f"{PROJECT}/src", "ok"): 1,
        ("READS", f"{PROJECT}/tests", "ok"): 1,
        ("READS", f"{PROJECT}/docs", "ok"): 1,
    }


def test_a_shell_call_that_exited_non_zero_is_a_failure_whatever_its_status() -> None:
    command = "export PYTHONPATH=$PYTHONPATH:$(pwd)/vendor && python3 -m shop.seed"
    data = chat_jsonl(
        calls("m1", call("c1", "run_shell_command", {"command": command}, SHELL_127)),
        calls(
            "m2", call("c2", "run_shell_command", {"command": "ls"}, "Output: a b\nExit Code: 0")
        ),
    )
    r = parse_bytes(data)
    assert edges(r) == {
        ("EXECUTES", "pwd", "error"): 1,
        ("EXECUTES", "python3", "error"): 1,  # not `vendor` nor `vendor:$`
        ("EXECUTES", "ls", "ok"): 1,
    }
    (failure,) = of(r, Triggered)
    assert (failure.exit_code, failure.message) == (127, "bash: line 1: python3: command not found")
    assert failure.error.name.startswith("not found")
    assert Counter(m.kind for m in of(r, Memory)) == {"tool_call": 2, "error": 1, "tool_result": 1}


def test_relative_reads_before_the_directory_is_known_get_their_edges_once_it_is() -> None:
    data = chat_jsonl(
        {"id": "u1", "timestamp": "2026-03-02T10:00:30.000Z", "type": "user", "content": "hello"},
        {
            "id": "u2",
            "timestamp": "2026-03-02T10:00:40.000Z",
            "type": "user",
            "content": "why does checkout fail?",
        },
        calls("m1", call("c1", "read_file", {"file_path": "src/cart.py"}, "def cart(): ...")),
        calls("m2", call("c2", "read_file", {"file_path": f"{PROJECT}/src/checkout.py"}, "...")),
        calls("m3", call("c3", "read_file", {"file_path": "README.md"}, "# shop")),
    )
    r = parse_bytes(data)
    # the absolute path's folder /home/dev/shop hashes to the projectHash
    assert r.sessions[0].cwd == PROJECT
    assert edges(r) == {
        ("READS", f"{PROJECT}/src/cart.py", "ok"): 1,
        ("READS", f"{PROJECT}/src/checkout.py", "ok"): 1,
        ("READS", f"{PROJECT}/README.md", "ok"): 1,
    }
    # "hello" only greets: the goal is the request after it
    assert [g.intent for g in of(r, Goal)] == ["why does checkout fail?"]
    # read again (the chat grew): the late edges are not made twice
    again = gm.parse(split_lines(data, 0)[0], r.state, Source.of("chats/session-x.jsonl"))
    assert of(again, Action) == []


def test_the_project_root_marker_beside_the_chats_folder_names_the_directory(
    tmp_path: Path,
) -> None:
    # Current Gemini CLI: ~/.gemini/tmp/<slug>/chats/…, and <slug>/.project_root holds the path.
    slug = tmp_path / ".gemini" / "tmp" / "shop"
    (slug / "chats").mkdir(parents=True)
    (slug / ".project_root").write_text(PROJECT + "\n")
    data = chat_jsonl(
        calls("m1", call("c1", "read_file", {"file_path": "src/cart.py"}, "...")),
        project_hash="0" * 64,  # hashes nothing: only the marker tells
    )
    chat = slug / "chats" / "session-2026-03-02T10-00-9f0c2d4e.jsonl"
    r = gm.parse(split_lines(data, 0)[0], None, Source.of(str(chat)))
    assert r.sessions[0].cwd == PROJECT
    assert edges(r) == {("READS", f"{PROJECT}/src/cart.py", "ok"): 1}
