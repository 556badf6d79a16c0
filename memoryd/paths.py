"""Where memoryd's files are, found with the standard library alone.

The hook process that agents start for every prompt reads only this module, the query channel
and `json` (memoryd/hook_client.py): no pydantic, no Redis client. memoryd/config.py builds its
full `Settings` on the same defaults.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

ENV_PREFIX = "MEMORYD_"
# The unix socket the daemon answers queries on (memoryd/channel.py), in the 0700 data dir.
CHANNEL_SOCKET = "memoryd.sock"


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value else Path.home() / fallback


def default_data_dir() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "memoryd"


def config_file() -> Path:
    """The TOML config file: $MEMORYD_CONFIG, else <XDG config home>/memoryd/config.toml."""
    explicit = os.environ.get(f"{ENV_PREFIX}CONFIG")
    if explicit:
        return Path(explicit)
    return _xdg("XDG_CONFIG_HOME", ".config") / "memoryd" / "config.toml"


def default_transcripts() -> dict[str, Path]:
    """Where Claude Code, Codex CLI and Gemini CLI write their transcripts (honouring their env
    vars), per agent. aider writes its log into the repository it works in: watched
    repositories only."""
    claude = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") / "projects"
    codex = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "sessions"
    gemini = Path(os.environ.get("GEMINI_CLI_HOME") or Path.home()) / ".gemini" / "tmp"
    return {"claude-code": claude, "codex": codex, "gemini": gemini}


def plain_setting(name: str) -> Any:
    """One setting as `Settings` would find it, environment before config file, or None when
    neither sets it; unvalidated (a value `Settings` refuses is the daemon's to report).
    Only for the light processes: everything else reads `load_settings()`."""
    given = os.environ.get(ENV_PREFIX + name.upper())
    if given is not None:
        return given
    try:
        with config_file().open("rb") as f:
            return tomllib.load(f).get(name)
    except (OSError, tomllib.TOMLDecodeError):
        return None


def plain_data_dir(flag: Path | None = None) -> Path:
    """The data dir: the `--data-dir` flag, else the environment or config file, else XDG's."""
    given = flag or plain_setting("data_dir")
    return (Path(given) if given else default_data_dir()).expanduser().resolve()


def channel_socket(data_dir: Path) -> Path:
    return data_dir / CHANNEL_SOCKET
