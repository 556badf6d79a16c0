"""Where memoryd's files are, found with the standard library alone.

The hook process that agents start for every prompt reads only this module, the query channel
and `json` (memoryd/agent/hook_client.py): no Redis client, no asyncio. memoryd/config.py builds its
full `Settings` on the same defaults and the same sources (`given_settings`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable
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


class EnvText(str):
    """A setting's value as the environment gave it: text, still to parse for its field."""


def given_settings(names: Iterable[str], *, strict: bool = True) -> dict[str, Any]:
    """What the config file and the MEMORYD_* environment set, the environment winning: every
    key of the file (as TOML typed it) and those of `names` the environment sets (as
    `EnvText`). A missing file sets nothing; an unreadable or malformed one raises OSError or
    TOMLDecodeError, unless not `strict` (then it sets nothing either)."""
    try:
        with config_file().open("rb") as f:
            given = tomllib.load(f)
    except FileNotFoundError:
        given = {}
    except (OSError, tomllib.TOMLDecodeError):
        if strict:
            raise
        given = {}
    for name in names:
        text = os.environ.get(ENV_PREFIX + name.upper())
        if text is not None:
            given[name] = EnvText(text)
    return given


def plain_settings(*names: str) -> dict[str, Any]:
    """Those of `names` that something sets, as `load_settings()` finds them, from one read of
    the config file; unvalidated (a value `Settings` refuses is the daemon's to report). Only
    for the light processes: everything else reads `load_settings()`."""
    return {k: v for k, v in given_settings(names, strict=False).items() if k in names}


def plain_setting(name: str) -> Any:
    """One setting as `plain_settings` finds it, or None when nothing sets it."""
    return plain_settings(name).get(name)


def plain_data_dir(named: str | Path | None) -> Path:
    """The data dir a flag or setting names, else XDG's."""
    return (Path(named) if named else default_data_dir()).expanduser().resolve()


def channel_socket(data_dir: Path) -> Path:
    return data_dir / CHANNEL_SOCKET


def daemon_lock_path(data_dir: Path) -> Path:
    """Held by the daemon that owns the data dir for as long as it lives."""
    return data_dir / "memoryd.lock"


def serving_lock_path(data_dir: Path) -> Path:
    """Held by the one process that serves this data dir (starts its private Redis, opens its
    embedded database): the daemon, or a one-shot command while no daemon runs."""
    return data_dir / "run" / "serving.lock"
