"""Capture that never misses, with the real clients headless against scripted models: a daemon
started before any agent's transcript folder exists captures the first sessions written there
without a restart; a transcript a hook names before it exists is ingested once it appears;
after `memoryd integrate` in a fresh HOME (no watcher follows its folders) each client's session
reaches memory through the hooks alone, and `claude -p` calls memoryd's search without being
told which tools it may use; doctor says when a watched folder holds what is not ingested."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memoryd import client
from memoryd.config import load_settings
from memoryd.errors import NotFound
from memoryd.results import SessionReplay
from tests.clients import (
    ClaudeHome,
    CodexHome,
    GeminiHome,
    ScriptedAnthropic,
    ScriptedGemini,
    ScriptedOpenAI,
    install_clients,
    text,
    tool_results,
    tool_use,
)
from tests.conftest import MEMORYD, env_without, git_init, wait_live

FIXTURE = (
    Path(__file__).parent
    / "fixtures"
    / "transcripts"
    / "claude-code"
    / "-src-experiments-claude_p"
    / "2b4ed4c0-b905-41de-9238-273db3ec737a.jsonl"
)
# What a real client may take on a loaded machine, and the daemon to read what it wrote.
CLIENT_SECONDS = 180.0
CAPTURE_SECONDS = 120.0


@dataclass(frozen=True)
class Daemon:
    data: Path
    root: Path  # the HOME the daemon was started with (root / "home")


def daemon_env(data: Path, home: Path) -> dict[str, str]:
    """The daemon's environment: the agents' default transcript folders, under `home`."""
    return env_without("CLAUDE_", "CODEX_", "GEMINI_") | {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CODEX_HOME": str(home / ".codex"),
        "MEMORYD_CONFIG": "/nonexistent/memoryd.toml",
        "MEMORYD_DATA_DIR": str(data),
    }


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, short_tmp: Path) -> Iterator[Daemon]:
    """`memoryd run` in a HOME where no agent has run yet: none of their folders exist."""
    root = tmp_path_factory.mktemp("capture")
    home = root / "home"
    home.mkdir()
    data = Path(tempfile.mkdtemp(dir=short_tmp))
    process = subprocess.Popen(
        [MEMORYD, "run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=daemon_env(data, home),
    )
    try:
        asyncio.run(wait_live(data, time.monotonic() + 300))
        yield Daemon(data, root)
    finally:
        process.send_signal(signal.SIGTERM)
        log, _ = process.communicate(timeout=120)
        shutil.rmtree(data, ignore_errors=True)
    # Said at the start, and again when a folder appeared (those the tests that ran made).
    for folder in (
        home / ".claude" / "projects",
        home / ".codex" / "sessions",
        home / ".gemini" / "tmp",
    ):
        assert f"transcript folder {folder} does not exist yet; watching for it" in log
        if folder.exists():
            assert f"transcript folder {folder} appeared; watching it" in log


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    git_init(root)
    return root


async def captured(daemon: Daemon, session: str) -> SessionReplay:
    """The session as the daemon has it, once it has it (bounded)."""
    deadline = time.monotonic() + CAPTURE_SECONDS
    async with client.connect(load_settings(data_dir=daemon.data)) as memoryd:
        while True:
            try:
                return await memoryd.session(session)
            except NotFound:
                assert time.monotonic() < deadline, f"session {session} was never captured"
                await asyncio.sleep(0.5)


@pytest.mark.e2e
async def test_claude_codes_first_session_is_captured_without_a_restart(
    daemon: Daemon, repo: Path
) -> None:
    home = ClaudeHome(install_clients(), daemon.root)
    assert not (home.config_dir / "projects").exists()
    with ScriptedAnthropic([text("Hello back.")], time_limit=CLIENT_SECONDS) as server:
        run = home.prompt("say hello", server, cwd=repo, timeout=CLIENT_SECONDS)
    assert run.result.returncode == 0, run.result.stderr
    [transcript] = run.transcripts
    replay = await captured(daemon, run.output()["session_id"])
    assert (replay["agent"], replay["source"]) == ("claude-code", str(transcript))
    assert replay["goal"] == "say hello"


@pytest.mark.e2e
async def test_codexs_first_session_is_captured_without_a_restart(
    daemon: Daemon, repo: Path
) -> None:
    codex = CodexHome(install_clients(), daemon.root)
    assert not (codex.codex_home / "sessions").exists()
    with ScriptedOpenAI([text("Hello back.")], time_limit=CLIENT_SECONDS) as server:
        run = codex.exec("say hello", server, cwd=repo, timeout=CLIENT_SECONDS)
    assert run.result.returncode == 0, run.result.stderr
    [rollout] = run.transcripts
    replay = await captured(daemon, run.thread_id)
    assert (replay["agent"], replay["source"]) == ("codex", str(rollout))
    assert replay["goal"] == "say hello"


@pytest.mark.e2e
async def test_gemini_clis_first_session_is_captured_without_a_restart(
    daemon: Daemon, repo: Path
) -> None:
    gemini = GeminiHome(install_clients(), daemon.root)
    assert not (gemini.gemini_dir / "tmp").exists()
    gemini.trust_folder(repo)  # headless Gemini runs only in a trusted folder
    with ScriptedGemini([text("Hello back.")], time_limit=CLIENT_SECONDS) as server:
        run = gemini.prompt("say hello", server, cwd=repo, timeout=CLIENT_SECONDS)
    assert run.result.returncode == 0, run.result.stderr
    [chat] = run.transcripts
    replay = await captured(daemon, run.output()["session_id"])
    assert (replay["agent"], replay["source"]) == ("gemini", str(chat))
    assert replay["goal"] == "say hello"


def hook(daemon: Daemon, event: str, payload: dict[str, object]) -> str:
    done = subprocess.run(
        [MEMORYD, "hook", "claude-code", event],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=daemon_env(daemon.data, daemon.root / "home") | {"MEMORYD_HOOK_TIMEOUT_SECONDS": "20"},
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return done.stdout


@pytest.mark.e2e
async def test_a_transcript_a_hook_names_before_it_exists_is_ingested_once_it_appears(
    daemon: Daemon, tmp_path: Path
) -> None:
    # In no watched folder: only the hook tells the daemon about it.
    transcript = tmp_path / "elsewhere" / FIXTURE.name
    payload = {
        "session_id": "2b4ed4c0-b905-41de-9238-273db3ec737a",
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
        "source": "startup",
    }
    assert hook(daemon, "session-start", payload) == ""
    transcript.parent.mkdir()
    shutil.copy(FIXTURE, transcript)
    replay = await captured(daemon, "2b4ed4c0")
    assert replay["source"] == str(transcript)
    assert replay["goal"].startswith("Search if claude -p can make use of WebSearch")


def integrate(daemon: Daemon, client_name: str, home: Path) -> str:
    """`memoryd integrate CLIENT` in a fresh HOME (one the daemon does not watch); what it
    printed."""
    env = daemon_env(daemon.data, home)
    done = subprocess.run(
        [MEMORYD, "integrate", client_name], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    # The hooks run in the client's environment: time enough on a loaded machine.
    config = home / ".config" / "memoryd" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("hook_timeout_seconds = 20\n")
    return done.stdout


@pytest.mark.e2e
async def test_after_integrate_codexs_session_reaches_memory_through_its_hooks(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    codex = CodexHome(install_clients(), tmp_path)
    integrate(daemon, "codex", codex.home)
    # The trust step integrate asks for, taken the way Codex's /hooks screen takes it.
    assert codex.trust_hooks(repo) == [
        f"{codex.hooks_path}:{event}:0:0"
        for event in ("post_tool_use", "pre_tool_use", "session_end", "session_start", "stop")
    ]
    with ScriptedOpenAI([text("Hello back.")], time_limit=CLIENT_SECONDS) as server:
        run = codex.exec("say hello", server, cwd=repo, timeout=CLIENT_SECONDS)
    assert run.result.returncode == 0, run.result.stderr
    [rollout] = run.transcripts
    replay = await captured(daemon, run.thread_id)
    assert (replay["agent"], replay["source"], replay["goal"]) == (
        "codex",
        str(rollout),
        "say hello",
    )


@pytest.mark.e2e
async def test_after_integrate_gemini_clis_session_reaches_memory_through_its_hooks(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    gemini = GeminiHome(install_clients(), tmp_path)
    integrate(daemon, "gemini", gemini.home)
    gemini.trust_folder(repo)
    with ScriptedGemini([text("Hello back.")], time_limit=CLIENT_SECONDS) as server:
        run = gemini.prompt("say hello", server, cwd=repo, timeout=CLIENT_SECONDS)
    assert run.result.returncode == 0, run.result.stderr
    [chat] = run.transcripts
    replay = await captured(daemon, run.output()["session_id"])
    assert (replay["agent"], replay["source"], replay["goal"]) == ("gemini", str(chat), "say hello")


@pytest.mark.e2e
async def test_after_integrate_claude_p_calls_memoryd_unasked_and_hooks_capture_the_session(
    daemon: Daemon, repo: Path, tmp_path: Path
) -> None:
    # A fresh HOME the daemon does not watch: its session reaches memory through the hooks.
    home = ClaudeHome(install_clients(), tmp_path)
    assert (
        "Claude Code may call memoryd's search, get, file_history, related, impact, session, "
        "timeline, "
        "recent_activity, status, remember without asking (permissions.allow); forget still asks."
    ) in integrate(daemon, "claude-code", home.home)

    script = [tool_use("mcp__memoryd__search", {"query": "say hello"}), text("Searched.")]
    with ScriptedAnthropic(script, time_limit=CLIENT_SECONDS) as server:
        run = home.prompt("find hello", server, cwd=repo, timeout=CLIENT_SECONDS)
    assert run.result.returncode == 0, run.result.stderr
    assert run.output()["result"] == "Searched."
    # No --allowedTools: the rule integrate wrote let the call through, and memoryd answered.
    [result] = tool_results(server.main_requests[-1])
    assert result.get("is_error") is not True, result
    [block] = result["content"]
    assert block["text"].startswith("search 'say hello': "), block
    [transcript] = run.transcripts
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    [recorded] = [
        item
        for r in records
        if r.get("type") == "user" and isinstance(r["message"]["content"], list)
        for item in r["message"]["content"]
        if item.get("type") == "tool_result"
    ]
    assert recorded["content"] == result["content"]

    replay = await captured(daemon, run.output()["session_id"])
    assert (replay["agent"], replay["source"]) == ("claude-code", str(transcript))
    assert replay["goal"] == "find hello"


def doctor_transcripts(daemon: Daemon) -> dict[str, dict[str, str]]:
    """`memoryd doctor --check transcripts` against the daemon: each folder's check."""
    done = subprocess.run(
        [MEMORYD, "doctor", "--check", "transcripts", "--json"],
        capture_output=True,
        text=True,
        env=daemon_env(daemon.data, daemon.root / "home"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return {c["summary"].split(" ")[0]: c for c in json.loads(done.stdout)}


def memoryd_cli(daemon: Daemon, *args: str) -> None:
    env = daemon_env(daemon.data, daemon.root / "home")
    done = subprocess.run([MEMORYD, *args], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.e2e
def test_doctor_says_when_a_watched_folder_holds_files_not_ingested(daemon: Daemon) -> None:
    projects = daemon.root / "home" / ".claude" / "projects"
    folder = projects / "-tmp-doctor"
    folder.mkdir(parents=True, exist_ok=True)
    # Paused, the daemon queues nothing: the transcript stays behind for as long as it takes.
    memoryd_cli(daemon, "pause")
    try:
        shutil.copy(FIXTURE, folder / FIXTURE.name)
        check = doctor_transcripts(daemon)[str(projects)]
        size = FIXTURE.stat().st_size
        assert (check["level"], check["fix"]) == (
            "warn",
            "memoryd is behind or does not read them: see `memoryd status` and its log "
            "(a session being written right now catches up within seconds)",
        )
        assert check["summary"].endswith(f": {size} bytes in 1 files not ingested yet")
    finally:
        memoryd_cli(daemon, "resume", "--catch-up")
    deadline = time.monotonic() + CAPTURE_SECONDS
    while (check := doctor_transcripts(daemon)[str(projects)])["level"] != "ok":
        assert time.monotonic() < deadline, check
    assert check["summary"].startswith(f"{projects} (")
