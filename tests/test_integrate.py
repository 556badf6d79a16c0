"""`memoryd integrate`: the user's other settings kept, idempotent, reversed byte for byte; what
the real clients make of what it wrote; `memoryd doctor` checking it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.clients import ClaudeHome, Clients, CodexHome, GeminiHome, install_clients
from tests.conftest import MEMORYD, git_init


def run(env_home: dict[str, str], data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "CLAUDE_", "CODEX_"))
    }
    env |= {
        "MEMORYD_CONFIG": "/nonexistent/memoryd.toml",
        "MEMORYD_DATA_DIR": str(data),
        **env_home,
    }
    done = subprocess.run([MEMORYD, *args], capture_output=True, text=True, env=env, timeout=120)
    return done


def group(command: str, matcher: str | None = None, timeout: int = 10) -> dict[str, object]:
    """One hook group as integrate writes it."""
    hooks = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
    return {"matcher": matcher, **hooks} if matcher else hooks


def dump(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"


ALLOWED = [
    f"mcp__memoryd__{tool}"
    for tool in (
        "search",
        "get",
        "file_history",
        "related",
        "impact",
        "session",
        "timeline",
        "recent_activity",
        "status",
        "remember",
    )
]


def test_integrate_keeps_the_users_settings_repeats_nothing_and_reverses(
    tmp_path: Path, data_dir: Path
) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    originals = {
        home / ".claude.json": dump(
            {"userID": "u-1", "mcpServers": {"other": {"type": "stdio", "command": "other"}}}
        ),
        home / ".claude" / "settings.json": dump(
            {
                "model": "opus",
                "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "x"}]}]},
                "permissions": {"allow": ["Bash(ls:*)"], "deny": ["WebFetch"]},
            }
        ),
        home / ".codex" / "config.toml": (
            '# mine\nmodel = "o3"\n\n[mcp_servers.other]\ncommand = "other"\n'
        ),
        home / ".gemini" / "settings.json": dump({"theme": "dark"}),
    }
    for path, text in originals.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    mcp = {"command": MEMORYD, "args": ["mcp", "--data-dir", str(data_dir)]}

    for client in ("claude-code", "codex", "gemini"):
        done = run(env, data_dir, "integrate", client)
        assert done.returncode == 0, done.stderr

    claude = json.loads((home / ".claude.json").read_text())
    assert claude == {
        "userID": "u-1",
        "mcpServers": {
            "other": {"type": "stdio", "command": "other"},
            "memoryd": {"type": "stdio", **mcp, "env": {}},
        },
    }
    hook = f"{MEMORYD} hook claude-code"
    where = f"--data-dir {data_dir}"
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert settings == {
        "model": "opus",
        "hooks": {
            "SessionStart": [
                {"hooks": [{"type": "command", "command": "x"}]},
                group(f"{hook} session-start {where}", "startup|resume|clear|compact"),
            ],
            "UserPromptSubmit": [group(f"{hook} user-prompt-submit {where}")],
            "PreToolUse": [
                group(f"{hook} pre-tool-use {where}", "Edit|Write|MultiEdit|NotebookEdit")
            ],
            "PostToolUseFailure": [group(f"{hook} post-tool-use-failure {where}")],
            "Stop": [group(f"{hook} stop {where}")],
            "SessionEnd": [group(f"{hook} session-end {where}")],
        },
        "permissions": {"allow": ["Bash(ls:*)", *ALLOWED], "deny": ["WebFetch"]},
    }
    assert (home / ".codex" / "config.toml").read_text() == (
        '# mine\nmodel = "o3"\n\n[mcp_servers.other]\ncommand = "other"\n\n'
        f'[mcp_servers.memoryd]\ncommand = "{MEMORYD}"\n'
        f'args = ["mcp", "--data-dir", "{data_dir}"]\n'
        'default_tools_approval_mode = "approve"\n'
        "required = true\n"
    )
    codex = f"{MEMORYD} hook codex"
    assert json.loads((home / ".codex" / "hooks.json").read_text()) == {
        "hooks": {
            "SessionStart": [
                group(f"{codex} session-start {where}", "startup|resume|clear|compact")
            ],
            "PreToolUse": [group(f"{codex} pre-tool-use {where}", "apply_patch")],
            "PostToolUse": [group(f"{codex} post-tool-use {where}")],
            "Stop": [group(f"{codex} stop {where}")],
            "SessionEnd": [group(f"{codex} session-end {where}")],
        }
    }
    # Gemini counts a hook's timeout in milliseconds.
    gemini_hook = f"{MEMORYD} hook gemini"
    assert json.loads((home / ".gemini" / "settings.json").read_text()) == {
        "theme": "dark",
        "mcpServers": {"memoryd": mcp},
        "hooks": {
            "AfterTool": [group(f"{gemini_hook} after-tool {where}", timeout=10000)],
            "AfterAgent": [group(f"{gemini_hook} after-agent {where}", timeout=10000)],
            "SessionEnd": [group(f"{gemini_hook} session-end {where}", timeout=10000)],
        },
    }

    # Again: nothing changes.
    written = {path: path.read_text() for path in [*originals, home / ".codex" / "hooks.json"]}
    for client in ("claude-code", "codex", "gemini"):
        done = run(env, data_dir, "integrate", client)
        assert done.returncode == 0 and "changed" not in done.stdout.replace("unchanged", "")
    assert {path: path.read_text() for path in written} == written

    # A dry run shows the removal and writes nothing.
    preview = run(env, data_dir, "integrate", "claude-code", "--uninstall", "--dry-run")
    assert preview.returncode == 0
    assert f"{home / '.claude.json'}: would change" in preview.stdout
    assert '-    "memoryd": {' in preview.stdout
    assert '-      "mcp__memoryd__search",' in preview.stdout
    preview = run(env, data_dir, "integrate", "codex", "--uninstall", "--dry-run")
    assert "-required = true" in preview.stdout
    assert {path: path.read_text() for path in written} == written

    for client in ("claude-code", "codex", "gemini"):
        done = run(env, data_dir, "integrate", client, "--uninstall")
        assert done.returncode == 0, done.stderr
    assert {path: path.read_text() for path in originals} == originals
    assert not (home / ".codex" / "hooks.json").exists()  # it held only memoryd's hook


def test_a_broken_config_file_is_refused_not_overwritten(tmp_path: Path, data_dir: Path) -> None:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text("{not json")
    done = run({"HOME": str(home)}, data_dir, "integrate", "gemini")
    assert done.returncode == 1
    assert "is not valid JSON" in done.stderr and "fix it first" in done.stderr
    assert (home / ".gemini" / "settings.json").read_text() == "{not json"


def test_doctor_checks_what_integrate_registered(tmp_path: Path, data_dir: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    assert run(env, data_dir, "integrate", "claude-code").returncode == 0
    done = run(env, data_dir, "doctor", "--check", "agents", "--json")
    [check] = json.loads(done.stdout)
    assert (done.returncode, check["level"]) == (0, "ok")
    assert check["summary"] == (
        "registered in claude-code (7 entries); every command runs, hooks answer"
    )
    # memoryd moved: the registered path no longer runs.
    config = tmp_path / "home" / ".claude.json"
    data = json.loads(config.read_text())
    data["mcpServers"]["memoryd"]["command"] = "/nonexistent/memoryd"
    config.write_text(json.dumps(data))
    done = run(env, data_dir, "doctor", "--check", "agents", "--json")
    [check] = json.loads(done.stdout)
    assert (done.returncode, check["level"]) == (1, "fail")
    assert check["summary"] == (
        "claude-code: /nonexistent/memoryd is gone (memoryd moved or was reinstalled)"
    )


# --- the real clients -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clients() -> Clients:
    return install_clients()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    git_init(root)
    return root


@pytest.mark.e2e
def test_claude_code_lists_memoryd_connected(
    clients: Clients, tmp_path: Path, data_dir: Path, repo: Path
) -> None:
    home = ClaudeHome(clients, tmp_path)
    env = {"HOME": str(home.home), "CLAUDE_CONFIG_DIR": str(home.config_dir)}
    assert run(env, data_dir, "integrate", "claude-code").returncode == 0
    listed = home.run("mcp", "list", cwd=repo, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == (
        "Checking MCP server health…\n\n"
        f"memoryd: {MEMORYD} mcp --data-dir {data_dir} - ✔ Connected\n"
    )


@pytest.mark.e2e
def test_codex_lists_what_integrate_wrote(
    clients: Clients, tmp_path: Path, data_dir: Path, repo: Path
) -> None:
    codex = CodexHome(clients, tmp_path)
    env = {"HOME": str(codex.home), "CODEX_HOME": str(codex.codex_home)}
    assert run(env, data_dir, "integrate", "codex").returncode == 0
    listed = codex.run("mcp", "list", "--json", cwd=repo)
    assert listed.returncode == 0, listed.stderr
    [server] = json.loads(listed.stdout)
    assert (server["name"], server["enabled"]) == ("memoryd", True)
    assert server["transport"]["command"] == MEMORYD
    assert server["transport"]["args"] == ["mcp", "--data-dir", str(data_dir)]


@pytest.mark.e2e
def test_gemini_lists_memoryd_connected_in_a_trusted_folder(
    clients: Clients, tmp_path: Path, data_dir: Path, repo: Path
) -> None:
    gemini = GeminiHome(clients, tmp_path)
    done = run({"HOME": str(gemini.home)}, data_dir, "integrate", "gemini")
    assert done.returncode == 0
    assert "Gemini CLI loads MCP servers only in folders you trust" in done.stdout
    gemini.trust_folder(repo)
    listed = gemini.run("mcp", "list", cwd=repo, timeout=60)
    assert listed.returncode == 0
    assert listed.stderr == (
        "Configured MCP servers:\n\n"
        f"✓ memoryd: {MEMORYD} mcp --data-dir {data_dir} (stdio) - Connected\n"
    )
