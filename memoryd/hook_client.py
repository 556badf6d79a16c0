"""The process an agent starts for every hook: `memoryd hook <agent> <event> [--data-dir DIR]`.

It hands the hook's JSON to the daemon over the query channel and prints the answer; the daemon
does the work (memoryd/hooks.py). The agent waits for this process, so it imports only the
standard library, memoryd/paths.py and memoryd/channel.py (no pydantic, no Redis client, no
asyncio), and it gives up at its budget: with no daemon it exits 0 at once, saying nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The events each agent's hooks are registered for: (agent, command word) -> hook event name.
EVENTS = {
    ("claude-code", "session-start"): "SessionStart",
    ("claude-code", "user-prompt-submit"): "UserPromptSubmit",
    ("claude-code", "stop"): "Stop",
    ("claude-code", "session-end"): "SessionEnd",
    ("codex", "session-start"): "SessionStart",
    ("codex", "stop"): "Stop",
    ("codex", "session-end"): "SessionEnd",
    ("gemini", "after-agent"): "AfterAgent",
    ("gemini", "session-end"): "SessionEnd",
    # At the moment of action (docs/clients.md says what each client sends and accepts):
    # before an edit, and after a failed tool call. Gemini CLI's BeforeTool cannot add
    # context, so its AfterTool carries both.
    ("claude-code", "pre-tool-use"): "PreToolUse",
    ("claude-code", "post-tool-use-failure"): "PostToolUseFailure",
    ("codex", "pre-tool-use"): "PreToolUse",
    ("codex", "post-tool-use"): "PostToolUse",
    ("gemini", "after-tool"): "AfterTool",
}
# Events after the agent wrote a turn (or its session ended): they only queue the transcript's
# read, and answer nothing (a Stop or AfterAgent answer could keep the agent going).
CAPTURE_EVENTS = frozenset({"Stop", "SessionEnd", "AfterAgent"})
# The events whose context is about one action (a file, a failure): a smaller budget.
ACTION_EVENTS = frozenset({"PreToolUse", "PostToolUseFailure", "PostToolUse", "AfterTool"})
# The whole hook's budget in seconds, unless `hook_timeout_seconds` says otherwise.
TIMEOUT_SECONDS = 1.5
# What one hook may inject, in characters (`hook_max_chars`): the default and its bounds;
# and what one about an action may (`hook_action_max_chars`).
MAX_CHARS, MAX_CHARS_RANGE = 2000, (200, 20000)
ACTION_MAX_CHARS = 600


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
        from memoryd.agent_cli import hook_over_queue

        out = hook_over_queue(agent, command, stdin, data_dir)
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
