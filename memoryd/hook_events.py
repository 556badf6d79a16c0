"""The hook events agents' hooks are registered for, and the hook's limits: declared once for
the hook process (memoryd/agent/hook_client.py), the daemon's hooks (memoryd/agent/hooks.py) and the
settings (memoryd/config.py). The hook process imports it at every prompt: nothing but
constants here (memoryd/config.py's import costs the hook ~30 ms).
"""

from __future__ import annotations

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
