"""`memoryd integrate claude-code|codex|gemini`: register memoryd's MCP server and hooks in
each client's own user-level configuration (every project, not one directory).

Edits are idempotent (memoryd's entries are found by their command and replaced), keep every
other setting of the file, are written atomically with the file's mode kept, and reverse
cleanly (`--uninstall` removes exactly what was added, and keys left empty by it). The files,
as verified against the installed clients (docs/clients.md):

- Claude Code: `mcpServers.memoryd` in `~/.claude.json`, hooks (HOOKS: SessionStart for
  startup, resume, clear and compact; UserPromptSubmit; PreToolUse of edits;
  PostToolUseFailure; Stop and SessionEnd) and an allow rule for memoryd's tools
  (`permissions.allow`, ALLOWED_TOOLS) in `~/.claude/settings.json` (`$CLAUDE_CONFIG_DIR/...`
  when set).
- Codex: `[mcp_servers.memoryd]` (`required = true`, tools approved) in
  `$CODEX_HOME/config.toml`, the hooks (SessionStart, PreToolUse of apply_patch, PostToolUse,
  Stop and SessionEnd) in `$CODEX_HOME/hooks.json` (default `~/.codex`). Codex runs a user hook
  only once the user trusted it (`/hooks` in codex): integrate says so.
- Gemini CLI: `mcpServers.memoryd` and the AfterTool, AfterAgent and SessionEnd hooks in
  `~/.gemini/settings.json`. Gemini loads MCP servers only in folders the user trusted:
  integrate says so.

Stop / SessionEnd (Gemini: AfterAgent / SessionEnd) only queue the transcript's read: capture
of the turn just written even where no watched folder holds the transcript. No environment
variable of a client is written: none the clients offer is scoped to one MCP server
(`mcpServers.memoryd.env` is memoryd's own process environment, left empty).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from memoryd.config import Settings
from memoryd.errors import MemorydError
from memoryd.paths import default_data_dir
from memoryd.vocabulary import MCP_SERVER

NAME = MCP_SERVER
CLIENTS = ("claude-code", "codex", "gemini")
SESSION_SOURCES = "startup|resume|clear|compact"
# Seconds the client gives a hook; memoryd's own budget (hook_timeout_seconds) is far shorter.
HOOK_TIMEOUT = 10
# memoryd's MCP tools Claude Code may call without asking (`permissions.allow`): without a rule
# `claude -p` refuses every call. The read-only ones, and remember, which only adds an agent's
# note to memoryd's own records. forget is left to ask: it deletes memory for good, the one
# call whose mistake (or injected instruction) cannot be undone.
ALLOWED_TOOLS = (
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
# The hooks each client gets: (the client's event, `memoryd hook <agent> <word>`, matcher).
HOOKS: dict[str, tuple[tuple[str, str, str | None], ...]] = {
    "claude-code": (
        ("SessionStart", "session-start", SESSION_SOURCES),
        ("UserPromptSubmit", "user-prompt-submit", None),
        ("PreToolUse", "pre-tool-use", "Edit|Write|MultiEdit|NotebookEdit"),
        ("PostToolUseFailure", "post-tool-use-failure", None),
        # Capture only (CAPTURE_EVENTS): the transcript's read at the end of a turn and of the
        # session, where no watched folder holds it.
        ("Stop", "stop", None),
        ("SessionEnd", "session-end", None),
    ),
    "codex": (
        ("SessionStart", "session-start", SESSION_SOURCES),
        ("PreToolUse", "pre-tool-use", "apply_patch"),
        # Codex has no failure event: the hook looks at every result's output.
        ("PostToolUse", "post-tool-use", None),
        ("Stop", "stop", None),
        ("SessionEnd", "session-end", None),
    ),
    # Gemini's BeforeTool cannot add context (only block or rewrite the call): its AfterTool
    # brings both what is known of an edited file and of a failure.
    # AfterAgent is its end of a turn.
    "gemini": (
        ("AfterTool", "after-tool", None),
        ("AfterAgent", "after-agent", None),
        ("SessionEnd", "session-end", None),
    ),
}
# Gemini CLI counts a hook's timeout in milliseconds, the others in seconds.
HOOK_TIMEOUT_UNITS = {"claude-code": 1, "codex": 1, "gemini": 1000}
Json = dict[str, Any]


def memoryd_command() -> str:
    """The memoryd executable to register: this installation's, by absolute path, so the
    clients find it whatever their PATH."""
    beside = Path(sys.executable).parent / "memoryd"
    if beside.exists():
        return str(beside)
    found = shutil.which("memoryd")
    if found is None:
        raise MemorydError("cannot find the memoryd executable to register")
    return str(Path(found).resolve())


def base_args(settings: Settings) -> list[str]:
    """`--data-dir` (after the command's name) when memoryd does not use its default one:
    the clients start memoryd without this shell's environment."""
    return (
        []
        if settings.data_dir == default_data_dir().resolve()
        else [
            "--data-dir",
            str(settings.data_dir),
        ]
    )


@dataclass(slots=True)
class Change:
    path: Path
    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclass(slots=True)
class Plan:
    client: str
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _json(text: str | None, path: Path) -> Json:
    if not text or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise MemorydError(f"{path} is not valid JSON ({exc}); fix it first") from None
    if not isinstance(data, dict):
        raise MemorydError(f"{path} does not hold a JSON object; fix it first")
    return data


def _edit_json(path: Path, edit: Callable[[Json], None]) -> Change:
    """The file after `edit`: unchanged bytes when the data did not change, no file when
    nothing is left in it (so an uninstall after an install leaves no empty file behind)."""
    before = _read(path)
    data = _json(before, path)
    edit(data)
    if data == _json(before, path):
        return Change(path, before, before)
    return Change(path, before, json.dumps(data, indent=2) + "\n" if data else None)


def _set_server(servers_key: str, entry: Json | None) -> Callable[[Json], None]:
    def edit(data: Json) -> None:
        servers = data.get(servers_key)
        if entry is not None:
            data[servers_key] = {**(servers or {}), NAME: entry}
        elif isinstance(servers, dict) and NAME in servers:
            del servers[NAME]
            if not servers:
                del data[servers_key]

    return edit


def _all(*edits: Callable[[Json], None]) -> Callable[[Json], None]:
    """One edit of a file made of several (hooks and permissions share settings.json)."""

    def edit(data: Json) -> None:
        for each in edits:
            each(data)

    return edit


def _is_ours(group: Json, marker: str) -> bool:
    return any(marker in str(h.get("command", "")) for h in group.get("hooks") or [])


def _set_hooks(marker: str, wanted: dict[str, Json] | None) -> Callable[[Json], None]:
    """Replace the hook groups whose command holds `marker` by `wanted` (event -> group)."""

    def edit(data: Json) -> None:
        hooks = data.get("hooks")
        hooks = dict(hooks) if isinstance(hooks, dict) else {}
        for event in list(hooks):
            kept = [g for g in hooks[event] or [] if not _is_ours(g, marker)]
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
        for event, group in (wanted or {}).items():
            hooks[event] = [*hooks.get(event, []), group]
        if hooks:
            data["hooks"] = hooks
        else:
            data.pop("hooks", None)

    return edit


def _hook_group(command: str, matcher: str | None, timeout: int = HOOK_TIMEOUT) -> Json:
    group: Json = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
    return {"matcher": matcher, **group} if matcher else group


def _wanted_hooks(client: str, settings: Settings) -> dict[str, Json]:
    """The hook groups memoryd registers for `client`, by event (HOOKS)."""
    timeout = HOOK_TIMEOUT * HOOK_TIMEOUT_UNITS[client]
    return {
        event: _hook_group(_shell(hook_command(settings, client, word)), matcher, timeout)
        for event, word, matcher in HOOKS[client]
    }


def _shell(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def claude_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def claude_user_config() -> Path:
    """`claude mcp add --scope user` writes here: ~/.claude.json, or inside CLAUDE_CONFIG_DIR."""
    explicit = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(explicit) / ".claude.json" if explicit else Path.home() / ".claude.json"


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def gemini_settings() -> Path:
    return Path.home() / ".gemini" / "settings.json"


def hook_command(settings: Settings, agent: str, event: str) -> list[str]:
    return [memoryd_command(), "hook", agent, event, *base_args(settings)]


def claude_allow_rules() -> list[str]:
    return [f"mcp__{NAME}__{tool}" for tool in ALLOWED_TOOLS]


def _set_allowed(rules: list[str] | None) -> Callable[[Json], None]:
    """memoryd's rules in `permissions.allow` (None: removed), the user's own rules kept in
    their order."""

    def edit(data: Json) -> None:
        permissions = data.get("permissions")
        permissions = dict(permissions) if isinstance(permissions, dict) else {}
        ours = set(claude_allow_rules())
        allow = [r for r in permissions.get("allow") or [] if r not in ours] + (rules or [])
        if allow:
            permissions["allow"] = allow
        else:
            permissions.pop("allow", None)
        if permissions:
            data["permissions"] = permissions
        else:
            data.pop("permissions", None)

    return edit


def plan(client: str, settings: Settings, uninstall: bool) -> Plan:
    if client not in CLIENTS:
        raise MemorydError(f"unknown client {client!r}; choose from {', '.join(CLIENTS)}")
    exe = memoryd_command()
    mcp_args = ["mcp", *base_args(settings)]
    result = Plan(client)
    if client == "claude-code":
        entry = (
            None if uninstall else {"type": "stdio", "command": exe, "args": mcp_args, "env": {}}
        )
        result.changes.append(_edit_json(claude_user_config(), _set_server("mcpServers", entry)))
        wanted = None if uninstall else _wanted_hooks(client, settings)
        allowed = None if uninstall else claude_allow_rules()
        result.changes.append(
            _edit_json(
                claude_dir() / "settings.json",
                _all(_set_hooks(" hook claude-code ", wanted), _set_allowed(allowed)),
            )
        )
        if not uninstall:
            result.notes.append(
                f"Claude Code may call memoryd's {', '.join(ALLOWED_TOOLS)} without asking "
                "(permissions.allow); forget still asks."
            )
    elif client == "codex":
        result.changes.append(
            _edit_codex_config(codex_home() / "config.toml", exe, mcp_args, uninstall)
        )
        wanted = None if uninstall else _wanted_hooks(client, settings)
        result.changes.append(
            _edit_json(codex_home() / "hooks.json", _set_hooks(" hook codex ", wanted))
        )
        if not uninstall:
            result.notes.append(
                "Codex runs a hook only once you trust it: start `codex`, type /hooks and "
                "trust memoryd's hooks (again whenever integrate changes them)."
            )
    else:
        entry = None if uninstall else {"command": exe, "args": mcp_args}
        wanted = None if uninstall else _wanted_hooks(client, settings)
        result.changes.append(
            _edit_json(
                gemini_settings(),
                _all(_set_server("mcpServers", entry), _set_hooks(" hook gemini ", wanted)),
            )
        )
        if not uninstall:
            result.notes.append(
                "Gemini CLI loads MCP servers only in folders you trust (it asks on first "
                "start in a folder, or /permissions): memoryd appears there."
            )
    return result


def _edit_codex_config(path: Path, exe: str, args: list[str], uninstall: bool) -> Change:
    before = _read(path)
    try:
        doc = tomlkit.parse(before or "")
    except tomlkit.exceptions.ParseError as exc:
        raise MemorydError(f"{path} is not valid TOML ({exc}); fix it first") from None
    servers = doc.get("mcp_servers")
    if uninstall:
        if servers is not None and NAME in servers:
            del servers[NAME]
            if not servers:
                del doc["mcp_servers"]
    else:
        table = tomlkit.table()
        table["command"] = exe
        table["args"] = args
        # `codex exec` never asks for approval: without this every memoryd call fails there.
        # memoryd's tools touch only memoryd's own records.
        table["default_tools_approval_mode"] = "approve"
        # Codex waits for the server before its first model request: without it that request
        # often lacks memoryd's tools (docs/clients.md).
        table["required"] = True
        if servers is None:
            servers = tomlkit.table(is_super_table=True)
            doc["mcp_servers"] = servers
        servers[NAME] = table
    after = tomlkit.dumps(doc)
    if uninstall and after.strip():
        after = after.rstrip() + "\n"  # the blank line that set memoryd's table apart
    if after == (before or ""):
        return Change(path, before, before)
    return Change(path, before, after if after.strip() else None)


def apply(result: Plan) -> None:
    for change in result.changes:
        if not change.changed:
            continue
        if change.after is None:
            change.path.unlink(missing_ok=True)
            continue
        change.path.parent.mkdir(parents=True, exist_ok=True)
        mode = change.path.stat().st_mode & 0o777 if change.path.exists() else 0o600
        tmp = change.path.with_name(f".{change.path.name}.memoryd-tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(change.after)
        os.chmod(tmp, mode)
        os.replace(tmp, change.path)


# -- what doctor checks ---------------------------------------------------------------------


def registered(client: str) -> list[list[str]]:
    """The memoryd commands (argv) a client's configuration holds: its MCP server and hooks."""
    found: list[list[str]] = []

    if client == "claude-code":
        server = _json(_read(claude_user_config()), claude_user_config()).get("mcpServers", {})
        hooks = _json(_read(claude_dir() / "settings.json"), claude_dir()).get("hooks", {})
        marker = " hook claude-code "
    elif client == "codex":
        text = _read(codex_home() / "config.toml") or ""
        server = dict(tomlkit.parse(text).get("mcp_servers", {}))
        hooks = _json(_read(codex_home() / "hooks.json"), codex_home()).get("hooks", {})
        marker = " hook codex "
    else:
        data = _json(_read(gemini_settings()), gemini_settings())
        server, hooks, marker = data.get("mcpServers", {}), data.get("hooks", {}), " hook gemini "
    if NAME in server:
        found.append([str(server[NAME]["command"]), *map(str, server[NAME].get("args", []))])
    for groups in hooks.values():
        for group in groups or []:
            if _is_ours(group, marker):
                found += [shlex.split(h["command"]) for h in group["hooks"]]
    return found
