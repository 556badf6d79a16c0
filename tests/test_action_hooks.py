"""Context at the moment of action, with the real clients headless against scripted models:
before an edit, what earlier sessions did to the file (and what broke after); after a failure
seen before, what fixed it then (RESOLVED_BY). One memory across agents: what a Claude Code
session broke and fixed reaches Codex before it edits the same file."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd import client
from memoryd.config import load_settings
from memoryd.scan import project_id_for
from tests.clients import (
    CODEX_CATALOG_MODEL,
    ClaudeHome,
    GeminiHome,
    ScriptedAnthropic,
    ScriptedGemini,
    ScriptedOpenAI,
    install_clients,
    text,
    tool_use,
)
from tests.conftest import MEMORYD, git_init, wait_live
from tests.test_agents import (
    Daemon,
    clean_env,
    integrated_codex,
    memoryd,
    remember,
)
from tests.test_agents import patient_hooks as patient

GOOD = "import json\n\nprint(json.dumps({'total': 3}))\n"
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"
GOAL = "make the script faster"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, short_tmp: Path) -> Iterator[Daemon]:
    """`memoryd run` on a small repository of two scripts."""
    repo = tmp_path_factory.mktemp("action") / "calc"
    repo.mkdir()
    for name in ("calc.py", "total.py", "mean.py"):
        (repo / name).write_text(GOOD)
    git_init(repo)
    data = Path(tempfile.mkdtemp(dir=short_tmp))
    process = subprocess.Popen(
        [MEMORYD, "run", "--repo", str(repo)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(data),
    )
    try:
        asyncio.run(wait_live(data, time.monotonic() + 300))
        memoryd(data, "index", str(repo))
        yield Daemon(data, repo, project_id_for(repo))
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=120)
        shutil.rmtree(data, ignore_errors=True)


def integrate(daemon: Daemon, agent: str, home: Path, **env: str) -> None:
    """`memoryd integrate AGENT` in a client's home, with hooks patient on a loaded machine."""
    done = subprocess.run(
        [MEMORYD, "integrate", agent],
        capture_output=True,
        text=True,
        env=clean_env(daemon.data, HOME=str(home), **env),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    patient(home)


def integrated_claude(daemon: Daemon, root: Path) -> ClaudeHome:
    home = ClaudeHome(install_clients(), root)
    integrate(daemon, "claude-code", home.home, CLAUDE_CONFIG_DIR=str(home.config_dir))
    return home


def contexts(body: dict, event: str) -> list[str]:
    """The hook contexts of one event a Claude Code request carries (its history's too)."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            pattern = rf"{event}(?::\w+)? hook additional context: (.*?)(?=\n\n|\Z)"
            found.extend(re.findall(pattern, value, re.S))
        elif isinstance(value, dict):
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk(body.get("messages"))
    return found


def break_and_fix(daemon: Daemon, root: Path, name: str, good: str, bad: str) -> str:
    """A Claude Code session that broke `name`, saw it fail, fixed it and saw it run; its
    transcript ingested. Returns the session's id."""
    home = integrated_claude(daemon, root)
    path = daemon.repo / name
    edit = {"file_path": str(path), "old_string": good, "new_string": bad}
    script = [
        tool_use("Read", {"file_path": str(path)}),
        tool_use("Edit", edit),
        tool_use("Bash", {"command": f"python3 {name}"}),
        tool_use("Edit", edit | {"old_string": bad, "new_string": good}),
        tool_use("Bash", {"command": f"python3 {name}"}),
        text("Fixed."),
    ]
    with ScriptedAnthropic(script) as server:
        run = home.prompt(
            GOAL, server, cwd=daemon.repo, allowed_tools=["Read", "Edit", "Bash"], timeout=180
        )
    assert run.result.returncode == 0, run.result.stderr
    assert server.unused_turns == []
    assert path.read_text() == GOOD
    # Nothing was known of the file or of its failure: no hook said anything.
    last = server.main_requests[-1]
    assert contexts(last, "PreToolUse") == contexts(last, "PostToolUseFailure") == []
    [transcript] = run.transcripts
    memoryd(daemon.data, "ingest", str(transcript))
    return str(run.output()["session_id"])


async def resolved(daemon: Daemon, output: str, session: str) -> dict:
    """What memoryd knows of the failure that printed `output`, once `session`'s fix of it
    is stored."""
    deadline = time.monotonic() + 120
    async with client.connect(load_settings(data_dir=daemon.data)) as memoryd:
        while True:
            known = await memoryd.error_context(daemon.project, output, "")
            if any(fix["session"] == session for fix in known.get("resolutions", [])):
                return known
            assert time.monotonic() < deadline, f"the fix never reached memoryd: {known}"
            await asyncio.sleep(1)


def before_edit(name: str, session: str, error: str, code: str = "current") -> str:
    """The pre-edit context of `name` after `session` broke and fixed it (a pattern); `code`:
    how the file stands against what the session left (a pattern)."""
    return (
        f"memoryd: before you edit {name}, what earlier sessions did to it:\n"
        f"- session {session} \\(claude-code, {WHEN}\\) edited it \\(code {code}\\); "
        f"goal: {GOAL}; "
        f"then {re.escape(error)} \\(#\\d+\\): fixed in session {session} \\({WHEN}\\), "
        f"modified {name}, then `python3 {name}` succeeded"
    )


def after_failure(name: str, session: str, error: str) -> str:
    """The post-failure context of the error `session` met and fixed (a pattern)."""
    return (
        f"memoryd: this failure \\({re.escape(error)}\\) happened before here:\n"
        f"- seen once, in session {session} \\(claude-code, {WHEN}\\)\n"
        f"- fixed in session {session} \\({WHEN}\\): modified {name}, "
        f"then `python3 {name}` succeeded"
    )


@pytest.mark.e2e
async def test_claude_code_is_told_before_the_edit_and_after_the_failure(
    daemon: Daemon, tmp_path: Path
) -> None:
    error = "ModuleNotFoundError: No module named 'jsonx'"
    good, bad = "import json\n", "import jsonx as json\n"
    first = break_and_fix(daemon, tmp_path / "first", "calc.py", good, bad)
    output = f"Exit code 1\nTraceback (most recent call last):\n{error}"
    known = await resolved(daemon, output, first)
    assert (known["error"], known["times"]) == (error, 1)
    assert [(f["session"], f["files"], f["detail"]) for f in known["resolutions"]] == [
        (first, ["calc.py"], "python3 calc.py")
    ]

    # A decision naming calc.py: the session-start briefing brings it, so the pre-edit
    # context does not bring it again.
    note = "Decision: calc.py keeps the standard json module."
    memory = await remember(daemon, note)
    home = integrated_claude(daemon, tmp_path / "second")
    calc = daemon.repo / "calc.py"
    edit = {"file_path": str(calc), "old_string": good, "new_string": bad}
    script = [
        tool_use("Read", {"file_path": str(calc)}),
        tool_use("Edit", edit),
        tool_use("Bash", {"command": "python3 calc.py"}),
        tool_use("Edit", edit | {"old_string": bad, "new_string": good}),
        text("Done."),
    ]
    with ScriptedAnthropic(script) as server:
        run = home.prompt(
            "try jsonx again", server, cwd=daemon.repo, allowed_tools=["Read", "Edit", "Bash"],
            timeout=180,
        )  # fmt: skip
    assert run.result.returncode == 0, run.result.stderr
    assert server.unused_turns == []
    requests = server.main_requests
    [briefing] = contexts(requests[0], "SessionStart")
    assert f"- decision [{memory}] (agent note, " in briefing and note in briefing
    # The request right after the first Edit carries what the earlier session did to calc.py.
    assert contexts(requests[1], "PreToolUse") == []
    [before] = contexts(requests[2], "PreToolUse")
    assert re.fullmatch(before_edit("calc.py", first, error), before), before
    assert len(before) <= 600
    # The request right after the failed run: where the error was seen and what fixed it.
    assert contexts(requests[2], "PostToolUseFailure") == []
    [after] = contexts(requests[3], "PostToolUseFailure")
    assert re.fullmatch(after_failure("calc.py", first, error), after), after
    # Never the same item twice in a session: the second Edit was told nothing new.
    assert contexts(requests[4], "PreToolUse") == [before]


@pytest.mark.e2e
async def test_what_claude_code_broke_reaches_codex_before_its_edit_and_after_its_failure(
    daemon: Daemon, tmp_path: Path
) -> None:
    error = "ModuleNotFoundError: No module named 'jsony'"
    good, bad = "import json\n", "import jsony as json\n"
    first = break_and_fix(daemon, tmp_path / "claude", "total.py", good, bad)
    await resolved(daemon, f"Traceback (most recent call last):\n{error}\n", first)

    codex = integrated_codex(daemon, tmp_path / "codex")
    line = "import json"

    def patch(old: str, new: str) -> str:
        return f"*** Begin Patch\n*** Update File: total.py\n@@\n-{old}\n+{new}\n*** End Patch\n"

    broken = bad.rstrip("\n")
    script = [
        tool_use("apply_patch", {"input": patch(line, broken)}),
        tool_use("exec_command", {"cmd": "python3 total.py"}),
        tool_use("apply_patch", {"input": patch(broken, line)}),
        text("Done."),
    ]
    with ScriptedOpenAI(script, time_limit=180) as server:
        run = codex.exec(
            "try jsony in total.py", server, cwd=daemon.repo, model=CODEX_CATALOG_MODEL,
            timeout=180,
        )  # fmt: skip
    assert run.result.returncode == 0, run.result.stderr
    assert server.unused_turns == []
    assert (daemon.repo / "total.py").read_text() == GOOD

    def told(body: dict, head: str) -> list[str]:
        """memoryd's developer messages in a Codex request (its history's too)."""
        return [
            part["text"]
            for item in body.get("input") or []
            if item.get("role") == "developer"
            for part in item.get("content") or []
            if part.get("text", "").startswith(head)
        ]

    requests = server.main_requests
    # Before its patch of total.py, what the Claude Code session did to it.
    assert told(requests[0], "memoryd: before you edit") == []
    [before] = told(requests[1], "memoryd: before you edit")
    assert re.fullmatch(before_edit("total.py", first, error), before), before
    # After its failed run, the fix the Claude Code session found.
    assert told(requests[1], "memoryd: this failure") == []
    [after] = told(requests[2], "memoryd: this failure")
    assert re.fullmatch(after_failure("total.py", first, error), after), after
    # The undo patch was told nothing new.
    assert told(requests[3], "memoryd: before you edit") == [before]


@pytest.mark.e2e
async def test_gemini_cli_is_told_with_its_edit_and_after_its_failure(
    daemon: Daemon, tmp_path: Path
) -> None:
    """Gemini CLI 0.61's BeforeTool cannot add context (docs/clients.md): its AfterTool
    brings what is known of the edited file with the edit's result, and the earlier fix
    with a failed command's."""
    error = "ModuleNotFoundError: No module named 'jsonz'"
    good, bad = "import json\n", "import jsonz as json\n"
    first = break_and_fix(daemon, tmp_path / "claude", "mean.py", good, bad)
    await resolved(daemon, f"Traceback (most recent call last):\n{error}", first)

    gemini = GeminiHome(install_clients(), tmp_path / "gemini")
    integrate(daemon, "gemini", gemini.home)
    gemini.trust_folder(daemon.repo)
    mean = daemon.repo / "mean.py"
    edit = {"file_path": str(mean), "old_string": good, "new_string": bad, "instruction": "jsonz"}
    script = [
        tool_use("replace", edit),
        tool_use("run_shell_command", {"command": "python3 mean.py"}),
        tool_use("replace", edit | {"old_string": bad, "new_string": good}),
        text("Done."),
    ]
    with ScriptedGemini(script, time_limit=180) as server:
        run = gemini.prompt("try jsonz in mean.py", server, cwd=daemon.repo, timeout=180)
    assert run.result.returncode == 0, run.result.stderr
    assert server.unused_turns == []
    assert mean.read_text() == GOOD

    def told(body: dict) -> list[str]:
        """memoryd's hook contexts in a Gemini request's tool results (its history's too)."""
        outputs = [
            str(part.get("functionResponse", {}).get("response", {}).get("output", ""))
            for content in body.get("contents") or []
            for part in content.get("parts") or []
        ]
        return re.findall(r"<hook_context>(.*?)</hook_context>", "\n".join(outputs), re.S)

    requests = server.main_requests
    [before] = told(requests[1])
    # Said after Gemini's own edit: the file is what the earlier session left, or (once the
    # indexer has read Gemini's edit) changed since.
    changed = rf"(current|changed since {WHEN} \(\d+ lines\))"
    assert re.fullmatch(before_edit("mean.py", first, error, changed), before), before
    [_, after] = told(requests[2])
    assert re.fullmatch(after_failure("mean.py", first, error), after), after
    assert told(requests[3]) == [before, after]
