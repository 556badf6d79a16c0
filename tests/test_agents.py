"""The agent-facing layer against a real daemon (`memoryd run` in a subprocess) holding a real
indexed tree (arq's source) and real ingested transcripts: the MCP server over stdio and HTTP
through the SDK's own client, the hooks as the clients run them, `memoryd integrate`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from memoryd import client
from memoryd.config import load_settings
from memoryd.errors import NotFound
from memoryd.ids import stable_id
from memoryd.paths import channel_socket
from memoryd.scan import project_id_for
from tests.clients import (
    CODEX_CATALOG_MODEL,
    ClaudeHome,
    CodexHome,
    ScriptedAnthropic,
    ScriptedOpenAI,
    function_call_outputs,
    install_clients,
    request_text,
    text,
    tool_names,
    tool_results,
    tool_search_outputs,
    tool_use,
)
from tests.conftest import MEMORYD, env_without, wait_live
from workers.ingest import OWN_ANSWER

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts" / "claude-code"
CODERABBIT = FIXTURES / "-Users-dain-workspace-coderabbit-review-helper"
SESSION = "cb2e607c-c758-415a-8b45-c49e4631906a"
GOAL = (
    "How can I make this possible to install as a library with `uv` so I can run from any "
    "directory?"
)
PROMPT_ID = "memory:92eca8b5456b42aa16172ecd14af3ef6"
UV_INSTALL_ID = "memory:d01bf7d0b71dd85f5d495537d979ec4b"
PYPROJECT = "/Users/dain/workspace/coderabbit-review-helper/pyproject.toml"
TOOLS = [
    "search",
    "get",
    "file_history",
    "related",
    "impact",
    "session",
    "timeline",
    "recent_activity",
    "remember",
    "forget",
    "status",
]


def clean_env(data: Path, **extra: str) -> dict[str, str]:
    return env_without() | {
        "MEMORYD_CONFIG": "/nonexistent/memoryd.toml",
        "MEMORYD_TRANSCRIPTS": "[]",
        "MEMORYD_DATA_DIR": str(data),
        **extra,
    }


def memoryd(data: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [MEMORYD, *args], capture_output=True, text=True, timeout=timeout, env=clean_env(data)
    )
    assert done.returncode == 0, done.stderr
    return done


@dataclass(frozen=True)
class Daemon:
    data: Path
    repo: Path
    project: str


@pytest.fixture(scope="module")
def daemon(
    arq_tree: Path, tmp_path_factory: pytest.TempPathFactory, short_tmp: Path
) -> Iterator[Daemon]:
    """`memoryd run` on a copy of arq's tree, with one real Claude Code session (and its
    subagent) ingested through it."""
    repo = tmp_path_factory.mktemp("agents") / "arq"
    shutil.copytree(arq_tree, repo, symlinks=True)
    data = Path(tempfile.mkdtemp(dir=short_tmp))
    process = subprocess.Popen(
        [MEMORYD, "run", "--repo", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(data),
    )
    try:
        asyncio.run(wait_live(data, time.monotonic() + 300))
        memoryd(data, "index", str(repo))
        memoryd(data, "ingest", str(CODERABBIT))
        yield Daemon(data, repo, project_id_for(repo))
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=120)
        shutil.rmtree(data, ignore_errors=True)


@asynccontextmanager
async def mcp_stdio(data: Path, cwd: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=MEMORYD, args=["mcp"], cwd=cwd, env=clean_env(data))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: object) -> tuple[bool, str]:
    result = await session.call_tool(tool, arguments)
    [content] = result.content
    return bool(result.is_error), content.text  # type: ignore[union-attr]


def ids_in(text: str) -> list[str]:
    return re.findall(r"\b(?:code|memory|goal):[0-9a-f]{32}\b", text)


def edits_of(transcript: Path, path: str) -> int:
    """Edit tool calls on `path` in a Claude Code transcript, counted from the raw records."""
    count = 0
    for line in transcript.read_text().splitlines():
        record = json.loads(line)
        content = (record.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block.get("name") == "Edit":
                count += block["input"].get("file_path") == path
    return count


# --- MCP over stdio ---------------------------------------------------------------------------


@pytest.mark.e2e
async def test_code_search_then_get_returns_the_chunk_as_it_is_on_disk(daemon: Daemon) -> None:
    async with mcp_stdio(daemon.data, daemon.repo) as mcp:
        listed = await mcp.list_tools()
        assert [tool.name for tool in listed.tools] == TOOLS

        error, found = await call(
            mcp, "search", query="parse a redis connection DSN url", kind="code", limit=3
        )
        assert not error, found
        lines = found.splitlines()
        assert (
            lines[0]
            == f"search 'parse a redis connection DSN url': 3 hits — project {daemon.project}"
        )
        [chunk] = ids_in(lines[1])
        assert lines[1] == f"{chunk} [{daemon.project}] connections.py:55-80 RedisSettings.from_dsn"

        error, record = await call(mcp, "get", ids=[chunk])
        assert not error, record
        source = (daemon.repo / "connections.py").read_text().split("\n")
        head, body = record.split("\n", 1)
        assert head == f"{chunk} [{daemon.project}] connections.py:55-80 RedisSettings.from_dsn"
        assert body == "\n".join(source[54:80]) + "\n"  # the chunk's lines, each ended

        # A budget too small for the chunk: whole lines from its start, and it says so.
        error, cut = await call(mcp, "get", ids=[chunk], max_chars=500)
        assert not error and len(cut) <= 500
        head, body = cut.split("\n", 1)
        shown = body.split("\n")
        last = 54 + len(shown)
        assert head == (
            f"{chunk} [{daemon.project}] connections.py:55-{last} RedisSettings.from_dsn "
            "(chunk ends at line 80; cut to the budget)"
        )
        assert shown == source[54:last] and len(body) <= 500 - 200

        error, missing = await call(mcp, "get", ids=["memory:" + "0" * 32])
        assert error and missing == f"Error executing tool get: no record 'memory:{'0' * 32}'"


@pytest.mark.e2e
async def test_sessions_memories_and_file_history_from_a_real_transcript(daemon: Daemon) -> None:
    async with mcp_stdio(daemon.data, daemon.repo) as mcp:
        # The transcript's session belongs to no watched project: found when asked for all.
        error, found = await call(
            mcp,
            "search",
            query="install as a library with uv",
            kind="memory",
            project="all",
            limit=3,
        )
        assert not error, found
        assert (
            found.splitlines()[0] == "search 'install as a library with uv': 3 hits — all projects"
        )
        assert f"{PROMPT_ID} [(no project)] session {SESSION}#0 user_prompt: {GOAL}" in found
        # Scoped to this repository (the default), the other directory's memory stays out.
        error, scoped = await call(
            mcp, "search", query="install as a library with uv", kind="memory"
        )
        assert not error and "0 hits" in scoped.splitlines()[0] and "nothing found" in scoped

        error, replay = await call(mcp, "session", session_id=SESSION[:8], max_chars=1200)
        assert not error, replay
        lines = replay.splitlines()
        assert lines[0].startswith(
            f"session {SESSION} (claude-code, project (no project), 2025-11-17 11:23"
        )
        assert lines[0].endswith(f"goal: {GOAL}")
        assert lines[2] == f"#0 user_prompt [{PROMPT_ID}]: {GOAL}"
        assert re.fullmatch(
            r"… \d+ more events not shown \(narrow the request or raise max_chars\)", lines[-1]
        )
        assert len(replay) <= 1200

        error, around = await call(mcp, "timeline", anchor=UV_INSTALL_ID, before=1, after=1)
        assert not error, around
        lines = around.splitlines()
        assert lines[0] == f"timeline of session {SESSION} (project (no project)) around #30"
        assert [line[:5] for line in lines[1:]] == ["  #29", "> #30", "  #31"]
        assert (
            lines[2]
            == f"> #30 tool_call bash [{UV_INSTALL_ID}]: Bash: uv tool install . # Install project "
            "as UV tool"
        )

        error, history = await call(mcp, "file_history", path=PYPROJECT, max_chars=8000)
        assert not error, history
        blocks = history.split("\nsession ")
        assert blocks[0] == f"file_history {PYPROJECT}: 2 sessions touched it"
        assert blocks[1].startswith(f"{SESSION} (claude-code, 2025-11-17 11:23) goal: {GOAL}")
        transcript = CODERABBIT / f"{SESSION}.jsonl"
        assert blocks[1].count("MODIFIES ok via edit") == edits_of(transcript, PYPROJECT) == 5
        assert blocks[2].startswith(f"{SESSION}:agent-ea02459f (claude-code,")

        error, recent = await call(mcp, "recent_activity", project="all", days=100000)
        assert not error, recent
        # The session's line names the files it modified most (ahead of its goal, which the
        # line's budget may cut): README.md and the script 8 times each, then pyproject.toml.
        folder = PYPROJECT.rsplit("/", 1)[0]
        assert (
            f"session {SESSION} (claude-code, 2025-11-17 12:02) modified {folder}/README.md, "
            f"{folder}/extract-coderabbit-feedback.py, {folder[:16]}…"
        ) in recent
        assert f"modified {PYPROJECT} ×5 (last 2025-11-17 11:30, session {SESSION})" in recent
        # Here: this repository, where no agent worked yet.
        error, here = await call(mcp, "recent_activity")
        assert not error and here.splitlines()[0].startswith("recent activity since ")
        assert (
            f"0 sessions, 0 files modified, 0 open failures, 0 notes — project {daemon.project}"
            in here
        )

        error, status = await call(mcp, "status")
        assert not error and status.splitlines()[0] == "daemon running: True"
        assert f"project {daemon.project}: {daemon.repo}" in status


@pytest.mark.e2e
async def test_remember_links_the_files_it_names_and_forget_removes_it(daemon: Daemon) -> None:
    note = (
        "Decision: keep RedisSettings.from_dsn strict about unknown schemes (see connections.py)."
    )
    async with mcp_stdio(daemon.data, daemon.repo) as mcp:
        error, done = await call(mcp, "remember", text=note, kind="decision")
        assert not error, done
        [memory] = ids_in(done)
        assert done == (
            f"remembered {memory} (decision, pinned) in session agent-notes:{daemon.project}#0; "
            f"linked to {daemon.project}:connections.py"
        )
        error, history = await call(mcp, "file_history", path="connections.py")
        assert not error, history
        assert f"session agent-notes:{daemon.project} (memoryd," in history
        assert "\n  MENTIONS via remember at " in history, history

        error, found = await call(
            mcp, "search", query="strict about unknown schemes", kind="memory"
        )
        assert (
            not error
            and f"{memory} [{daemon.project}] session agent-notes:{daemon.project}#0 "
            f"decision (code current): {note}"
            in found
        )
        error, recent = await call(mcp, "recent_activity")
        assert not error and f"decision [{memory}] (agent note, " in recent and note in recent

        error, gone = await call(mcp, "forget", id=memory)
        assert (error, gone) == (False, f"forgot {memory}: removed 1 memory")
        error, missing = await call(mcp, "get", ids=[memory])
        assert error and missing == f"Error executing tool get: no record '{memory}'"
        error, history = await call(mcp, "file_history", path="connections.py")
        assert not error and "agent-notes" not in history
        error, again = await call(mcp, "forget", id=memory)
        assert error and again == f"Error executing tool forget: no memory or goal '{memory}'"


@pytest.mark.e2e
async def test_every_answer_keeps_its_budget_the_same_way_every_time(daemon: Daemon) -> None:
    async with mcp_stdio(daemon.data, daemon.repo) as mcp:
        # The engine's ranking of 300 hits may differ between two runs; the cut may not.
        error, text = await call(
            mcp, "search", query="redis job", project="all", limit=100, max_chars=600
        )
        assert not error and len(text) <= 600
        assert re.fullmatch(
            r"… \d+ more hits not shown \(narrow the request or raise max_chars\)",
            text.splitlines()[-1],
        )
        for tool, args in (
            ("session", {"session_id": SESSION}),
            ("file_history", {"path": PYPROJECT}),
            ("recent_activity", {"project": "all", "days": 100000}),
        ):
            answers = [await call(mcp, tool, max_chars=400, **args) for _ in range(2)]
            assert answers[0] == answers[1]
            error, text = answers[0]
            assert not error and len(text) <= 400, (tool, text)
        error, refused = await call(mcp, "status", max_chars=10)
        assert error and refused == "Error executing tool status: max_chars must be at least 200"
        error, outside = await call(mcp, "recent_activity", project="no-such-project")
        assert error and outside == (
            "Error executing tool recent_activity: unknown project 'no-such-project'; "
            "watched projects: arq"
        )


@pytest.mark.e2e
async def test_outside_every_watched_repository_the_answer_says_so(
    daemon: Daemon, tmp_path: Path
) -> None:
    async with mcp_stdio(daemon.data, tmp_path) as mcp:
        error, text = await call(mcp, "recent_activity", days=100000)
    assert not error
    assert text.splitlines()[1] == (
        f"note: {tmp_path} is in no watched repository (nearest root: {tmp_path}); showing "
        "every project. Watch it with `memoryd index` or `memoryd run --repo`."
    )
    assert f"session {SESSION} (claude-code" in text


async def test_with_no_daemon_every_tool_answers_at_once_how_to_start_one(data_dir: Path) -> None:
    async with mcp_stdio(data_dir, data_dir) as mcp:
        started = time.monotonic()
        error, text = await call(mcp, "status")
        assert time.monotonic() - started < 2
    assert error and text == (
        "Error executing tool status: memoryd is not running: start it with "
        "`memoryd service install` (a user service) or `memoryd run`"
    )
    assert not (data_dir / "redis").exists()  # nothing was started on the agent's behalf


def test_the_agent_commands_load_neither_the_model_nor_the_database() -> None:
    probe = (
        "import sys; sys.argv = ['memoryd', 'mcp']; "
        "import memoryd.entry, memoryd.agent.cli, memoryd.agent.mcp_server, memoryd.agent.hooks, "
        "memoryd.agent.integrate; "
        "print(sorted(m for m in ('fastembed', 'onnxruntime', 'surrealdb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_hook_process_loads_only_the_standard_library_and_the_channel(data_dir: Path) -> None:
    """Agents wait on the hook at every prompt: its process must not pay for pydantic, the
    Redis client, typer or even asyncio (the daemon does the work)."""
    probe = (
        "import sys; sys.argv = ['memoryd', 'hook', 'claude-code', 'user-prompt-submit']; "
        "import memoryd.entry; memoryd.entry.main(); "
        "print(sorted(m for m in ('pydantic', 'pydantic_settings', 'arq', 'redis', 'typer', "
        "'asyncio', 'memoryd.config', 'memoryd.client') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        input='{"session_id": "s", "prompt": "hello"}',
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(data_dir),
    )
    assert out.stdout.strip() == "[]"


# --- MCP over streamable HTTP -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
async def test_http_needs_the_token_and_a_loopback_host(daemon: Daemon) -> None:
    port = free_port()
    server = subprocess.Popen(
        [MEMORYD, "mcp", "--http", "--port", str(port)],
        cwd=daemon.repo,
        env=clean_env(daemon.data),
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "no HTTP server"
                await asyncio.sleep(0.2)
        token_file = daemon.data / "mcp-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 40

        hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(url, json=hello, headers=accept)
            assert (refused.status_code, refused.text) == (401, "missing or wrong token\n")
            wrong = await http.post(url, json=hello, headers=accept | {"Authorization": "Bearer x"})
            assert wrong.status_code == 401
            rebound = await http.post(
                url,
                json=hello,
                headers=accept | {"Authorization": f"Bearer {token}", "Host": "evil.example"},
            )
            assert rebound.status_code == 421

        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            listed = await mcp.list_tools()
            assert [tool.name for tool in listed.tools] == TOOLS
            error, found = await call(
                mcp, "search", query="parse a redis connection DSN url", kind="code", limit=1
            )
            assert not error
            assert found.splitlines()[1].endswith(
                f"[{daemon.project}] connections.py:55-80 RedisSettings.from_dsn"
            )
            error, history = await call(mcp, "file_history", path=PYPROJECT)
            assert not error and history.startswith(
                f"file_history {PYPROJECT}: 2 sessions touched it"
            )
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)


# --- hooks ------------------------------------------------------------------------------------


def hook(data: Path, agent: str, event: str, payload: dict[str, object], **env: str) -> str:
    done = subprocess.run(
        [MEMORYD, "hook", agent, event],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=clean_env(data, **env),
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return done.stdout


def context(out: str, event: str) -> str:
    doc = json.loads(out)
    assert list(doc) == ["hookSpecificOutput"]
    assert doc["hookSpecificOutput"]["hookEventName"] == event
    return doc["hookSpecificOutput"]["additionalContext"]


CODE_HEAD = r"(\S+):(\d+)-(\d+)( \S+)? \(current index\):"
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"
# The hooks' own budget is 1.5 s; on a loaded test machine a whole answer may take longer.
PATIENT = {"MEMORYD_HOOK_TIMEOUT_SECONDS": "20"}


async def remember(daemon: Daemon, text: str, kind: str = "decision") -> str:
    async with client.connect(load_settings(data_dir=daemon.data)) as memoryd:
        done = await memoryd.remember(text, kind, cwd=daemon.repo, project=daemon.project)
    return done["id"]


@pytest.mark.e2e
async def test_session_start_briefs_once_per_session_and_again_after_compact(
    daemon: Daemon,
) -> None:
    notes = [
        f"Decision {n}: the retry budget of queue {n} stays at {n + 2} tries." for n in range(4)
    ]
    ids = [await remember(daemon, note) for note in notes]
    start = {"session_id": "s-brief", "cwd": str(daemon.repo), "source": "startup"}
    first = context(
        hook(daemon.data, "claude-code", "session-start", start, **PATIENT), "SessionStart"
    )
    lines = first.splitlines()
    assert lines[0] == f"memoryd: recent agent work in this repository ({daemon.project}):"
    for memory, note in zip(ids, notes, strict=True):
        [line] = [line for line in lines if memory in line]
        assert re.fullmatch(
            rf"- decision \[{memory}\] \(agent note, {WHEN}\): {re.escape(note)}", line
        )
    assert len(first) <= 2000

    state = daemon.data / "hooks" / f"claude-code-{stable_id('s-brief')}.json"
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert set(ids) <= set(json.loads(state.read_text())["injected"])

    # Resumed: everything was said already in this session.
    resumed = hook(
        daemon.data, "claude-code", "session-start", start | {"source": "resume"}, **PATIENT
    )
    assert resumed == ""
    # Compacted: the earlier context is gone, so the briefing comes again, whole.
    compacted = hook(
        daemon.data, "claude-code", "session-start", start | {"source": "compact"}, **PATIENT
    )
    assert context(compacted, "SessionStart") == first
    # Codex's SessionStart gives the same briefing (its own record of what it injected).
    codex = hook(daemon.data, "codex", "session-start", start, **PATIENT)
    assert context(codex, "SessionStart") == first


@pytest.mark.e2e
async def test_the_cap_holds_and_what_did_not_fit_comes_next_time(daemon: Daemon) -> None:
    notes = [f"Note {n}: the worker pool {n} drains before shutdown, by design." for n in range(3)]
    for note in notes:
        await remember(daemon, note, "note")
    start = {"session_id": "s-cap", "cwd": str(daemon.repo), "source": "startup"}
    capped = PATIENT | {"MEMORYD_HOOK_MAX_CHARS": "300"}
    said: list[str] = []
    for _ in range(20):
        out = hook(daemon.data, "claude-code", "session-start", start, **capped)
        if not out:
            break
        text = context(out, "SessionStart")
        assert len(text) <= 300
        assert text.startswith(
            f"memoryd: recent agent work in this repository ({daemon.project}):\n"
        )
        said += text.splitlines()[1:]
    else:
        pytest.fail("the hook kept finding new things to say")
    assert len(said) == len(set(said))  # never the same line twice in one session
    for note in notes:
        assert sum(note in line for line in said) == 1


@pytest.mark.e2e
async def test_prompt_hook_brings_code_and_notes_with_provenance_never_twice(
    daemon: Daemon,
) -> None:
    note = "Decision: parsing a redis connection DSN url rejects unknown schemes."
    memory = await remember(daemon, note)
    prompt = {
        "session_id": "s-prompt",
        "cwd": str(daemon.repo),
        "prompt": "how do we parse a redis connection DSN url?",
    }
    out = hook(daemon.data, "claude-code", "user-prompt-submit", prompt, **PATIENT)
    text = context(out, "UserPromptSubmit")
    assert len(text) <= 2000
    lines = text.splitlines()
    assert lines[0] == "memoryd: earlier work related to this prompt (ids work with memoryd's get):"
    assert re.search(
        rf"^- \[{memory}\] decision \(session agent-notes:{daemon.project}#\d+, tool remember, "
        rf"{WHEN}\): {re.escape(note)}$",
        text,
        re.MULTILINE,
    )
    # Code of this repository, named by path and lines, its text as on disk.
    heads = [
        (n, m)
        for n, line in enumerate(lines)
        if (m := re.fullmatch(rf"- \[code:[0-9a-f]{{32}}\] code {CODE_HEAD}", line))
    ]
    assert heads, text
    n, match = heads[0]
    path, first = match.group(1), int(match.group(2))
    on_disk = (daemon.repo / path).read_text().split("\n")
    assert lines[n + 1] == next(line for line in on_disk[first - 1 :] if line.strip())
    # The real transcript ingested here belongs to another directory: never injected.
    assert SESSION not in text
    again = hook(daemon.data, "claude-code", "user-prompt-submit", prompt, **PATIENT)
    repeated = set(ids_in(context(again, "UserPromptSubmit") if again else ""))
    assert not repeated & set(ids_in(text))


@pytest.mark.e2e
async def test_the_transcript_a_hook_names_is_ingested_at_once(
    daemon: Daemon, tmp_path: Path
) -> None:
    source = FIXTURES / "-src-experiments-claude_p" / "2b4ed4c0-b905-41de-9238-273db3ec737a.jsonl"
    transcript = tmp_path / source.name
    shutil.copy(source, transcript)
    payload = {
        "session_id": "2b4ed4c0-b905-41de-9238-273db3ec737a",
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
        "prompt": "anything",
    }
    assert hook(daemon.data, "claude-code", "user-prompt-submit", payload, **PATIENT) == ""
    settings = load_settings(data_dir=daemon.data)
    deadline = time.monotonic() + 120
    async with client.connect(settings) as memoryd:
        while True:
            try:
                replay = await memoryd.session("2b4ed4c0")
                break
            except NotFound:
                assert time.monotonic() < deadline, "the transcript was never ingested"
                await asyncio.sleep(1)
    assert replay["source"] == str(transcript)
    assert replay["goal"].startswith("Search if claude -p can make use of WebSearch")


def test_with_no_daemon_the_hook_says_nothing_at_once(data_dir: Path) -> None:
    payload = {"session_id": "s", "cwd": str(data_dir), "source": "startup"}
    # The sockets left behind by a daemon that died: refused at once, not retried.
    (data_dir / "redis").mkdir()
    with (
        socket.socket(socket.AF_UNIX) as dead_redis,
        socket.socket(socket.AF_UNIX) as dead_channel,
    ):
        dead_redis.bind(str(data_dir / "redis" / "redis.sock"))
        dead_channel.bind(str(channel_socket(data_dir)))
        started = time.monotonic()
        assert hook(data_dir, "claude-code", "session-start", payload) == ""
        elapsed = time.monotonic() - started
    assert elapsed < STARTUP_ALLOWANCE, elapsed


# What starting the Python process may take on a loaded machine, beside the hook's own budget.
STARTUP_ALLOWANCE = 4.0


def test_a_daemon_that_does_not_answer_costs_the_hook_its_budget_and_no_more(
    data_dir: Path,
) -> None:
    """The daemon's channel accepts the hook but never answers: the hook gives up at its
    budget, prints nothing and exits 0."""
    with socket.socket(socket.AF_UNIX) as mute:
        mute.bind(str(channel_socket(data_dir)))
        mute.listen(4)
        payload = {"session_id": "s", "cwd": str(data_dir), "source": "startup"}
        started = time.monotonic()
        out = hook(
            data_dir, "claude-code", "session-start", payload, MEMORYD_HOOK_TIMEOUT_SECONDS="1"
        )
        elapsed = time.monotonic() - started
    assert out == ""
    assert 1.0 <= elapsed < 1.0 + STARTUP_ALLOWANCE, elapsed


@pytest.mark.e2e
async def test_records_of_sessions_idle_past_their_days_are_deleted(daemon: Daemon) -> None:
    folder = daemon.data / "hooks"
    folder.mkdir(exist_ok=True)
    old, recent = folder / "claude-code-old.json", folder / "claude-code-recent.json"
    for path in (old, recent):
        path.write_text('{"injected": []}')
    eight_days = time.time() - 8 * 86400
    os.utime(old, (eight_days, eight_days))
    # Not a hook's work (it would read the folder on every prompt): the prune's.
    payload = {"session_id": "s", "cwd": str(daemon.repo)}
    hook(daemon.data, "claude-code", "session-start", payload, **PATIENT)
    assert old.exists()

    def prune(*flags: str) -> dict:
        done = subprocess.run(
            [MEMORYD, "prune", "--json", *flags],
            capture_output=True,
            text=True,
            env=clean_env(daemon.data),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert prune("--dry-run")["hook_records"] == 1 and old.exists()
    assert prune()["hook_records"] == 1
    assert not old.exists() and recent.exists()


# --- the real Claude Code, headless, against a scripted model --------------------------------


def patient_hooks(home: Path) -> None:
    """The hooks run under the client's environment (this HOME): give them time on a loaded
    machine."""
    config = home / ".config" / "memoryd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("hook_timeout_seconds = 20\n")


async def edit_in_history(daemon: Daemon, path: Path, session: str) -> dict:
    """The session's summary in `path`'s history, once the daemon has its edit of `path`."""
    deadline = time.monotonic() + 120
    async with client.connect(load_settings(data_dir=daemon.data)) as memoryd:
        while True:
            history = await memoryd.history(str(path))
            mine = [s for s in history["sessions"] if s["session"] == session]
            if mine and any(a["verb"] == "MODIFIES" for a in mine[0]["actions"]):
                return mine[0]
            assert time.monotonic() < deadline, f"the edit never reached the history: {history}"
            await asyncio.sleep(1)


@pytest.mark.e2e
async def test_claude_code_calls_memoryd_gets_its_hook_context_and_its_edit_is_remembered(
    daemon: Daemon, tmp_path: Path
) -> None:
    clients = install_clients()
    home = ClaudeHome(clients, tmp_path)
    env = {"HOME": str(home.home), "CLAUDE_CONFIG_DIR": str(home.config_dir)}
    done = subprocess.run(
        [MEMORYD, "integrate", "claude-code"],
        capture_output=True,
        text=True,
        env=clean_env(daemon.data) | env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    patient_hooks(home.home)

    note = "Decision: WORDS.md keeps one word per line, in upper case once reviewed."
    memory = await remember(daemon, note)
    words = daemon.repo / "WORDS.md"
    words.write_text("alpha\nbeta\n")
    script = [
        tool_use("Read", {"file_path": str(words)}),
        tool_use("Edit", {"file_path": str(words), "old_string": "beta", "new_string": "BETA"}),
        tool_use(
            "mcp__memoryd__search",
            {"query": "parse a redis connection DSN url", "kind": "code", "limit": 2},
        ),
        text("Done."),
    ]
    allowed = ["Read", "Edit", "mcp__memoryd__search"]
    with ScriptedAnthropic(script) as server:
        run = home.prompt(
            "how do we parse a redis connection DSN url?",
            server,
            cwd=daemon.repo,
            allowed_tools=allowed,
            timeout=120,
        )
    assert run.result.returncode == 0, run.result.stderr
    assert run.output()["result"] == "Done."
    assert words.read_text() == "alpha\nBETA\n"
    session = run.output()["session_id"]

    first, *_, last = server.main_requests
    sent = request_text(first)
    assert (
        "SessionStart hook additional context: memoryd: recent agent work in this repository "
        f"({daemon.project}):"
    ) in sent
    assert f"- decision [{memory}] (agent note, " in sent and note in sent
    assert (
        "UserPromptSubmit hook additional context: memoryd: earlier work related to this "
        "prompt (ids work with memoryd's get):"
    ) in sent
    assert "mcp__memoryd__search" in tool_names(first)
    # memoryd's answer reached the model as plain text.
    answer = json.dumps(tool_results(last)[-1]["content"])
    assert f"[{daemon.project}] connections.py:55-80 RedisSettings.from_dsn" in answer

    # Resuming fires SessionStart again: its transcript_path queues the whole session, and
    # the edit is in the file's history.
    with ScriptedAnthropic([text("Still done.")]) as server:
        resumed = home.prompt(
            "anything else?", server, cwd=daemon.repo, extra_args=["--resume", session]
        )
    assert resumed.result.returncode == 0, resumed.result.stderr
    summary = await edit_in_history(daemon, words, session)
    assert summary["agent"] == "claude-code"
    assert summary["goal"] == "how do we parse a redis connection DSN url?"
    assert [(a["verb"], a["outcome"], a["tool"]) for a in summary["actions"]] == [
        ("READS", "ok", "read"),
        ("MODIFIES", "ok", "edit"),
    ]


# --- the real Codex, headless, against a scripted model -------------------------------------


def integrated_codex(daemon: Daemon, tmp_path: Path) -> CodexHome:
    """A Codex home after `memoryd integrate codex` and the hook trust it asks for."""
    codex = CodexHome(install_clients(), tmp_path)
    env = {"HOME": str(codex.home), "CODEX_HOME": str(codex.codex_home)}
    done = subprocess.run(
        [MEMORYD, "integrate", "codex"],
        capture_output=True,
        text=True,
        env=clean_env(daemon.data) | env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Codex runs a hook only once you trust it" in done.stdout
    # The trust step integrate asks for, taken the way Codex's /hooks screen takes it.
    assert codex.trust_hooks(daemon.repo) == [
        f"{codex.hooks_path}:{event}:0:0"
        for event in ("post_tool_use", "pre_tool_use", "session_end", "session_start", "stop")
    ]
    patient_hooks(codex.home)
    return codex


async def replay_through(daemon: Daemon, session: str, last: str) -> list[tuple[str, ...]]:
    """The session's events (kind, tool, text) once the daemon has read its transcript up to
    the assistant message `last`. The startup hook may have had the file read before the
    edits: only the resumed session's hook makes sure the daemon reads on."""
    deadline = time.monotonic() + 120
    async with client.connect(load_settings(data_dir=daemon.data)) as memoryd:
        while True:
            try:
                replay = await memoryd.session(session)
            except NotFound:
                replay = {"events": []}
            events = [(e["kind"], e["tool"], e["text"]) for e in replay["events"]]
            if ("assistant_message", None, last) in events:
                return events
            assert time.monotonic() < deadline, f"the daemon never read {last!r}: {events}"
            await asyncio.sleep(1)


@pytest.mark.e2e
async def test_codex_calls_memoryd_gets_its_hook_context_and_its_edit_is_remembered(
    daemon: Daemon, tmp_path: Path
) -> None:
    codex = integrated_codex(daemon, tmp_path)

    note = "Decision: CODEX.md keeps one word per line, in upper case once reviewed."
    memory = await remember(daemon, note)
    words = daemon.repo / "CODEX.md"
    words.write_text("alpha\nbeta\n")
    query = {"query": "parse a redis connection DSN url", "kind": "code", "limit": 2}
    async with mcp_stdio(daemon.data, daemon.repo) as mcp:
        error, answer = await call(mcp, "search", **query)
    assert not error
    script = [
        tool_use("mcp__memoryd__search", query),
        tool_use("exec_command", {"cmd": "sed -i s/beta/BETA/ CODEX.md"}),
        text("Done."),
    ]
    prompt = "how do we parse a redis connection DSN url?"
    # `required = true`, which integrate wrote: Codex waits for memoryd's server before its
    # first request, so that request lists memoryd's tools (docs/clients.md).
    with ScriptedOpenAI(script, time_limit=120) as server:
        run = codex.exec(prompt, server, cwd=daemon.repo, timeout=120)
    assert run.result.returncode == 0, run.result.stderr
    assert server.unused_turns == []
    assert words.read_text() == "alpha\nBETA\n"

    first, second, _ = server.main_requests
    sent = request_text(first)
    assert f"memoryd: recent agent work in this repository ({daemon.project}):" in sent
    assert f"- decision [{memory}] (agent note, " in sent and note in sent
    assert "mcp__memoryd__search" in tool_names(first)
    # memoryd's answer reached the model whole.
    [search_output] = function_call_outputs(second)
    assert search_output["call_id"] == "call_scripted0001"
    header, body = search_output["output"]
    assert re.fullmatch(r"Wall time: \d+\.\d+ seconds\nOutput:", header["text"])
    assert body == {"type": "input_text", "text": answer}

    # Resuming fires SessionStart again: its transcript_path (the rollout) is queued, the
    # daemon reads it on from where it stopped, and the edit is in the file's history.
    with ScriptedOpenAI([text("Still done.")]) as server:
        resumed = codex.exec("anything else?", server, cwd=daemon.repo, resume=run.thread_id)
    assert resumed.result.returncode == 0, resumed.result.stderr
    [rollout] = run.transcripts
    assert resumed.transcripts == [rollout]
    # The replay has both calls, memoryd's under its MCP name. (Whether the resumed turn is in
    # it yet depends on when the daemon read the file: the hook runs before that turn.)
    events = await replay_through(daemon, run.thread_id, "Done.")
    search = "mcp:memoryd:search"
    assert events[:2] == [
        ("user_prompt", None, prompt),
        ("tool_call", search, f"mcp__memoryd__search {json.dumps(query)}"),
    ]
    # memoryd's answer (memories stored already) is not stored again.
    assert events[2] == ("tool_result", search, OWN_ANSWER)
    assert events[3:5] == [
        ("tool_call", "exec_command", "exec_command: sed -i s/beta/BETA/ CODEX.md"),
        ("assistant_message", None, "Done."),
    ]
    summary = await edit_in_history(daemon, words, run.thread_id)
    assert (summary["agent"], summary["goal"]) == ("codex", prompt)
    assert summary["source"] == str(rollout)
    assert [(a["verb"], a["outcome"], a["tool"], a["detail"]) for a in summary["actions"]] == [
        ("MODIFIES", "ok", "exec_command", "sed -i s/beta/BETA/ CODEX.md")
    ]


@pytest.mark.e2e
async def test_codex_finds_memoryd_by_tool_search_and_its_patches_are_remembered(
    daemon: Daemon, tmp_path: Path
) -> None:
    """On a model Codex ships metadata for, as real users run it: MCP tools are deferred
    behind tool_search, and edits go through apply_patch."""
    codex = integrated_codex(daemon, tmp_path)
    words = daemon.repo / "PATCHED.md"
    words.write_text("alpha\nbeta\n")
    # The answer Codex will get, once the watcher indexed the new file (memoryd mcp answers
    # before it would have: the history must not change between this call and Codex's).
    deadline = time.monotonic() + 120
    async with mcp_stdio(daemon.data, daemon.repo) as mcp:
        while True:
            error, answer = await call(mcp, "file_history", path=str(words))
            if error or "current chunks:" in answer:
                break
            assert time.monotonic() < deadline, f"PATCHED.md was never indexed: {answer}"
            await asyncio.sleep(0.5)
    assert not error
    applies = (
        "*** Begin Patch\n*** Update File: PATCHED.md\n@@\n alpha\n-beta\n+BETA\n*** End Patch\n"
    )
    refused = applies.replace("-beta", "-gamma")  # no such line: Codex refuses the patch
    script = [
        tool_use("tool_search", {"query": "history of a file: sessions that touched it"}),
        tool_use("mcp__memoryd__file_history", {"path": str(words)}),
        tool_use("apply_patch", {"input": applies}),
        tool_use("apply_patch", {"input": refused}),
        text("Patched."),
    ]
    prompt = "upper-case beta in PATCHED.md"
    with ScriptedOpenAI(script, time_limit=120) as server:
        run = codex.exec(
            prompt,
            server,
            cwd=daemon.repo,
            model=CODEX_CATALOG_MODEL,
            timeout=120,
        )
    assert run.result.returncode == 0, run.result.stderr
    assert server.unused_turns == []
    assert words.read_text() == "alpha\nBETA\n"
    first, second, third, *_, last = server.main_requests
    assert "apply_patch" in tool_names(first)
    assert not any(name.startswith("mcp__memoryd") for name in tool_names(first))
    # Codex's own search over the deferred tools found memoryd's by their descriptions.
    [found] = tool_search_outputs(second)
    assert tool_names(found)[0] == "mcp__memoryd__file_history"
    [history_output] = function_call_outputs(third)
    assert history_output["call_id"] == "call_scripted0002"
    header, body = history_output["output"]
    assert re.fullmatch(r"Wall time: \d+\.\d+ seconds\nOutput:", header["text"])
    assert body == {"type": "input_text", "text": answer}
    _, done, failed = function_call_outputs(last)
    assert re.fullmatch(
        r"Exit code: 0\nWall time: \d+(\.\d+)? seconds\nOutput:\n"
        r"Success\. Updated the following files:\nM PATCHED\.md\n",
        done["output"],
    )
    assert failed["output"] == (
        f"apply_patch verification failed: Failed to find expected lines in {words}:\nalpha\ngamma"
    )

    with ScriptedOpenAI([text("Still patched.")]) as server:
        resumed = codex.exec(
            "anything else?",
            server,
            cwd=daemon.repo,
            model=CODEX_CATALOG_MODEL,
            resume=run.thread_id,
        )
    assert resumed.result.returncode == 0, resumed.result.stderr
    events = await replay_through(daemon, run.thread_id, "Patched.")
    assert [(kind, text) for kind, _, text in events[:8]] == [
        ("user_prompt", prompt),
        ("tool_call", f"mcp__memoryd__file_history {json.dumps({'path': str(words)})}"),
        ("tool_result", OWN_ANSWER),
        ("tool_call", "apply_patch\n" + applies.rstrip("\n")),
        ("tool_result", "Success. Updated the following files:\nM PATCHED.md"),
        ("tool_call", "apply_patch\n" + refused.rstrip("\n")),
        ("error", failed["output"]),
        ("assistant_message", "Patched."),
    ]
    tools = [events[n][1] for n in (1, 2, 3, 5, 6)]
    assert tools == ["mcp:memoryd:file_history"] * 2 + ["apply_patch"] * 3
    summary = await edit_in_history(daemon, words, run.thread_id)
    assert [(a["verb"], a["outcome"], a["tool"], a["detail"]) for a in summary["actions"]] == [
        ("MODIFIES", "ok", "apply_patch", "update"),
        ("MODIFIES", "error", "apply_patch", "update"),
    ]
    [error] = summary["errors"]
    assert (error["tool"], error["error"]) == (
        "apply_patch",
        "error: apply_patch verification failed: Failed to find expected lines in <path>:",
    )
