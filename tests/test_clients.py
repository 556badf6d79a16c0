"""The scripted-client harness, proven with the real clients.

Each test runs a real client (installed from npm by tests/clients.py) in a throwaway home.
Claude Code against the scripted Messages-API server: a real tool edits a real file, a stdio
MCP server is registered, health-checked and called, and settings.json hooks
put their context into the request the client sends to the model. Codex against the scripted
Responses-API server: a command and an MCP call run, and hooks run once trusted. Gemini CLI:
MCP registration, its folder trust, and against the scripted Gemini API an MCP call and hooks.
docs/clients.md says what these facts are for.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd import queue
from memoryd.daemon.runtime import Runtime
from memoryd.store import key_of
from tests.clients import (
    FALLBACK_TEXT,
    ClaudeHome,
    Clients,
    CodexHome,
    GeminiHome,
    ScriptedAnthropic,
    ScriptedGemini,
    ScriptedOpenAI,
    function_call_outputs,
    function_responses,
    install_clients,
    request_text,
    text,
    tool_names,
    tool_results,
    tool_use,
)
from tests.conftest import git_init

# A minimal stdio MCP server on the standard library, so that it starts in milliseconds on a
# loaded machine. On the `mcp` SDK it took seconds there (the import), and the tests flaked
# (issue 31): Claude Code sends a `server/discover` probe first and gives it 3 s; a server still
# importing then reads the probe, opens the 2026 era on it and refuses the `initialize` that
# follows, so its tools were missing from the first request whatever MCP_TIMEOUT said; and
# `gemini mcp list` called it Disconnected. It answers a call as the SDK does for a tool that
# returns a str (content and structured content), and its answer (reversed, upper-cased)
# cannot be guessed from the input, so seeing it proves the call ran.
ECHO_SERVER = """\
import json
import sys

TOOL = {
    "name": "echo",
    "description": "Echo the text back, reversed and upper-cased.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string", "title": "Text"}},
        "required": ["text"],
    },
}


def answer(request):
    method = request["method"]
    if method == "initialize":
        return {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "echo", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        echoed = "echoed:" + request["params"]["arguments"]["text"][::-1].upper()
        return {
            "content": [{"type": "text", "text": echoed}],
            "structuredContent": {"result": echoed},
            "isError": False,
        }
    if method == "ping":
        return {}
    return None


for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request or "method" not in request:
        continue  # notifications
    result = answer(request)
    reply = {"jsonrpc": "2.0", "id": request["id"]}
    if result is None:  # server/discover among them: this server speaks the handshake era
        reply["error"] = {"code": -32601, "message": "Method not found"}
    else:
        reply["result"] = result
    print(json.dumps(reply), flush=True)
"""

# A hook command: logs the JSON it got on stdin and answers with context naming its event.
HOOK = """\
import json
import sys
from pathlib import Path

event = json.load(sys.stdin)
with open(Path(__file__).with_name("hook-stdin.jsonl"), "a") as log:
    log.write(json.dumps(event) + "\\n")
name = event["hook_event_name"]
output = {"hookEventName": name, "additionalContext": "MARKER-123 from " + name}
print(json.dumps({"hookSpecificOutput": output}))
"""


@pytest.fixture(scope="module")
def clients() -> Clients:
    return install_clients()


@pytest.fixture
def home(clients: Clients, tmp_path: Path) -> ClaudeHome:
    return ClaudeHome(clients, tmp_path)


@pytest.fixture
def codex(clients: Clients, tmp_path: Path) -> CodexHome:
    return CodexHome(clients, tmp_path)


@pytest.fixture
def gemini(clients: Clients, tmp_path: Path) -> GeminiHome:
    return GeminiHome(clients, tmp_path)


@pytest.fixture
def echo_server(tmp_path: Path) -> list[str]:
    """The command line of the echo MCP server."""
    server = tmp_path / "echo_server.py"
    server.write_text(ECHO_SERVER)
    return [sys.executable, str(server)]


@pytest.fixture
def hook_command(tmp_path: Path) -> str:
    """A shell command running the logging hook; its stdin lands in hook-stdin.jsonl."""
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(hook))}"


def hook_events(tmp_path: Path) -> list[dict[str, object]]:
    log = tmp_path / "hook-stdin.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    git_init(root)
    return root


def post(server: ScriptedAnthropic, body: dict[str, object]) -> tuple[int, str]:
    host, port = server.base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("POST", "/v1/messages", json.dumps(body))
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_scripted_server_matches_turns_answers_strays_and_stops_at_its_bound() -> None:
    main = {"model": "m", "max_tokens": 1000, "tools": [{"name": "Edit"}], "stream": False}
    quota = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]}
    script = [tool_use("Edit", {"file_path": "x"}), text("done")]
    with ScriptedAnthropic(script, max_requests=3) as server:
        # A side request (no tools, one token) does not use up a scripted turn.
        status, body = post(server, quota)
        assert (status, json.loads(body)["content"]) == (
            200,
            [{"type": "text", "text": FALLBACK_TEXT}],
        )
        status, body = post(server, main)
        assert json.loads(body)["content"] == [
            {
                "type": "tool_use",
                "id": "toolu_scripted0002",
                "name": "Edit",
                "input": {"file_path": "x"},
            }
        ]
        assert json.loads(body)["stop_reason"] == "tool_use"
        status, body = post(server, {**main, "stream": True})
        events = [line for line in body.splitlines() if line.startswith("event: ")]
        assert events == [
            "event: message_start",
            "event: content_block_start",
            "event: content_block_delta",
            "event: content_block_stop",
            "event: message_delta",
            "event: message_stop",
        ]
        assert '"text_delta", "text": "done"' in body
        # The fourth request is past max_requests: refused as overloaded.
        status, body = post(server, main)
        assert status == 529
        assert server.unused_turns == []
        assert [r.answered_by is not None for r in server.requests] == [False, True, True, False]
        assert server.main_requests == [main, {**main, "stream": True}]
    # A turn with its own `when` answers the requests it picks, side requests included.
    titled = [text("done"), text("A title", when=lambda body: body["max_tokens"] == 1)]
    with ScriptedAnthropic(titled) as server:
        assert json.loads(post(server, quota)[1])["content"][0]["text"] == "A title"
        assert json.loads(post(server, main)[1])["content"][0]["text"] == "done"
        assert server.unused_turns == []
    # Past its time limit the server refuses everything, scripted or not.
    with ScriptedAnthropic([text("never sent")], time_limit=0) as late:
        assert post(late, main)[0] == 529
        assert [turn.text for turn in late.unused_turns] == ["never sent"]


@pytest.mark.e2e
def test_claude_edits_a_file_in_a_git_repo_and_writes_a_genuine_transcript(
    home: ClaudeHome, repo: Path
) -> None:
    notes = repo / "notes.txt"
    script = [
        tool_use("Read", {"file_path": str(notes)}),
        tool_use("Edit", {"file_path": str(notes), "old_string": "beta", "new_string": "BETA"}),
        text("Edited notes.txt."),
    ]
    with ScriptedAnthropic(script) as server:
        run = home.prompt(
            "capitalise beta in notes.txt", server, cwd=repo, allowed_tools=["Read", "Edit"]
        )
    assert run.result.returncode == 0, run.result.stderr
    output = run.output()
    assert (output["is_error"], output["result"], output["num_turns"]) == (
        False,
        "Edited notes.txt.",
        3,
    )
    assert notes.read_text() == "alpha\nBETA\ngamma\n"
    assert server.unused_turns == []
    # The client lists its built-in tools and returns each tool's result to the model.
    requests = server.main_requests
    assert {"Read", "Edit", "Write", "Bash"} <= set(tool_names(requests[0]))
    edit_result = tool_results(requests[2])[-1]
    assert edit_result["tool_use_id"] == "toolu_scripted0002"
    assert "has been updated successfully" in json.dumps(edit_result["content"])

    # One session file, named by the session, under the project folder of the cwd.
    [transcript] = run.transcripts
    assert transcript.name == f"{output['session_id']}.jsonl"
    assert transcript.parent.parent == home.config_dir / "projects"
    records = run.records()
    uses = [
        block
        for r in records
        if r.get("type") == "assistant"
        for block in r["message"]["content"]
        if block["type"] == "tool_use"
    ]
    assert [(u["id"], u["name"]) for u in uses] == [
        ("toolu_scripted0001", "Read"),
        ("toolu_scripted0002", "Edit"),
    ]
    # The transcript keeps the input as the client normalised it (replace_all filled in).
    assert uses[1]["input"] == {
        "file_path": str(notes),
        "old_string": "beta",
        "new_string": "BETA",
        "replace_all": False,
    }
    [edit_record] = [
        r
        for r in records
        if r.get("type") == "user"
        and isinstance(r["message"]["content"], list)
        and r["message"]["content"][0].get("tool_use_id") == "toolu_scripted0002"
    ]
    assert edit_record["message"]["content"][0].get("is_error") is not True
    assert edit_record["toolUseResult"]["filePath"] == str(notes)
    assert edit_record["cwd"] == str(repo)
    assert {r["sessionId"] for r in records if "sessionId" in r} == {output["session_id"]}


@pytest.mark.e2e
async def test_memoryd_reads_claudes_newest_transcript_whole_with_the_right_verbs(
    home: ClaudeHome, repo: Path, stack: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """The transcript the installed Claude Code writes is ingested without one record type
    memoryd does not know, and each tool call is the verb it was: Read READS, Write and Edit
    MODIFY, Bash EXECUTES its program and READS the file `wc` counts (via the shell)."""
    assert stack.redis is not None and stack.store is not None
    notes, todo = repo / "notes.txt", repo / "todo.txt"
    script = [
        tool_use("Read", {"file_path": str(notes)}),
        tool_use("Write", {"file_path": str(todo), "content": "ship it\n"}),
        tool_use("Edit", {"file_path": str(notes), "old_string": "beta", "new_string": "BETA"}),
        tool_use("Bash", {"command": "wc -l notes.txt", "description": "Count the lines"}),
        text("Done."),
    ]
    tools = ["Read", "Write", "Edit", "Bash"]
    with ScriptedAnthropic(script) as server:
        run = await asyncio.to_thread(
            home.prompt, "tidy the notes", server, cwd=repo, allowed_tools=tools, timeout=90
        )
    assert run.result.returncode == 0, run.result.stderr
    assert (notes.read_text(), todo.read_text()) == ("alpha\nBETA\ngamma\n", "ship it\n")
    [transcript] = run.transcripts
    # The newest format: what was sent to the model is written beside the conversation.
    written = {record.get("type") for record in run.records()}
    assert written >= {"api-request", "api-request-blob", "api-request-shape", "atis-latch"}
    assert written >= {"tools-used", "queue-operation", "last-prompt", "attachment", "user"}
    caplog.set_level(logging.INFO)
    [job] = await queue.enqueue_ingest(stack.redis, [str(transcript)], fresh=True)
    report = await queue.wait_for(job, 300)
    # The ingest logged here (its summary line), and nothing at warning level.
    assert any(
        r.name == "workers.ingest" and "claude-code" in r.getMessage() for r in caplog.records
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert (report["agent"], report["skipped"]) == ("claude-code", 0)

    graph = await stack.store.dump()
    entities = {key_of(e["id"]): e["key"] for e in graph["entity"]}
    edges = sorted(
        (table.upper(), entities[key_of(e["out"])], e["tool"], e["outcome"], e["via"])
        for table in ("reads", "modifies", "executes", "mentions")
        for e in graph.get(table) or []
    )
    assert edges == sorted(
        [
            ("READS", str(notes), "read", "ok", "tool"),
            ("MODIFIES", str(todo), "write", "ok", "tool"),
            ("MODIFIES", str(notes), "edit", "ok", "tool"),
            ("EXECUTES", "wc", "bash", "ok", "tool"),
            ("READS", str(notes), "bash", "ok", "shell"),
        ]
    )
    assert graph.get("triggered") == graph.get("denied") == []
    # The system prompt and reminders in api-request-blob are neither prompts nor goals.
    prompts = [m["content"] for m in graph["memory"] if m["kind"] == "user_prompt"]
    assert prompts == ["tidy the notes"]
    assert [g["intent"] for g in graph["goal"]] == ["tidy the notes"]


@pytest.fixture
def echo_home(home: ClaudeHome, echo_server: list[str]) -> tuple[ClaudeHome, list[str]]:
    """A home with the echo MCP server added at user scope; also returns its command line."""
    command = echo_server
    added = home.run("mcp", "add", "--scope", "user", "echo", "--", *command)
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith(
        f"Added stdio MCP server echo with command: {' '.join(command)} to user config\n"
    )
    return home, command


@pytest.mark.e2e
def test_claude_mcp_add_stores_the_server_and_mcp_list_connects_to_it(
    echo_home: tuple[ClaudeHome, list[str]], repo: Path
) -> None:
    home, command = echo_home
    # With CLAUDE_CONFIG_DIR set, the user-scope config is $CLAUDE_CONFIG_DIR/.claude.json.
    config = json.loads(home.user_config_path.read_text())
    assert config["mcpServers"] == {
        "echo": {"type": "stdio", "command": command[0], "args": command[1:], "env": {}}
    }
    listed = home.run("mcp", "list", cwd=repo)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == (
        f"Checking MCP server health…\n\necho: {' '.join(command)} - ✔ Connected\n"
    )


@pytest.mark.e2e
def test_a_scripted_mcp_tool_call_reaches_the_real_server_and_its_answer_the_model(
    echo_home: tuple[ClaudeHome, list[str]], repo: Path
) -> None:
    home, _ = echo_home
    script = [tool_use("mcp__echo__echo", {"text": "hello"}), text("It echoed.")]
    with ScriptedAnthropic(script) as server:
        run = home.prompt("echo hello", server, cwd=repo, allowed_tools=["mcp__echo__echo"])
    assert run.result.returncode == 0, run.result.stderr
    assert run.output()["result"] == "It echoed."
    first, second = server.main_requests
    # ENABLE_TOOL_SEARCH=false: the MCP tool is listed itself, not deferred behind ToolSearch.
    assert "mcp__echo__echo" in tool_names(first)
    assert "ToolSearch" not in tool_names(first)
    # A result with structured content (as the SDK gives a str): the client hands that JSON on.
    [result] = tool_results(second)
    assert (result["tool_use_id"], result["content"]) == (
        "toolu_scripted0001",
        '{"result":"echoed:OLLEH"}',
    )
    [record] = [r for r in run.records() if r.get("type") == "user" and "toolUseResult" in r]
    assert record["toolUseResult"] == '{"result":"echoed:OLLEH"}'
    assert record["mcpMeta"]["structuredContent"] == {"result": "echoed:OLLEH"}


@pytest.mark.e2e
def test_session_start_and_prompt_hooks_reach_the_model_request(
    home: ClaudeHome, repo: Path, tmp_path: Path, hook_command: str
) -> None:
    handler = [{"type": "command", "command": hook_command}]
    home.write_settings(
        {
            "hooks": {
                "SessionStart": [{"matcher": "startup|resume|clear|compact", "hooks": handler}],
                "UserPromptSubmit": [{"hooks": handler}],
            }
        }
    )
    with ScriptedAnthropic([text("Nothing changed.")]) as server:
        run = home.prompt("what changed lately?", server, cwd=repo)
    assert run.result.returncode == 0, run.result.stderr
    session = run.output()["session_id"]
    [transcript] = run.transcripts
    [request] = server.main_requests
    sent = request_text(request)
    assert "SessionStart hook additional context: MARKER-123 from SessionStart" in sent
    assert "UserPromptSubmit hook additional context: MARKER-123 from UserPromptSubmit" in sent

    # Resuming the session fires SessionStart again, with source "resume".
    with ScriptedAnthropic([text("Still nothing.")]) as server:
        resumed = home.prompt("and now?", server, cwd=repo, extra_args=["--resume", session])
    assert resumed.result.returncode == 0, resumed.result.stderr
    assert resumed.transcripts == [transcript]

    events = hook_events(tmp_path)
    common = {"session_id": session, "transcript_path": str(transcript), "cwd": str(repo)}
    assert [(e["hook_event_name"], e.get("source"), e.get("prompt")) for e in events] == [
        ("SessionStart", "startup", None),
        ("UserPromptSubmit", None, "what changed lately?"),
        ("SessionStart", "resume", None),
        ("UserPromptSubmit", None, "and now?"),
    ]
    for event in events:
        assert {key: event[key] for key in common} == common
    assert set(events[0]) == {*common, "hook_event_name", "source"}
    assert set(events[1]) == {*common, "hook_event_name", "prompt", "prompt_id", "permission_mode"}
    assert events[1]["permission_mode"] == "default"

    # `/compact` and `/clear` in -p mode fire SessionStart with their own sources: compact keeps
    # the session (its summary requests list tools, so unscripted they get the fallback text);
    # clear starts a new session with a new transcript.
    for command in ("/compact", "/clear"):
        with ScriptedAnthropic([]) as server:
            done = home.prompt(command, server, cwd=repo, extra_args=["--resume", session])
        assert done.result.returncode == 0, done.result.stderr
        assert done.output()["local_command"] == command[1:]
    # Each resumes first; a slash command is no prompt, so UserPromptSubmit stays quiet.
    later = hook_events(tmp_path)[4:]
    assert [(e["hook_event_name"], e["source"]) for e in later] == [
        ("SessionStart", "resume"),
        ("SessionStart", "compact"),
        ("SessionStart", "resume"),
        ("SessionStart", "clear"),
    ]
    assert [e["session_id"] for e in later[:3]] == [session] * 3
    clear = later[3]
    assert clear["session_id"] != session
    assert clear["transcript_path"] == str(transcript.with_name(f"{clear['session_id']}.jsonl"))


@pytest.mark.e2e
def test_the_installed_clients_are_the_pinned_versions(clients: Clients, home: ClaudeHome) -> None:
    def version(binary: Path) -> str:
        done = subprocess.run(
            [str(binary), "--version"], env=home.env(), capture_output=True, text=True, timeout=60
        )
        return done.stdout

    assert version(clients.claude) == "2.1.330 (Claude Code)\n"
    assert version(clients.codex) == "codex-cli 0.169.0\n"
    assert version(clients.gemini) == "0.61.0\n"


@pytest.mark.e2e
def test_codex_mcp_add_writes_config_toml_and_mcp_list_shows_it(
    codex: CodexHome, echo_server: list[str]
) -> None:
    added = codex.run("mcp", "add", "echo", "--", *echo_server)
    assert (added.returncode, added.stdout) == (0, "Added global MCP server 'echo'.\n")
    assert codex.config_path.read_text() == (
        f'[mcp_servers.echo]\ncommand = "{echo_server[0]}"\nargs = ["{echo_server[1]}"]\n'
    )
    listed = codex.run("mcp", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [server] = json.loads(listed.stdout)
    assert (server["name"], server["enabled"], server["transport"]) == (
        "echo",
        True,
        {"type": "stdio", "command": echo_server[0], "args": echo_server[1:], "env": None,
         "env_vars": [], "cwd": None},
    )  # fmt: skip
    table = codex.run("mcp", "list").stdout.splitlines()
    assert table[0].split() == ["Name", "Command", "Args", "Env", "Cwd", "Status", "Auth"]
    assert table[1].split() == ["echo", *echo_server, "-", "-", "enabled", "Unsupported"]


@pytest.mark.e2e
def test_codex_exec_runs_a_command_and_an_mcp_tool_against_the_scripted_server(
    codex: CodexHome, echo_server: list[str], repo: Path
) -> None:
    assert codex.run("mcp", "add", "echo", "--", *echo_server).returncode == 0
    script = [
        tool_use("exec_command", {"cmd": "printf made > made.txt"}),
        tool_use("mcp__echo__echo", {"text": "hello"}),
        text("Both done."),
    ]
    # required: Codex waits for the server before its first request (else it may not list its
    # tools yet); approve: exec never asks, so an MCP call needing approval would be refused.
    settings = [
        "mcp_servers.echo.required=true",
        'mcp_servers.echo.default_tools_approval_mode="approve"',
    ]
    with ScriptedOpenAI(script) as server:
        run = codex.exec(
            "make a file, then echo",
            server,
            cwd=repo,
            extra_args=[a for s in settings for a in ("-c", s)],
        )
    assert run.result.returncode == 0, run.result.stderr
    assert (repo / "made.txt").read_text() == "made"
    assert server.unused_turns == []
    first, second, third = server.main_requests
    assert {"exec_command", "mcp__echo__echo"} <= set(tool_names(first))
    [command_output] = function_call_outputs(second)
    assert command_output["call_id"] == "call_scripted0001"
    assert "Process exited with code 0" in command_output["output"]
    echo_output = function_call_outputs(third)[-1]
    assert echo_output["call_id"] == "call_scripted0002"
    assert echo_output["output"].endswith('Output:\n{"result":"echoed:OLLEH"}')

    # `--json` events name the MCP call by server and tool, with the server's own result.
    [mcp_call] = [
        e["item"] for e in run.events()
        if e["type"] == "item.completed" and e["item"]["type"] == "mcp_tool_call"
    ]  # fmt: skip
    assert (mcp_call["server"], mcp_call["tool"], mcp_call["status"]) == (
        "echo",
        "echo",
        "completed",
    )
    assert mcp_call["result"]["content"] == [{"type": "text", "text": "echoed:OLLEH"}]
    # The rollout (Codex's transcript) records both calls; an MCP call carries its namespace.
    [rollout] = run.transcripts
    assert rollout.name.endswith(f"-{run.thread_id}.jsonl")
    calls = [
        r["payload"] for r in run.records()
        if r["type"] == "response_item" and r["payload"]["type"] == "function_call"
    ]  # fmt: skip
    assert [(c["call_id"], c.get("namespace"), c["name"]) for c in calls] == [
        ("call_scripted0001", None, "exec_command"),
        ("call_scripted0002", "mcp__echo", "echo"),
    ]


@pytest.mark.e2e
def test_codex_runs_user_hooks_only_once_trusted_and_their_context_reaches_the_model(
    codex: CodexHome, repo: Path, tmp_path: Path, hook_command: str
) -> None:
    handler = [{"type": "command", "command": hook_command}]
    codex.hooks_path.write_text(
        json.dumps(
            {
                "hooks": {
                    "SessionStart": [{"matcher": "startup|resume|clear|compact", "hooks": handler}],
                    "UserPromptSubmit": [{"hooks": handler}],
                }
            }
        )
    )
    keys = [f"{codex.hooks_path}:session_start:0:0", f"{codex.hooks_path}:user_prompt_submit:0:0"]
    assert [(h["key"], h["trustStatus"]) for h in codex.hooks(repo)] == [
        (keys[0], "untrusted"),
        (keys[1], "untrusted"),
    ]
    # Untrusted hooks are skipped without a word.
    with ScriptedOpenAI([text("No hooks ran.")]) as server:
        run = codex.exec("before trust", server, cwd=repo)
    assert run.result.returncode == 0, run.result.stderr
    assert hook_events(tmp_path) == []
    assert "MARKER-123" not in request_text(server.main_requests[0])

    assert codex.trust_hooks(repo) == keys
    assert [h["trustStatus"] for h in codex.hooks(repo)] == ["trusted", "trusted"]
    assert f'[hooks.state."{keys[0]}"]\ntrusted_hash = "sha256:' in codex.config_path.read_text()
    with ScriptedOpenAI([text("Hooks ran.")]) as server:
        run = codex.exec("after trust", server, cwd=repo)
    assert run.result.returncode == 0, run.result.stderr
    sent = request_text(server.main_requests[0])
    assert "MARKER-123 from SessionStart" in sent
    assert "MARKER-123 from UserPromptSubmit" in sent
    [rollout] = run.transcripts
    common = {"session_id": run.thread_id, "transcript_path": str(rollout), "cwd": str(repo)}
    start, prompt = hook_events(tmp_path)
    assert start == {
        **common, "hook_event_name": "SessionStart", "source": "startup",
        "model": "gpt-5.1", "permission_mode": "bypassPermissions",
    }  # fmt: skip
    assert prompt == {
        **common, "hook_event_name": "UserPromptSubmit", "prompt": "after trust",
        "turn_id": prompt["turn_id"], "model": "gpt-5.1", "permission_mode": "bypassPermissions",
    }  # fmt: skip


@pytest.mark.e2e
def test_gemini_mcp_add_writes_user_settings_and_list_connects_only_in_a_trusted_folder(
    gemini: GeminiHome, echo_server: list[str], repo: Path
) -> None:
    added = gemini.run("mcp", "add", "-s", "user", "echo", *echo_server, cwd=repo)
    assert (added.returncode, added.stderr) == (
        0,
        'MCP server "echo" added to user settings. (stdio)\n',
    )
    assert json.loads(gemini.settings_path.read_text()) == {
        "mcpServers": {"echo": {"command": echo_server[0], "args": echo_server[1:]}}
    }
    shown = f"echo: {' '.join(echo_server)} (stdio)"
    # A folder nobody trusted yet: even user-level servers stay off there.
    untrusted = gemini.run("mcp", "list", cwd=repo)
    assert untrusted.returncode == 0
    assert untrusted.stderr == (
        "Warning: MCP servers are configured but disabled because this folder is untrusted.\n"
        "User-level servers are also suppressed in untrusted folders to prevent accidental"
        " side-effects.\n\nConfigured MCP servers:\n\n"
        f"○ {shown} - Disabled\n"
    )
    gemini.trust_folder(repo)
    trusted = gemini.run("mcp", "list", cwd=repo)
    assert trusted.returncode == 0
    assert trusted.stderr == f"Configured MCP servers:\n\n✓ {shown} - Connected\n"


@pytest.mark.e2e
def test_gemini_headless_calls_an_mcp_tool_and_its_hooks_add_context(
    gemini: GeminiHome, echo_server: list[str], repo: Path, tmp_path: Path, hook_command: str
) -> None:
    assert gemini.run("mcp", "add", "-s", "user", "echo", *echo_server, cwd=repo).returncode == 0
    gemini.trust_folder(repo)
    settings = json.loads(gemini.settings_path.read_text())
    handler = [{"type": "command", "command": hook_command}]
    # No matcher: Claude Code's "startup|resume|clear" (or "/startup|resume|clear/") matches no
    # source in Gemini, and the hook would not run (docs/clients.md).
    settings["hooks"] = {"SessionStart": [{"hooks": handler}], "BeforeAgent": [{"hooks": handler}]}
    gemini.settings_path.write_text(json.dumps(settings))
    script = [tool_use("mcp_echo_echo", {"text": "hello"}), text("It echoed.")]
    with ScriptedGemini(script) as server:
        run = gemini.prompt("echo hello", server, cwd=repo)
    assert run.result.returncode == 0, run.result.stderr
    assert run.output()["response"] == "It echoed."
    first, second = server.main_requests
    # MCP tools are named mcp_<server>_<tool>; Gemini wraps their output as untrusted.
    assert "mcp_echo_echo" in tool_names(first)
    [response] = function_responses(second)
    assert (response["name"], response["response"]) == (
        "mcp_echo_echo",
        {"output": "<untrusted_context>\nechoed:OLLEH\n</untrusted_context>"},
    )
    sent = request_text(first)
    assert "<hook_context>MARKER-123 from SessionStart</hook_context>" in sent
    assert "<hook_context>MARKER-123 from BeforeAgent</hook_context>" in sent
    [transcript] = run.transcripts
    session = run.output()["session_id"]
    start, before_agent = hook_events(tmp_path)
    common = {"session_id": session, "transcript_path": str(transcript), "cwd": str(repo)}
    assert start == {**common, "hook_event_name": "SessionStart", "source": "startup",
                     "timestamp": start["timestamp"]}  # fmt: skip
    # BeforeAgent sees the prompt with the SessionStart context already put in front of it.
    assert before_agent == {
        **common, "hook_event_name": "BeforeAgent", "timestamp": before_agent["timestamp"],
        "prompt": "<hook_context>MARKER-123 from SessionStart</hook_context>\n\necho hello",
    }  # fmt: skip


def test_without_node_the_client_tests_skip_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(pytest.skip.Exception) as skipped:
        install_clients()
    assert str(skipped.value) == (
        "node and npm not on PATH: the real agent clients install with npm"
    )
