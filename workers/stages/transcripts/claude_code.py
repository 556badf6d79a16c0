"""Claude Code transcripts (``~/.claude/projects/<encoded cwd>/<session>.jsonl``).

One JSON record per line; see shared/docs/transcript-formats.md §1. What this parser does with
each record type:

- ``user``: a typed prompt (→ user_prompt memory, and the session's goal if it is the first
  real one), tool results (→ tool_result/error memory, and the call's outcome), injected meta
  text (ignored), a compaction summary (→ summary memory).
- ``assistant``: one content block per record: text (→ assistant_message), tool_use (→
  tool_call memory + pending edges), thinking (dropped: not for embedding).
- ``summary``: a title for a session leaf, usually in another file (→ :class:`Summary`).
- bookkeeping types (``system``, ``progress``, ``queue-operation``, ``api-request*``, …) are
  ignored; an unknown type is reported once per file, with its count in the first batch that
  has it (``state.context["unknown_types"]`` keeps the totals).

Subagents, all three on-disk layouts: records carrying ``agentId`` (flat ``agent-<hex>.jsonl``
and ``<session>/subagents/agent-<id>.jsonl``) belong to session ``<sessionId>:agent-<agentId>``,
the id the parent derives from its Task/Agent result's ``toolUseResult.agentId`` for SPAWNED.
Inline ≤1.0 sidechains (``isSidechain`` without ``agentId``) become sessions
``<sessionId>:sidechain-<root uuid>``, linked to the Task call whose prompt started them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memoryd.ids import stable_id
from workers.stages.entities import canonical_error, canonical_tool, canonical_url
from workers.stages.transcripts.emitter import Emitter
from workers.stages.transcripts.events import (
    CAP_TOOL_INPUT,
    CAP_TOOL_OUTPUT,
    ERROR,
    EXECUTES,
    MODIFIES,
    OK,
    PERMISSION_DENIED,
    READS,
    USER_REJECTED,
    Media,
    Source,
    Target,
    shell_targets,
)
from workers.stages.transcripts.lines import Line, decode_line
from workers.stages.transcripts.state import ParseResult, ParserState
from workers.stages.transcripts.text import norm_time

AGENT = "claude-code"

# Record types that carry nothing for the graph (bookkeeping, hooks, UI state). The api-request
# family (2.1.3xx) repeats what was sent to the model: `api-request-blob` holds the system
# prompt and user messages full of reminders, which must never become prompts or goals.
_IGNORED_TYPES = frozenset(
    {
        "system",
        "progress",
        "queue-operation",
        "file-history-snapshot",
        "attachment",
        "permission-mode",
        "mode",  # 2.1.330 appends {"mode": "normal"} when a session is resumed
        "last-prompt",
        "custom-title",
        "ai-title",
        "agent-name",
        "tag",
        "api-request",
        "api-request-blob",
        "api-request-shape",
        "atis-latch",
        "cost-state",
        "tools-used",
    }
)

_FILE_TOOLS: dict[str, tuple[str, str]] = {
    "read": (READS, "file_path"),
    "notebookread": (READS, "notebook_path"),
    "edit": (MODIFIES, "file_path"),
    "multiedit": (MODIFIES, "file_path"),
    "write": (MODIFIES, "file_path"),
    "notebookedit": (MODIFIES, "notebook_path"),
}
_SEARCH_TOOLS = frozenset({"grep", "glob", "ls"})
_SPAWN_TOOLS = frozenset({"task", "agent"})
_SHELL_FOLLOWUPS = frozenset({"bashoutput", "killshell", "killbash"})

# Text that is not something the user typed (goal rules, transcript-formats.md §1.8).
_NOT_PROMPT_PREFIXES = (
    "Caveat:",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "[Request interrupted",
    "<system-reminder>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<user-prompt-submit-hook>",
)
_IDE_CONTEXT = re.compile(r"<(ide_selection|ide_opened_file)>.*?</\1>\s*", re.S)
_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
# Slash commands that drive the UI rather than ask for work.
_UI_COMMANDS = frozenset(
    [
        "add-dir",
        "agents",
        "bashes",
        "bug",
        "clear",
        "compact",
        "config",
        "context",
        "cost",
        "doctor",
        "exit",
        "export",
        "help",
        "hooks",
        "ide",
        "install-github-app",
        "login",
        "logout",
        "mcp",
        "memory",
        "model",
        "output-style",
        "permissions",
        "plugin",
        "privacy-settings",
        "release-notes",
        "resume",
        "rewind",
        "status",
        "statusline",
        "terminal-setup",
        "theme",
        "todos",
        "upgrade",
        "usage",
        "vim",
    ]
)
_EXIT_CODE = re.compile(r"^\s*Exit code (-?\d+)")
_USER_REJECTION = re.compile(
    r"The user doesn't want to (?:proceed with this tool use|take this action)|"
    r"rejected by (?:the )?user|User rejected"
)
# Claude Code's permission system, not an OS "Permission denied" (that is a real failure).
_PERMISSION = re.compile(
    r"requested permissions to|requires? approval|needs approval|was blocked\. For security|"
    r"Permission to use \S+ (?:has been|was) denied|denied by (?:your )?permission"
)
_AGENT_FILE = re.compile(r"(?:^|/)agent-([A-Za-z0-9]+)\.jsonl$")


@dataclass(frozen=True, slots=True)
class _Ctx:
    """Per-record context: which session it belongs to and where it was."""

    session_id: str
    external_id: str
    uuid: str | None
    cwd: str | None
    time: str | None
    offset: int
    index: int  # record index within the line (glued records)
    sidechain_root: bool  # the first record of an inline sidechain

    def key(self, *parts: str) -> tuple[str, ...]:
        """Memory key from the record's uuid, or its position when it has none."""
        base = ("rec", self.uuid) if self.uuid else ("off", str(self.offset), str(self.index))
        return (*base, *parts)


def new_state() -> ParserState:
    return ParserState(agent=AGENT)


def detect(head: bytes) -> bool:
    """Do these first bytes look like a Claude Code transcript?"""
    markers = (b'"sessionId"', b'"parentUuid"', b'"leafUuid"')
    foreign = b'"payload"' in head[:300] or b'"projectHash"' in head  # Codex, Gemini
    return any(m in head for m in markers) and not foreign


def detect_path(path: str) -> bool:
    return "/.claude/projects/" in path or "/.config/claude/projects/" in path


def parse(
    lines: Iterable[Line], state: ParserState | None = None, source: Source | str = ""
) -> ParseResult:
    """Parse complete lines (from a stored offset) into events; never raises on bad input."""
    em = Emitter.for_parse(AGENT, state, source)
    unknown: dict[str, tuple[int, int]] = {}  # type -> (first offset, lines) in this batch
    for line in lines:
        decoded = decode_line(line)
        for s in decoded.skipped:
            em.skip(s.offset, s.reason, s.excerpt)
        for index, rec in enumerate(decoded.records):
            try:
                rtype = _record(em, rec, line.offset, index)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # A record shape we did not foresee must not stop the file.
                em.skip(line.offset, f"unreadable {rec.get('type')!r} record: {exc!r}")
                continue
            if rtype is not None:
                first, n = unknown.get(rtype, (line.offset, 0))
                unknown[rtype] = (first, n + 1)
    _report_unknown(em, unknown)
    return em.result()


def _report_unknown(em: Emitter, unknown: dict[str, tuple[int, int]]) -> None:
    """One skip per unknown record type and file (a new Claude Code writes a type on every
    turn: a warning per line would flood the log); the state keeps the counts."""
    counts = em.state.context.setdefault("unknown_types", {})
    for rtype, (first, n) in unknown.items():
        if rtype not in counts:
            em.skip(first, f"unknown record type {rtype!r}: {n} lines in this batch, skipped")
        counts[rtype] = counts.get(rtype, 0) + n


def _record(em: Emitter, rec: dict[str, Any], offset: int, index: int) -> str | None:
    """Handle one record; return its type when that type is unknown."""
    rtype = rec.get("type")
    if rtype == "summary":
        em.summary(str(rec.get("leafUuid") or ""), str(rec.get("summary") or ""), offset)
        return None
    if rtype in _IGNORED_TYPES:
        return None
    if rtype not in ("user", "assistant"):
        return str(rtype)
    ctx = _context(em, rec, offset, index)
    message = rec.get("message")
    if ctx is None:
        em.skip(offset, f"{rtype} record without sessionId")
    elif not isinstance(message, dict):
        em.skip(offset, f"{rtype} record without message")
    elif rtype == "assistant":
        _assistant(em, rec, message, ctx)
    else:
        _user(em, rec, message, ctx)
    return None


def _context(em: Emitter, rec: dict[str, Any], offset: int, index: int) -> _Ctx | None:
    """Work out the record's session (main, subagent or inline sidechain) and update it."""
    external = rec.get("sessionId")
    if not isinstance(external, str) or not external:
        return None
    uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
    time = norm_time(rec.get("timestamp"))
    agent_id = rec.get("agentId") or (
        _path_agent_id(em.source.path) if rec.get("isSidechain") else None
    )
    root = False
    fields: dict[str, Any] = {}
    if agent_id:
        session_id = subagent_session_id(external, str(agent_id))
        fields = {"parent_session_id": external, "agent_id": str(agent_id)}
        meta = em.source.subagent_meta or {}
        fields["agent_type"] = meta.get("agentType")
        fields["description"] = meta.get("description")
    elif rec.get("isSidechain"):
        chain, root = _sidechain_root(em.state, uuid, rec.get("parentUuid"))
        session_id = f"{external}:sidechain-{chain}"
        fields = {"parent_session_id": external}
    else:
        session_id = external
    em.session(
        session_id,
        event_time=time,
        cwd=rec.get("cwd") or None,
        git_branch=rec.get("gitBranch") or None,
        version=rec.get("version"),
        external_id=external,
        **fields,
    )
    return _Ctx(session_id, external, uuid, rec.get("cwd") or None, time, offset, index, root)


def subagent_session_id(parent_session_id: str, agent_id: str) -> str:
    """The session id of a subagent, as both the parent and the subagent's file derive it."""
    return f"{parent_session_id}:agent-{agent_id}"


def subagent_meta_path(transcript_path: str) -> str | None:
    """Where Claude Code 2.1.2+ keeps a subagent's ``{agentType, description}``: the
    ``agent-<id>.meta.json`` next to ``<session>/subagents/agent-<id>.jsonl``."""
    p = transcript_path.replace("\\", "/")
    if "/subagents/" not in p or not _AGENT_FILE.search(p):
        return None
    return transcript_path[: -len(".jsonl")] + ".meta.json"


def _path_agent_id(path: str) -> str | None:
    m = _AGENT_FILE.search(path.replace("\\", "/"))
    return m.group(1) if m else None


def _sidechain_root(state: ParserState, uuid: str | None, parent: Any) -> tuple[str, bool]:
    """The root uuid of the inline sidechain a record belongs to (and whether it is the root)."""
    links = state.links
    root = links.get(f"chain:{parent}") if isinstance(parent, str) else None
    is_root = root is None
    if root is None:
        root = uuid or stable_id("sidechain", str(parent))
    if uuid:
        links[f"chain:{uuid}"] = root
    return root, is_root


# --------------------------------------------------------------------------------------------
# Assistant records


def _assistant(em: Emitter, rec: dict[str, Any], message: dict[str, Any], ctx: _Ctx) -> None:
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return
    kind = "error" if rec.get("isApiErrorMessage") else "assistant_message"
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype == "text":
            em.memory(
                ctx.session_id,
                kind,
                str(block.get("text") or ""),
                key=ctx.key(str(i)),
                event_time=ctx.time,
                offset=ctx.offset,
                source_id=ctx.uuid,
            )
        elif btype == "tool_use":
            _tool_use(em, block, ctx)
        # thinking / redacted_thinking: deliberately dropped (not for embedding)


def _tool_use(em: Emitter, block: dict[str, Any], ctx: _Ctx) -> None:
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        return
    name = str(block.get("name") or "unknown")
    inp = block.get("input") if isinstance(block.get("input"), dict) else {}
    tool = canonical_tool(name).key
    em.memory(
        ctx.session_id,
        "tool_call",
        render_call(name, inp),
        key=("call", call_id),
        event_time=ctx.time,
        offset=ctx.offset,
        cap=CAP_TOOL_INPUT,
        source_id=call_id,
        tool=tool,
        call_id=call_id,
    )
    memory_id = em.memory_id(ctx.session_id, "call", call_id)
    extra: dict[str, Any] = {}
    if tool in _SHELL_FOLLOWUPS:
        extra["shell_id"] = str(inp.get("bash_id") or inp.get("shell_id") or "")
    if tool in _SPAWN_TOOLS and isinstance(inp.get("prompt"), str):
        extra["agent_type"] = inp.get("subagent_type")
        extra["description"] = inp.get("description")
        # ≤1.0 inline sidechains carry no agentId: link them by the prompt they start with.
        extra["prompt_hash"] = _prompt_hash(inp["prompt"])
        em.state.links[f"spawn:{extra['prompt_hash']}"] = call_id
    em.call(
        call_id,
        session_id=ctx.session_id,
        memory_id=memory_id,
        tool=tool,
        event_time=ctx.time,
        targets=targets_for(name, inp, ctx.cwd, em),
        extra=extra,
    )


def targets_for(name: str, inp: dict[str, Any], cwd: str | None, em: Emitter) -> list[Target]:
    """What a Claude Code tool call touches (transcript-formats.md §1.5)."""
    tool = canonical_tool(name).key
    if tool in _FILE_TOOLS:
        verb, field = _FILE_TOOLS[tool]
        entity = em.file(_str(inp.get(field) or inp.get("file_path")), cwd)
        return [Target(verb, entity, _change_detail(tool, inp))] if entity else []
    if tool in _SEARCH_TOOLS:
        entity = em.file(_str(inp.get("path")) or _pattern_root(inp) or cwd, cwd)
        detail = f"{tool} {inp.get('pattern') or ''}".strip()
        return [Target(READS, entity, detail)] if entity else []
    if tool == "bash":
        return shell_targets(_str(inp.get("command")), cwd, em.source)
    if tool == "webfetch":
        url = canonical_url(_str(inp.get("url")))
        return [Target(READS, url, _str(inp.get("prompt"))[:200])] if url else []
    if tool in _SPAWN_TOOLS or tool in _SHELL_FOLLOWUPS:
        return []  # SPAWNED / the original Bash call carry these
    detail = _str(inp.get("query") or inp.get("description") or "")[:200]
    return [Target(EXECUTES, canonical_tool(name), detail)]


def _pattern_root(inp: dict[str, Any]) -> str:
    """The folder a Glob pattern starts from when it names one (``~/notes/**/*.md``)."""
    pattern = _str(inp.get("pattern"))
    if not pattern.startswith(("/", "~/")):
        return ""
    folders = pattern.split("/")
    fixed = next((i for i, part in enumerate(folders) if any(c in part for c in "*?[{")), None)
    return "/".join(folders[:fixed]) or "/"


def _change_detail(tool: str, inp: dict[str, Any]) -> str:
    if tool == "multiedit":
        return f"{len(inp.get('edits') or [])} edits"
    if tool == "edit":
        return "edit (replace all)" if inp.get("replace_all") else "edit"
    if tool in ("read", "notebookread"):
        if inp.get("offset") or inp.get("limit"):
            return f"offset {inp.get('offset') or 0}, limit {inp.get('limit') or '-'}"
        return ""
    return tool


def render_call(name: str, inp: dict[str, Any]) -> str:
    """A readable one-paragraph form of a tool call, for the tool_call memory."""
    tool = canonical_tool(name).key
    path = _str(inp.get("file_path") or inp.get("notebook_path") or inp.get("path"))
    if tool == "bash":
        desc = _str(inp.get("description"))
        return f"{name}: {_str(inp.get('command'))}" + (f"\n# {desc}" if desc else "")
    if tool == "edit":
        return f"{name} {path}\n- {_str(inp.get('old_string'))}\n+ {_str(inp.get('new_string'))}"
    if tool == "multiedit":
        edits = inp.get("edits") if isinstance(inp.get("edits"), list) else []
        body = "\n".join(
            f"- {_str(e.get('old_string'))}\n+ {_str(e.get('new_string'))}"
            for e in edits
            if isinstance(e, dict)
        )
        return f"{name} {path}\n{body}"
    if tool == "write":
        return f"{name} {path}\n{_str(inp.get('content'))}"
    if tool in ("grep", "glob"):
        return f"{name} {_str(inp.get('pattern'))!r} in {path or '.'}"
    if tool in _FILE_TOOLS or tool == "ls":
        return f"{name} {path}"
    if tool == "webfetch":
        return f"{name} {_str(inp.get('url'))}\n{_str(inp.get('prompt'))}"
    if tool in _SPAWN_TOOLS:
        kind = _str(inp.get("subagent_type"))
        return f"{name} ({kind}): {_str(inp.get('description'))}\n{_str(inp.get('prompt'))}"
    if tool == "todowrite" and isinstance(inp.get("todos"), list):
        items = [
            f"[{t.get('status')}] {t.get('content')}" for t in inp["todos"] if isinstance(t, dict)
        ]
        return f"{name}\n" + "\n".join(items)
    return f"{name} {json.dumps(inp, ensure_ascii=False)}"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


# --------------------------------------------------------------------------------------------
# User records


def _user(em: Emitter, rec: dict[str, Any], message: dict[str, Any], ctx: _Ctx) -> None:
    content = message.get("content")
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                _tool_result(em, rec, block, ctx)
        return
    text, media = _text_and_media(content)
    if rec.get("isCompactSummary"):
        em.memory(
            ctx.session_id,
            "summary",
            text,
            key=ctx.key(),
            event_time=ctx.time,
            offset=ctx.offset,
            source_id=ctx.uuid,
        )
        return
    if rec.get("isMeta"):
        return  # injected by Claude Code (caveats, skill text), not typed by the user
    prompt = prompt_text(text)
    if prompt is None and not media:
        return
    if ctx.session_id != ctx.external_id and (prompt or "").strip() == "Warmup":
        em.session(ctx.session_id, warmup=True)  # Claude Code's cache-warming subagent
        return
    mem = em.memory(
        ctx.session_id,
        "user_prompt",
        prompt or "",
        key=ctx.key(),
        event_time=ctx.time,
        offset=ctx.offset,
        source_id=ctx.uuid,
        media=media,
    )
    if ctx.sidechain_root and prompt:
        _link_inline_sidechain(em, prompt, ctx)
    if prompt:
        em.goal(ctx.session_id, prompt, mem)


def _text_and_media(content: Any) -> tuple[str, tuple[Media, ...]]:
    """Join text blocks (minus IDE context) and describe dropped images."""
    if isinstance(content, str):
        return _IDE_CONTEXT.sub("", content), ()
    if not isinstance(content, list):
        return "", ()
    texts: list[str] = []
    media: list[Media] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(_IDE_CONTEXT.sub("", _str(block.get("text"))))
        elif block.get("type") in ("image", "document"):
            media.append(_media(block))
    return "\n".join(t for t in texts if t.strip()), tuple(media)


def _media(block: dict[str, Any]) -> Media:
    src = block.get("source") if isinstance(block.get("source"), dict) else {}
    data = src.get("data") if isinstance(src.get("data"), str) else ""
    media_type = _str(src.get("media_type") or block.get("type"))
    return Media(media_type, len(data) * 3 // 4)  # decoded size of the base64 payload


def prompt_text(text: str) -> str | None:
    """The prompt a user typed, or None for text that is not one (transcript-formats §1.8):
    caveats, command output, interruption markers, reminders, UI slash commands. Slash commands
    are unwrapped to ``/name args``."""
    t = text.strip()
    if not t or t.startswith(_NOT_PROMPT_PREFIXES):
        return None
    m = _COMMAND_NAME.search(t)
    if m:
        name = m.group(1).strip()
        if name.lstrip("/") in _UI_COMMANDS:
            return None
        args = _COMMAND_ARGS.search(t)
        return f"{name} {args.group(1).strip() if args else ''}".strip()
    return t


def _prompt_hash(prompt: str) -> str:
    return stable_id("prompt", prompt.strip())


def _link_inline_sidechain(em: Emitter, prompt: str, ctx: _Ctx) -> None:
    """SPAWNED for a ≤1.0 inline sidechain: the Task call whose prompt it starts with."""
    call_id = em.state.links.pop(f"spawn:{_prompt_hash(prompt)}", None)
    call = em.state.pending.get(call_id or "")
    if call_id is None or call is None:
        return
    em.spawned(
        session_id=call["session_id"],
        memory_id=call["memory_id"],
        child_session_id=ctx.session_id,
        agent_id=None,
        event_time=call.get("event_time"),
        agent_type=call["extra"].get("agent_type"),
        description=call["extra"].get("description"),
    )


def _tool_result(em: Emitter, rec: dict[str, Any], block: dict[str, Any], ctx: _Ctx) -> None:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        return
    text, media = _result_text(block.get("content"))
    tur = rec.get("toolUseResult")
    call = em.state.pending.get(call_id)
    tool = call["tool"] if call else None
    is_error = block.get("is_error") is True
    denial = denial_reason(text, rec.get("permissionDecision")) if is_error else None
    interrupted = isinstance(tur, dict) and tur.get("interrupted") is True
    failed = (is_error and denial is None) or interrupted
    em.memory(
        ctx.session_id,
        "error" if failed else "tool_result",
        text,
        key=("result", call_id),
        event_time=ctx.time,
        offset=ctx.offset,
        cap=CAP_TOOL_OUTPUT,
        source_id=ctx.uuid,
        tool=tool,
        call_id=call_id,
        media=media,
    )
    if call is None:
        return  # result of a call we never saw (e.g. made before a resume)
    if tool in _SPAWN_TOOLS:
        em.state.links.pop(f"spawn:{call['extra'].get('prompt_hash')}", None)
        if isinstance(tur, dict) and tur.get("agentId"):
            _link_subagent(em, call, str(tur["agentId"]), ctx)
    if tool in _SHELL_FOLLOWUPS:
        _follow_shell(em, call, tur)
    elif isinstance(tur, dict) and tur.get("backgroundTaskId") and not failed:
        # Still running: the exit status arrives through a later BashOutput.
        em.state.links[f"shell:{tur['backgroundTaskId']}"] = call_id
        return
    if denial:
        em.resolve(call_id, OK, denial=denial, message=text)
    elif failed:
        code = _exit_code(text)
        error_text = text or ("interrupted" if interrupted else "error")
        em.resolve(
            call_id,
            ERROR,
            exit_code=code,
            error=canonical_error(error_text, code),
            message=text,
        )
    else:
        # Success as far as Claude Code tells: a pipeline's status is its last command's.
        em.resolve(call_id, OK)


def _result_text(content: Any) -> tuple[str, tuple[Media, ...]]:
    if isinstance(content, list):
        texts: list[str] = []
        media: list[Media] = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                texts.append(_str(b.get("text")))
            elif isinstance(b, dict) and b.get("type") in ("image", "document"):
                media.append(_media(b))
        return "\n".join(texts), tuple(media)
    return _str(content), ()


def denial_reason(text: str, decision: Any = None) -> str | None:
    """user_rejected / permission_denied for refusals reported as errors, else None.
    ``decision``: the record's ``permissionDecision`` (2.1.3xx), which says it outright."""
    if isinstance(decision, dict) and decision.get("decision") in ("reject", "deny"):
        return USER_REJECTED if decision.get("source") == "user" else PERMISSION_DENIED
    if _USER_REJECTION.search(text):
        return USER_REJECTED
    if _PERMISSION.search(text):
        return PERMISSION_DENIED
    return None


def _exit_code(text: str) -> int | None:
    m = _EXIT_CODE.match(text)
    return int(m.group(1)) if m else None


def _link_subagent(em: Emitter, call: dict[str, Any], agent_id: str, ctx: _Ctx) -> None:
    child = subagent_session_id(ctx.external_id, agent_id)
    em.spawned(
        session_id=call["session_id"],
        memory_id=call["memory_id"],
        child_session_id=child,
        agent_id=agent_id,
        event_time=call.get("event_time"),
        agent_type=call["extra"].get("agent_type"),
        description=call["extra"].get("description"),
    )


def _follow_shell(em: Emitter, call: dict[str, Any], tur: Any) -> None:
    """A BashOutput/KillShell result: settle the background Bash call it refers to."""
    if not isinstance(tur, dict):
        return
    shell_id = call["extra"].get("shell_id") or _str(tur.get("shellId"))
    original = em.state.links.get(f"shell:{shell_id}")
    if not original:
        return
    status = _str(tur.get("status"))
    code = tur.get("exitCode") if isinstance(tur.get("exitCode"), int) else None
    if status in ("completed", "failed") or code is not None:
        if code not in (None, 0) or status == "failed":
            output = _str(tur.get("stderr")) or _str(tur.get("stdout"))
            em.resolve(
                original, ERROR, exit_code=code, error=canonical_error(output, code), message=output
            )
        else:
            em.resolve(original, OK, exit_code=code)
        em.state.links.pop(f"shell:{shell_id}", None)
    elif status == "killed" or "kill" in call["tool"]:
        em.resolve(original, OK)  # stopped on purpose: not a failure of the command
        em.state.links.pop(f"shell:{shell_id}", None)
