"""OpenAI Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-…-<uuid>.jsonl``).

Two line formats (shared/docs/transcript-formats.md §2):

- current: an envelope ``{timestamp, type, payload}`` with ``type`` one of ``session_meta``,
  ``turn_context``, ``response_item``, ``event_msg``, ``compacted``;
- legacy (before ≈ Oct 2025): a bare ``{id, timestamp, instructions, git}`` first line,
  ``{"record_type": "state"}`` lines and bare response items.

What becomes what:

- prompts come from ``event_msg user_message`` (clean text; from 0.169 ``event_msg
  item_completed`` of a ``UserMessage`` item instead); in the envelope format the
  ``response_item`` user messages are skipped because they repeat the prompt and carry the
  injected ``AGENTS.md`` / ``<environment_context>`` text. Legacy files only have the latter, so
  there the injected ones are filtered by their prefix.
- ``shell``/``container.exec``/``shell_command``/``exec_command``/``local_shell_call`` →
  EXECUTES, one edge per program run. The outcome comes from whichever arrives first of
  ``exec_command_end.exit_code``, ``Process exited with code N`` in an output (for unified exec
  also in a later ``write_stdin`` poll of the same process), or the older JSON-in-string
  ``metadata.exit_code``. A pipeline's exit code is its last command's: that is all anyone
  can tell.
- the files a shell command reads, writes or names (``sed -n 1,80p f``, ``rg x src``,
  ``> f``) → READS / MODIFIES / MENTIONS marked ``via="shell"``, resolved against the call's
  ``workdir`` (workers.stages.entities.files_in_command). ``exec_command_end.parsed_cmd`` is not
  used for this: it covers reads and searches only, with paths shortened to a base name.
- ``apply_patch`` (custom tool, function, or old ``shell ["apply_patch", …]``) → MODIFIES per
  file in the patch; ``patch_apply_end.changes`` (from 0.169 ``item_completed`` of a
  ``FileChange`` item) replaces those with its authoritative paths. A patch Codex refused to
  apply (``apply_patch verification failed: …``, no file changed) is a failure.
- other tools (``update_plan``, MCP ``server__tool`` or, from 0.169, ``tool`` in namespace
  ``mcp__server``, ``web_search_call``) → EXECUTES the tool.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workers.stages.entities import Entity, canonical_error, canonical_tool
from workers.stages.transcripts.emitter import Emitter
from workers.stages.transcripts.events import (
    CAP_TOOL_INPUT,
    CAP_TOOL_OUTPUT,
    ERROR,
    EXECUTES,
    MODIFIES,
    OK,
    PERMISSION_DENIED,
    USER_REJECTED,
    Source,
    Target,
    shell_targets,
)
from workers.stages.transcripts.lines import Line, decode_line
from workers.stages.transcripts.state import ParseResult, ParserState
from workers.stages.transcripts.text import norm_time

AGENT = "codex"

_SHELL_TOOLS = frozenset({"shell", "container.exec", "shell_command", "exec_command"})
_SEARCH_PROGRAMS = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "git-grep"})
_ENVELOPE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg"})
# Envelope types with nothing for the graph.
_IGNORED_TYPES = frozenset({"world_state", "inter_agent_communication", "token_usage_record"})
# tool_search_*: the model looking for deferred tools (0.169); what it then calls is recorded.
_IGNORED_ITEMS = frozenset(
    {
        "reasoning",
        "ghost_snapshot",
        "compaction",
        "other",
        "compacted",
        "tool_search_call",
        "tool_search_output",
    }
)
_INJECTED_PREFIXES = (
    "# AGENTS.md instructions",
    "<environment_context>",
    "<user_instructions>",
    "<permissions instructions>",
    "<INSTRUCTIONS>",
    "<user_shell_command>",
)
_ENV_CWD = re.compile(r"<environment_context>.*?<cwd>([^<]+)</cwd>", re.S)
_DESKTOP_REQUEST = re.compile(r"^##+\s*My request for Codex:\s*$", re.M)
_UUID_IN_NAME = re.compile(
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl(?:\.zst)?$", re.I
)
_EXITED = re.compile(r"^(?:Process exited with code|Exit code:) (-?\d+)\s*$", re.M)
_RUNNING = re.compile(r"^Process running with session ID (\d+)\s*$", re.M)
# Unified exec wraps output in a header ending with "Output:".
_EXEC_HEADER = re.compile(
    r"\A(?:(?:Chunk ID|Wall time|Process exited with code|Process running with session ID|"
    r"Original token count|Total output lines|Exit code)[^\n]*\n)+(?:Output:\n)?"
)
_PATCH_REFUSED = re.compile(r"\Aapply_patch verification failed\b")
_REJECTED = re.compile(
    r"rejected by (?:the )?user|declined by (?:the )?user|user (?:denied|declined|rejected)|"
    r"approval (?:was )?denied",
    re.I,
)
# The sandbox refused to run something (`zsh:1: operation not permitted: ps`): a failure even
# when the last program of the pipeline is a search whose exit 1 would mean "no match".
_SANDBOXED = re.compile(r"^\S*sh\b.*\boperation not permitted\b", re.I | re.M)
# Codex Desktop's browser refused an action: a policy denial, not a failure.
BROWSER_POLICY = re.compile(r"rejected this action due to browser security policy", re.I)
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$")


@dataclass(frozen=True, slots=True)
class _Out:
    """A tool output, unwrapped: body text, exit code and unified-exec process id if stated."""

    text: str
    exit_code: int | None
    process: str | None


def new_state() -> ParserState:
    return ParserState(agent=AGENT)


def detect(head: bytes) -> bool:
    """Do these first bytes look like a Codex rollout (either format)?"""
    first = head.lstrip()[:400]
    if b'"payload"' in first and b'"type"' in first:
        return any(t.encode() in first for t in _ENVELOPE_TYPES)
    return b'"record_type"' in head or (b'"instructions"' in first and b'"id"' in first)


def detect_path(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("rollout-") or "/.codex/" in path


def parse(
    lines: Iterable[Line], state: ParserState | None = None, source: Source | str = ""
) -> ParseResult:
    """Parse complete lines (from a stored offset) into events; never raises on bad input."""
    em = Emitter.for_parse(AGENT, state, source)
    src, st = em.source, em.state
    if "session_id" not in st.context:
        m = _UUID_IN_NAME.search(src.path)
        st.context["session_id"] = m.group(1).lower() if m else None
    for line in lines:
        decoded = decode_line(line)
        for s in decoded.skipped:
            em.skip(s.offset, s.reason, s.excerpt)
        for index, rec in enumerate(decoded.records):
            try:
                _record(em, rec, line.offset, index)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                em.skip(line.offset, f"unreadable {rec.get('type')!r} record: {exc!r}")
    return em.result()


@dataclass(frozen=True, slots=True)
class _Ctx:
    session_id: str
    time: str | None
    offset: int
    index: int
    cwd: str | None

    def key(self, *parts: str) -> tuple[str, ...]:
        """Codex records have no ids: the byte offset is stable in an append-only file."""
        return ("off", str(self.offset), str(self.index), *parts)


def _record(em: Emitter, rec: dict[str, Any], offset: int, index: int) -> None:
    payload = rec.get("payload")
    rtype = rec.get("type")
    if isinstance(payload, dict) and isinstance(rtype, str) and "timestamp" in rec:
        _envelope(em, rtype, payload, norm_time(rec.get("timestamp")), offset, index)
    elif rec.get("record_type") == "state":
        return
    elif isinstance(rtype, str):
        em.state.context["legacy"] = True
        ctx = _ctx(em, norm_time(rec.get("timestamp")), offset, index)
        if ctx:
            _item(em, rec, ctx, envelope=False)
    elif "id" in rec and ("instructions" in rec or "git" in rec or "timestamp" in rec):
        em.state.context["legacy"] = True
        _meta(em, rec, norm_time(rec.get("timestamp")))
    else:
        em.skip(offset, "unrecognised Codex record", json.dumps(rec)[:80])


def _envelope(
    em: Emitter, rtype: str, p: dict[str, Any], time: str | None, offset: int, index: int
) -> None:
    if rtype == "session_meta":
        _meta(em, p, time)
        return
    if rtype == "turn_context":
        if isinstance(p.get("cwd"), str):
            em.state.context["cwd"] = p["cwd"]
        return
    if rtype in _IGNORED_TYPES or rtype.startswith("inter_agent"):
        return
    ctx = _ctx(em, time, offset, index)
    if ctx is None:
        em.skip(offset, f"{rtype} before any session id")
        return
    if rtype == "response_item":
        _item(em, p, ctx, envelope=True)
    elif rtype == "event_msg":
        _event(em, p, ctx)
    elif rtype == "compacted":
        em.memory(
            ctx.session_id,
            "summary",
            _s(p.get("message")),
            key=ctx.key(),
            event_time=ctx.time,
            offset=ctx.offset,
        )
    else:
        em.skip(offset, f"unknown record type {rtype!r}")


def _meta(em: Emitter, p: dict[str, Any], time: str | None) -> None:
    sid = p.get("id")
    if isinstance(sid, str) and sid:
        em.state.context["session_id"] = sid
    session_id = em.state.context.get("session_id")
    if not session_id:
        return
    git = p.get("git") if isinstance(p.get("git"), dict) else {}
    if isinstance(p.get("cwd"), str):
        em.state.context["cwd"] = p["cwd"]
    em.session(
        session_id,
        event_time=norm_time(p.get("timestamp")) or time,
        cwd=p.get("cwd"),
        git_branch=git.get("branch"),
        version=p.get("cli_version"),
        external_id=session_id,
        parent_session_id=_find_key(p.get("source"), "parent_thread_id"),
    )


def _find_key(value: Any, key: str) -> str | None:
    """A subagent's parent thread id, wherever the ``source`` object nests it."""
    if isinstance(value, dict):
        if isinstance(value.get(key), str):
            return value[key]
        for v in value.values():
            found = _find_key(v, key)
            if found:
                return found
    return None


def _ctx(em: Emitter, time: str | None, offset: int, index: int) -> _Ctx | None:
    session_id = em.state.context.get("session_id")
    if not session_id:
        return None
    em.session(session_id, event_time=time, external_id=session_id)
    return _Ctx(session_id, time, offset, index, em.state.context.get("cwd"))


# --------------------------------------------------------------------------------------------
# response items


def _item(em: Emitter, p: dict[str, Any], ctx: _Ctx, *, envelope: bool) -> None:
    t = p.get("type")
    if t == "message":
        _message(em, p, ctx, envelope)
    elif t == "function_call":
        _function_call(em, p, ctx)
    elif t == "custom_tool_call":
        _custom_call(em, p, ctx)
    elif t == "local_shell_call":
        action = p.get("action") if isinstance(p.get("action"), dict) else {}
        call_id = _s(p.get("call_id") or p.get("id"))
        args = {"command": action.get("command"), "workdir": action.get("working_directory")}
        _shell_call(em, "local_shell_call", call_id, args, ctx)
    elif t in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        _output(em, _s(p.get("call_id")), p.get("output"), ctx)
    elif t == "web_search_call":
        _web_search(em, p, ctx)
    elif t in _IGNORED_ITEMS:
        return
    else:
        em.skip(ctx.offset, f"unknown response item {t!r}")


def _message(em: Emitter, p: dict[str, Any], ctx: _Ctx, envelope: bool) -> None:
    role = p.get("role")
    text = _content_text(p.get("content"))
    if role == "assistant":
        em.memory(
            ctx.session_id,
            "assistant_message",
            text,
            key=ctx.key(),
            event_time=ctx.time,
            offset=ctx.offset,
            source_id=_s(p.get("id")) or None,
        )
    elif role == "user":
        cwd = _ENV_CWD.search(text)
        if cwd and not em.state.context.get("cwd"):  # legacy files have no turn_context
            em.state.context["cwd"] = cwd.group(1)
            em.session(ctx.session_id, cwd=cwd.group(1))
        if not envelope:
            _prompt(em, text, ctx)  # legacy files have no event_msg copy of the prompt


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        _s(c.get("text"))
        for c in content
        if isinstance(c, dict) and c.get("type") in ("input_text", "output_text", "text")
    ]
    return "\n".join(p for p in parts if p)


def _prompt(em: Emitter, text: str, ctx: _Ctx) -> None:
    if not text.strip() or text.lstrip().startswith(_INJECTED_PREFIXES):
        return
    mem = em.memory(
        ctx.session_id, "user_prompt", text, key=ctx.key(), event_time=ctx.time, offset=ctx.offset
    )
    em.goal(ctx.session_id, goal_text(text), mem)


def goal_text(message: str) -> str:
    """The request itself: Codex Desktop wraps it after ``## My request for Codex:``."""
    m = _DESKTOP_REQUEST.search(message)
    return message[m.end() :].strip() if m else message.strip()


def _function_call(em: Emitter, p: dict[str, Any], ctx: _Ctx) -> None:
    name = _s(p.get("name")) or "unknown"
    namespace = _s(p.get("namespace"))
    if namespace.startswith("mcp__"):  # 0.169 calls an MCP tool within its server's namespace
        name = f"{namespace}__{name}"
    call_id = _s(p.get("call_id") or p.get("id"))
    args = _json_args(p.get("arguments"))
    if name in _SHELL_TOOLS:
        _shell_call(em, name, call_id, args, ctx)
    elif name == "apply_patch":
        patch = _s(args.get("input") or args.get("patch"))
        _patch_call(em, call_id, patch, ctx, _s(args.get("workdir")) or ctx.cwd)
    elif name == "write_stdin":
        _stdin_poll(em, call_id, args, ctx)
    else:
        tool = _tool_entity(name)
        content = f"{name} {json.dumps(args, ensure_ascii=False)}"
        _register(em, call_id, tool.key, content, [Target(EXECUTES, tool)], ctx)


def _json_args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {"raw": raw}
    return value if isinstance(value, dict) else {"raw": value}


def _tool_entity(name: str) -> Entity:
    """Codex names MCP tools ``server__tool``; make them ``mcp:server:tool`` like Claude's."""
    if "__" in name and not name.startswith("mcp__"):
        name = "mcp__" + name
    return canonical_tool(name)


def _register(
    em: Emitter,
    call_id: str,
    tool: str,
    content: str,
    targets: list[Target],
    ctx: _Ctx,
    extra: dict[str, Any] | None = None,
) -> None:
    if not call_id:
        return
    em.memory(
        ctx.session_id,
        "tool_call",
        content,
        key=("call", call_id),
        event_time=ctx.time,
        offset=ctx.offset,
        cap=CAP_TOOL_INPUT,
        source_id=call_id,
        tool=tool,
        call_id=call_id,
    )
    em.call(
        call_id,
        session_id=ctx.session_id,
        memory_id=em.memory_id(ctx.session_id, "call", call_id),
        tool=tool,
        event_time=ctx.time,
        targets=targets,
        extra=extra,
    )


def _shell_call(em: Emitter, name: str, call_id: str, args: dict[str, Any], ctx: _Ctx) -> None:
    command = args.get("cmd") if name == "exec_command" else args.get("command")
    workdir = _s(args.get("workdir") or args.get("cwd")) or ctx.cwd
    argv = [str(a) for a in command] if isinstance(command, list) else None
    if argv and argv[0] == "apply_patch" and len(argv) > 1:  # 2025: patches went through shell
        _patch_call(em, call_id, argv[1], ctx, workdir)
        return
    line = shlex.join(argv) if argv else _s(command)
    targets = shell_targets(argv if argv else line, workdir, em.source)
    content = f"{name}: {_display_command(argv, line)}"
    programs = [t.entity.key for t in targets if t.verb == EXECUTES]
    last = programs[-1] if programs else ""
    _register(em, call_id, name, content, targets, ctx, {"last": last})


def _display_command(argv: list[str] | None, line: str) -> str:
    """``bash -lc 'script'`` is shown as the script."""
    if argv and len(argv) == 3 and argv[1] in ("-lc", "-c") and argv[0].endswith("sh"):
        return argv[2]
    return line


def _patch_call(em: Emitter, call_id: str, patch: str, ctx: _Ctx, workdir: str | None) -> None:
    targets = [Target(MODIFIES, e, op) for op, e in _patch_files(patch, workdir, em)]
    _register(em, call_id, "apply_patch", f"apply_patch\n{patch}", targets, ctx)


def _patch_files(patch: str, cwd: str | None, em: Emitter) -> list[tuple[str, Entity]]:
    out: list[tuple[str, Entity]] = []
    for line in patch.splitlines():
        m = _PATCH_FILE.match(line)
        if not m:
            continue
        op, path = (m.group(1).lower(), m.group(2)) if m.group(1) else ("move", m.group(3))
        entity = em.file(path, cwd)
        if entity:
            out.append((op, entity))
    return out


def _custom_call(em: Emitter, p: dict[str, Any], ctx: _Ctx) -> None:
    name = _s(p.get("name")) or "unknown"
    call_id = _s(p.get("call_id") or p.get("id"))
    if name == "apply_patch":
        _patch_call(em, call_id, _s(p.get("input")), ctx, ctx.cwd)
        return
    tool = _tool_entity(name)
    _register(em, call_id, tool.key, f"{name} {_s(p.get('input'))}", [Target(EXECUTES, tool)], ctx)


def _stdin_poll(em: Emitter, call_id: str, args: dict[str, Any], ctx: _Ctx) -> None:
    """``write_stdin`` polls (or types into) a process an ``exec_command`` started: its output
    belongs to that call. Empty polls make no memory of their own."""
    process = _s(args.get("session_id"))
    if call_id and process:
        em.state.links[f"stdin:{call_id}"] = process
    chars = _s(args.get("chars"))
    if chars and call_id:
        em.memory(
            ctx.session_id,
            "tool_call",
            f"write_stdin: {chars}",
            key=("call", call_id),
            event_time=ctx.time,
            offset=ctx.offset,
            cap=CAP_TOOL_INPUT,
            source_id=call_id,
            tool="write_stdin",
            call_id=call_id,
        )


def _web_search(em: Emitter, p: dict[str, Any], ctx: _Ctx) -> None:
    action = p.get("action") if isinstance(p.get("action"), dict) else {}
    query = _s(action.get("query"))
    tool = canonical_tool("web_search")
    call_id = _s(p.get("id")) or f"web_search@{ctx.offset}:{ctx.index}"
    _register(em, call_id, tool.key, f"web_search: {query}", [Target(EXECUTES, tool, query)], ctx)
    if p.get("status") in (None, "completed"):
        em.resolve(call_id, OK)
    else:
        em.resolve(call_id, ERROR, error=canonical_error(f"web search {p.get('status')}"))


# --------------------------------------------------------------------------------------------
# outputs and events


def _output(em: Emitter, call_id: str, output: Any, ctx: _Ctx) -> None:
    out = _unwrap_output(output)
    process = em.state.links.pop(f"stdin:{call_id}", None)
    # A poll's output belongs to the exec_command that started the process.
    owner = em.state.links.get(f"proc:{process}") if process else call_id
    owner = owner or call_id
    call = em.state.pending.get(owner)
    last = call["extra"].get("last") if call else None
    policy = BROWSER_POLICY.search(out.text[:1000]) is not None
    refused = (
        call is not None and call["tool"] == "apply_patch" and bool(_PATCH_REFUSED.match(out.text))
    )
    failed = refused or (not policy and outcome(out.exit_code, last, out.text) == ERROR)
    em.memory(
        ctx.session_id,
        "error" if failed else "tool_result",
        out.text,
        key=("result", call_id),
        event_time=ctx.time,
        offset=ctx.offset,
        cap=CAP_TOOL_OUTPUT,
        source_id=call_id,
        tool=call["tool"] if call else ("exec_command" if process else None),
        call_id=owner,
    )
    if out.process and not process:
        em.state.links[f"proc:{out.process}"] = owner  # still running: later polls report
    if policy:
        em.resolve(owner, OK, denial=PERMISSION_DENIED, message=out.text)
    elif refused:
        em.resolve(owner, ERROR, error=canonical_error(out.text), message=out.text)
    elif out.exit_code is not None:
        _finish(em, owner, out.exit_code, out.text)
        em.state.links.pop(f"proc:{process or out.process}", None)
    elif _REJECTED.search(out.text[:300]):
        em.resolve(owner, OK, denial=USER_REJECTED, message=out.text)
    elif call is not None and not out.process and call["tool"] not in _SHELL_TOOLS:
        em.resolve(owner, OK)  # a non-shell tool answered: that is its outcome


def outcome(exit_code: int | None, last_program: str | None, text: str) -> str:
    """ok/error from an exit code. grep & co. exit 1 for "no match", which is not a failure
    (a chain's status is its last command's, so only the last program counts), unless the
    output shows the sandbox stopped a command."""
    if exit_code in (None, 0):
        return OK
    if exit_code == 1 and last_program in _SEARCH_PROGRAMS and not _SANDBOXED.search(text):
        return OK
    return ERROR


def _finish(em: Emitter, call_id: str, exit_code: int, text: str) -> None:
    call = em.state.pending.get(call_id)
    if outcome(exit_code, call["extra"].get("last") if call else None, text) == OK:
        em.resolve(call_id, OK, exit_code=exit_code)
    else:
        em.resolve(
            call_id,
            ERROR,
            exit_code=exit_code,
            error=canonical_error(text, exit_code),
            message=text,
        )


def _unwrap_output(output: Any) -> _Out:
    """Codex outputs are strings that may hold JSON (``{"output", "metadata": {exit_code}}``)
    or a unified-exec header; newer ones may be objects."""
    if isinstance(output, dict):
        text = _s(output.get("content") or output.get("output"))
        code = -1 if output.get("success") is False else None
        return _Out(text, code, None)
    if isinstance(output, list):
        return _Out(_content_text(output), None, None)
    text = _s(output)
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and "output" in data:
            meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
            code = meta.get("exit_code")
            return _Out(_s(data["output"]), code if isinstance(code, int) else None, None)
    exited = _EXITED.search(text[:500])
    running = _RUNNING.search(text[:500])
    header = _EXEC_HEADER.match(text)
    body = text[header.end() :] if header else text
    return _Out(
        body,
        int(exited.group(1)) if exited else None,
        running.group(1) if running else None,
    )


def _event(em: Emitter, p: dict[str, Any], ctx: _Ctx) -> None:
    t = p.get("type")
    if t == "user_message":
        _prompt(em, _s(p.get("message")), ctx)
    elif t == "item_completed" and isinstance(p.get("item"), dict):
        item = p["item"]
        if item.get("type") == "UserMessage":  # 0.169's user_message
            _prompt(em, _content_text(item.get("content")), ctx)
        elif item.get("type") == "FileChange":  # 0.169's patch_apply_end
            done = {"call_id": item.get("id"), "success": item.get("status") != "failed"}
            _patch_end(em, item | done, ctx)
    elif t == "exec_command_end":
        _exec_end(em, p, ctx)
    elif t == "patch_apply_end":
        _patch_end(em, p, ctx)
    # everything else (agent_message, token_count, task_*, *_begin…) repeats other records


def _exec_end(em: Emitter, p: dict[str, Any], ctx: _Ctx) -> None:
    """The call's outcome, if nothing settled it yet. (Its ``parsed_cmd`` is not used: the
    command line itself says what was read, written and named.)"""
    call_id = _s(p.get("call_id"))
    code = p.get("exit_code") if isinstance(p.get("exit_code"), int) else None
    if call_id and code is not None:
        text = _s(p.get("stderr")) or _s(p.get("aggregated_output")) or _s(p.get("stdout"))
        _finish(em, call_id, code, text)
        # The proc: link stays until a poll reports the exit: that poll's output belongs here.


def _patch_end(em: Emitter, p: dict[str, Any], ctx: _Ctx) -> None:
    """``changes`` (absolute paths) are what the patch really touched."""
    call_id = _s(p.get("call_id"))
    changes = p.get("changes") if isinstance(p.get("changes"), dict) else {}
    targets: list[Target] = []
    for path, change in changes.items():
        op = _s(change.get("type")) if isinstance(change, dict) else "update"
        for raw in (path, change.get("move_path") if isinstance(change, dict) else None):
            entity = em.file(_s(raw), ctx.cwd) if raw else None
            if entity:
                targets.append(Target(MODIFIES, entity, op))
    ok = p.get("success") is not False
    call = em.state.pending.get(call_id)
    if targets:
        em.edges(
            session_id=ctx.session_id,
            memory_id=em.memory_id(ctx.session_id, "call", call_id),
            tool="apply_patch",
            event_time=call.get("event_time") if call else ctx.time,
            targets=targets,
            outcome=OK if ok else ERROR,
        )
    text = _s(p.get("stderr")) or _s(p.get("stdout"))
    if ok:
        em.resolve(call_id, OK, replace_verb=MODIFIES if targets else None)
    else:
        em.resolve(
            call_id,
            ERROR,
            error=canonical_error(text or "patch failed"),
            message=text,
            replace_verb=MODIFIES if targets else None,
        )


def _s(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))
