"""The process an agent starts for every hook: `memoryd hook <agent> <event> [--data-dir DIR]`.

It hands the hook's JSON to the daemon over the query channel and prints the answer; the daemon
does the work (memoryd/agent/hooks.py). The agent waits for this process, so it imports only the
standard library, memoryd/paths.py, memoryd/hook_events.py and memoryd/channel.py (no
pydantic, no Redis client, no asyncio), and it gives up at its budget: with no daemon it exits
0 at once, saying nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from memoryd.hook_events import EVENTS, TIMEOUT_SECONDS


def parse(argv: list[str]) -> tuple[str, str, Path | None] | None:
    """(agent, command, --data-dir) of `hook AGENT COMMAND [--data-dir DIR]`, or None for
    anything else (help, a typo), which the full command line answers."""
    if len(argv) not in (3, 5) or argv[0] != "hook" or (argv[1], argv[2]) not in EVENTS:
        return None
    if len(argv) == 3:
        return argv[1], argv[2], None
    if argv[3] != "--data-dir":
        return None
    return argv[1], argv[2], Path(argv[4])


def run(agent: str, command: str, data_dir: Path | None) -> None:
    from memoryd import channel, paths
    from memoryd.errors import MemorydError

    stdin = sys.stdin.read()
    # One read of the config file for all the hook needs.
    given = paths.plain_settings("redis_url", "hook_timeout_seconds", "hook_max_chars", "data_dir")
    if given.get("redis_url"):
        # An external Redis: the daemon may be elsewhere, reached through the queue.
        out = _over_queue(agent, command, stdin, data_dir)
    else:
        try:
            budget = float(given.get("hook_timeout_seconds") or TIMEOUT_SECONDS)
        except ValueError:
            budget = TIMEOUT_SECONDS
        socket = paths.channel_socket(paths.plain_data_dir(data_dir or given.get("data_dir")))
        # The cap as this process's environment or config sets it (None: the daemon's).
        request = (agent, command, stdin, os.getcwd(), given.get("hook_max_chars"))
        try:
            out = channel.ask_blocking(socket, "hook", request, budget)
        except (MemorydError, OSError, ValueError, EOFError):
            out = ""  # the agent goes on without memory; `memoryd doctor` says why
    if out:
        sys.stdout.write(out + "\n")


def _over_queue(agent: str, command: str, stdin: str, data_dir: Path | None) -> str:
    """A hook's answer from a daemon reached through an external Redis (no channel here)."""
    # Only on this path: the client and the settings cost what the channel's path must not.
    import asyncio

    from memoryd import client
    from memoryd.config import load_settings
    from memoryd.errors import MemorydError

    async def ask() -> str:
        async with client.connect(settings) as memoryd:
            return await memoryd.hook(agent, command, stdin, os.getcwd(), None)

    try:
        settings = load_settings(data_dir=data_dir)
        return asyncio.run(asyncio.wait_for(ask(), settings.hook_timeout_seconds))
    except (MemorydError, TimeoutError, OSError):
        return ""  # a broken config or a lost daemon must not hold up the agent
