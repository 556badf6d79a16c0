"""Gemini CLI chats (``~/.gemini/tmp/<projectHash>/chats/session-*.json`` and ``*.jsonl``).

Two layouts (shared/docs/transcript-formats.md §3):

- legacy: one pretty-printed JSON document ``{sessionId, projectHash, startTime, lastUpdated,
  messages: [...]}``, rewritten whole on every update (``JSON.stringify(conversation, null,
  2)``). It is read as a stream: top-level fields from their own lines, each message from its
  ``    {`` line to its ``    }`` line, one message in memory at a time (at most
  ``MAX_MESSAGE_BYTES``; a larger one is skipped). The caller re-reads a rewritten file from
  offset 0 with the state it kept: message and tool-call ids say what was already emitted, so
  only what is new (a new message, a result that arrived) makes events.
- current: JSONL, a metadata line, then message records (the same ``id`` re-appended as a
  message grows: last wins), ``{"$set": {...}}`` and ``{"$rewindTo": id}`` lines.

``logs.json`` (an array of the prompts typed, also in the chats) is recognised and skipped.

What becomes what: ``user`` → user_prompt (the first is the goal), ``gemini`` → assistant_message,
``error`` → error memory; each tool call → tool_call memory, and with its final ``status`` a
tool_result/error memory and its edges: ``read_file``/``read_many_files``/``list_directory``/
``glob``/``search_file_content`` READS, ``write_file``/``replace`` MODIFIES,
``run_shell_command`` EXECUTES (+ the files the command line touches, via="shell"), anything
else EXECUTES the tool; ``error`` → TRIGGERED, ``cancelled`` → DENIED (user_rejected).

Chats hold no working directory. It is the watched project whose path hashes (sha256) to the
chat's ``projectHash``, or else a path a tool result states that hashes to it; until one is
known, relative paths name no file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from workers.stages.entities import (
    Entity,
    canonical_error,
    canonical_tool,
    canonical_url,
    normalize_path,
)
from workers.stages.transcripts.emitter import Emitter
from workers.stages.transcripts.events import (
    CAP_TOOL_INPUT,
    CAP_TOOL_OUTPUT,
    ERROR,
    EXECUTES,
    MODIFIES,
    OK,
    READS,
    USER_REJECTED,
    Source,
    Target,
    shell_targets,
)
from workers.stages.transcripts.lines import DEEP, Line
from workers.stages.transcripts.state import ParseResult, ParserState
from workers.stages.transcripts.text import norm_time

AGENT = "gemini"
MAX_MESSAGE_BYTES = 8 * 1024 * 1024

_TOP_FIELD = re.compile(r'^  "(sessionId|projectHash|startTime|lastUpdated)": (".*?"|null)')
_MESSAGE_START, _MESSAGE_ENDS = "    {", ("    }", "    },")
_FINAL = frozenset({"success", "error", "cancelled"})
_READ_TOOLS = {
    "read_file": ("file_path", "absolute_path", "path"),
    "list_directory": ("dir_path", "path"),
}
# grep_search is search_file_content's current name
_SEARCH_TOOLS = frozenset({"glob", "search_file_content", "grep", "grep_search", "search_files"})
_WRITE_TOOLS = frozenset({"write_file", "replace", "edit"})
_URL = re.compile(r"https?://[^\s\"'<>)]+")
# An absolute path a tool result states ("…wrote to new file: /abs/path").
_ABS_PATH = re.compile(r"(/[^\s\"'`]+)")
# run_shell_command's answer ends with "Exit Code: N" (only when non-zero in newer versions),
# while the call's status says "success": the tool ran, the command failed.
_EXIT_CODE = re.compile(r"^Exit Code: (-?\d+)\s*$", re.M)
# The frame around a shell command's output: nothing of the failure itself.
_SHELL_FRAME = re.compile(
    r"^(?:(?:Command|Directory|Signal|Background PIDs|Process Group PGID|Exit Code): .*"
    r"|Error: \(none\))$\n?",
    re.M,
)
# Where current Gemini CLI writes the project a chats folder belongs to (<tmp>/<slug>/).
PROJECT_ROOT_FILE = ".project_root"


def new_state() -> ParserState:
    return ParserState(agent=AGENT)


def detect(head: bytes) -> bool:
    """A Gemini chat (either layout) or its ``logs.json``."""
    start = head.lstrip()[:2000]
    if b'"projectHash"' in start and b'"sessionId"' in start:
        return True
    return start.startswith(b"[") and b'"messageId"' in start and b'"sessionId"' in start


def detect_path(path: str) -> bool:
    return "/.gemini/" in path


def parse(
    lines: Iterable[Line], state: ParserState | None = None, source: Source | str = ""
) -> ParseResult:
    """Parse complete lines of either layout; never raises on bad input."""
    em = Emitter.for_parse(AGENT, state, source)
    ctx = em.state.context
    for line in lines:
        if line.oversize and ctx.get("buf") is not None:
            _drop_message(em, ctx)
            continue
        if line.oversize:
            em.skip(line.offset, f"line of {line.oversize} bytes skipped")
            continue
        text = line.raw.decode("utf-8", errors="replace")
        try:
            _line(em, ctx, text, line.offset)
        except RecursionError:
            em.skip(line.offset, DEEP, text[:80])
            ctx.pop("buf", None)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            em.skip(line.offset, f"unreadable Gemini record: {exc!r}", text[:80])
            ctx.pop("buf", None)
    return em.result()


def _line(em: Emitter, ctx: dict[str, Any], text: str, offset: int) -> None:
    buf: list[str] | None = ctx.get("buf")
    if buf is not None:  # inside a message of the legacy document
        ctx["buf_bytes"] = ctx.get("buf_bytes", 0) + len(text)
        if ctx["buf_bytes"] > MAX_MESSAGE_BYTES:
            _drop_message(em, ctx)
            return
        buf.append(text)
        if text.rstrip() in _MESSAGE_ENDS:
            ctx["buf"], ctx["buf_bytes"] = None, 0
            _record(em, ctx, json.loads("".join(buf).rstrip().rstrip(",")), ctx["buf_at"])
        return
    if ctx.get("skipping"):
        ctx["skipping"] = text.rstrip() not in _MESSAGE_ENDS
        return
    stripped = text.strip()
    if text.rstrip() == _MESSAGE_START:
        ctx["buf"], ctx["buf_at"], ctx["buf_bytes"] = ["{"], offset, 0
    elif stripped.startswith("{") and stripped.endswith("}"):  # a JSONL record
        record = json.loads(stripped)
        if isinstance(record, dict):
            _record(em, ctx, record, offset)
    elif m := _TOP_FIELD.match(text):
        _metadata(em, ctx, {m.group(1): json.loads(m.group(2))})
    # anything else is the document's frame (`{`, `"messages": [`, `]`, `}`) or logs.json


def _drop_message(em: Emitter, ctx: dict[str, Any]) -> None:
    """Stop holding a message that grew too big; skip its lines up to its end."""
    em.skip(ctx["buf_at"], f"message over {MAX_MESSAGE_BYTES} bytes skipped")
    ctx["buf"], ctx["buf_bytes"], ctx["skipping"] = None, 0, True


def _record(em: Emitter, ctx: dict[str, Any], rec: dict[str, Any], offset: int) -> None:
    if "$set" in rec or "$rewindTo" in rec:
        # metadata updates; a rewind hides later messages in Gemini, but they happened
        if isinstance(rec.get("$set"), dict):
            _metadata(em, ctx, rec["$set"])
        return
    if "messages" in rec and isinstance(rec["messages"], list):  # a whole document on a line
        _metadata(em, ctx, rec)
        for message in rec["messages"]:
            if isinstance(message, dict):
                _message(em, ctx, message, offset)
        return
    if "type" not in rec and ("sessionId" in rec or "projectHash" in rec):
        _metadata(em, ctx, rec)
    elif "id" in rec and "type" in rec:
        _message(em, ctx, rec, offset)


def _metadata(em: Emitter, ctx: dict[str, Any], rec: dict[str, Any]) -> None:
    if isinstance(rec.get("sessionId"), str):
        ctx["session_id"] = rec["sessionId"]
    if isinstance(rec.get("projectHash"), str):
        ctx["project_hash"] = rec["projectHash"]
        root = next((p.root for p in em.projects if _hash(p.root) == rec["projectHash"]), None)
        if root and not ctx.get("cwd"):
            ctx["cwd"] = root
    if not ctx.get("cwd"):
        ctx["cwd"] = _marked_root(em.source.path)
    sid = ctx.get("session_id")
    if sid:
        times = [norm_time(rec.get(k)) for k in ("startTime", "lastUpdated")]
        for t in times or [None]:
            em.session(sid, event_time=t, external_id=sid, cwd=ctx.get("cwd"))


def _marked_root(path: str) -> str | None:
    """The project a current Gemini CLI chat belongs to, from ``<slug>/.project_root`` beside
    its ``chats`` folder (older versions name the folder by the hash and write no marker)."""
    parts = path.replace("\\", "/").split("/")[:-1]
    if "chats" not in parts:
        return None
    folder = "/".join(parts[: len(parts) - 1 - parts[::-1].index("chats")])
    try:
        with open(f"{folder}/{PROJECT_ROOT_FILE}", encoding="utf-8") as f:
            root = f.read(4096).strip()
    except OSError:
        return None
    return root if root.startswith("/") else None


def _hash(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()


def _message(em: Emitter, ctx: dict[str, Any], m: dict[str, Any], offset: int) -> None:
    sid = ctx.get("session_id")
    mid = m.get("id")
    if not sid or not isinstance(mid, str):
        em.skip(offset, "Gemini message before any session id" if not sid else "message without id")
        return
    time = norm_time(m.get("timestamp"))
    em.session(sid, event_time=time, external_id=sid, cwd=ctx.get("cwd"))
    done: list[str] = ctx.setdefault("done", {}).setdefault(mid, [])

    def once(part: str) -> bool:
        """Each part of a message makes events once, however often it is re-read."""
        if part in done:
            return False
        done.append(part)
        return True

    kind = {"user": "user_prompt", "gemini": "assistant_message", "error": "error"}
    text = _content_text(m.get("content"))
    if m.get("type") in kind and text.strip() and once("text"):
        mem = em.memory(
            sid,
            kind[m["type"]],
            text,
            key=("msg", mid),
            event_time=time,
            offset=offset,
            source_id=mid,
        )
        if m["type"] == "user" and not text.lstrip().startswith("/"):
            em.goal(sid, text, mem)
    for call in m.get("toolCalls") or ():
        if isinstance(call, dict) and isinstance(call.get("id"), str):
            _tool_call(em, ctx, sid, call, time, offset, once)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _tool_call(
    em: Emitter,
    ctx: dict[str, Any],
    sid: str,
    call: dict[str, Any],
    time: str | None,
    offset: int,
    once: Any,
) -> None:
    cid, name = call["id"], str(call.get("name") or "unknown")
    args = call.get("args") if isinstance(call.get("args"), dict) else {}
    tool = canonical_tool(name).key
    output = _output(call)
    _learn_cwd(ctx, em, sid, args, output)
    memory_id = em.memory_id(sid, "call", cid)
    if once(f"call:{cid}"):
        em.memory(
            sid,
            "tool_call",
            f"{name} {json.dumps(args, ensure_ascii=False)}",
            key=("call", cid),
            event_time=time,
            offset=offset,
            cap=CAP_TOOL_INPUT,
            source_id=cid,
            tool=tool,
            call_id=cid,
        )
        em.call(
            cid,
            session_id=sid,
            memory_id=memory_id,
            tool=tool,
            event_time=time,
            targets=_targets(name, args, ctx.get("cwd"), em),
        )
    status = call.get("status")
    if status not in _FINAL or not once(f"result:{cid}"):
        return
    code = _exit_code(output) if name == "run_shell_command" else None
    failed = status == "error" or bool(code)
    em.memory(
        sid,
        "error" if failed else "tool_result",
        output,
        key=("result", cid),
        event_time=norm_time(call.get("timestamp")) or time,
        offset=offset,
        cap=CAP_TOOL_OUTPUT,
        source_id=cid,
        tool=tool,
        call_id=cid,
    )
    if status == "cancelled":
        em.resolve(cid, OK, denial=USER_REJECTED, message=output)
        return
    outcome = ERROR if failed else OK
    if failed:
        text = _SHELL_FRAME.sub("", output).removeprefix("Output: ") if code else output
        em.resolve(
            cid, ERROR, exit_code=code, error=canonical_error(text or "error", code), message=output
        )
    else:
        em.resolve(cid, OK, exit_code=code)
    unresolved = _relative_paths(name, args) if not ctx.get("cwd") else []
    if unresolved:  # edges for when the directory is learned
        deferred = {"memory_id": memory_id, "tool": tool, "time": time, "outcome": outcome}
        ctx.setdefault("deferred", []).append({**deferred, "sid": sid, "paths": unresolved})


def _exit_code(output: str) -> int | None:
    codes = _EXIT_CODE.findall(output)
    return int(codes[-1]) if codes else None


def _relative_paths(name: str, args: dict[str, Any]) -> list[list[str]]:
    """(verb, path, detail) of what a call names relative to a directory nobody knows yet."""
    found: list[list[str]] = []
    if name in _READ_TOOLS:
        path = next((args[k] for k in _READ_TOOLS[name] if args.get(k)), None)
        found.append([READS, path, ""])
    elif name == "read_many_files" and isinstance(args.get("paths"), list):
        found += [[READS, p, ""] for p in args["paths"] if isinstance(p, str) and "*" not in p]
    elif name in _SEARCH_TOOLS:
        path = args.get("dir_path") or args.get("path") or "."
        found.append([READS, path, f"{name} {args.get('pattern') or ''}".strip()])
    elif name in _WRITE_TOOLS:
        found.append([MODIFIES, args.get("file_path"), name])
    return [f for f in found if isinstance(f[1], str) and f[1] and not f[1].startswith(("/", "~"))]


def _flush_deferred(em: Emitter, ctx: dict[str, Any]) -> None:
    """The edges of earlier calls whose relative paths the directory just learned resolves."""
    for d in ctx.pop("deferred", []):
        targets = [
            Target(verb, entity, detail)
            for verb, path, detail in d["paths"]
            if (entity := em.file(path, ctx["cwd"]))
        ]
        em.edges(
            session_id=d["sid"],
            memory_id=d["memory_id"],
            tool=d["tool"],
            event_time=d["time"],
            targets=targets,
            outcome=d["outcome"],
        )


def _output(call: dict[str, Any]) -> str:
    """A tool's answer: functionResponse output/error, else what the UI displayed."""
    texts: list[str] = []
    for part in call.get("result") or ():
        response = (
            part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        )
        if isinstance(response, dict):
            value = response.get("output", response.get("error", ""))
            texts.append(value if isinstance(value, str) else json.dumps(value))
    display = call.get("resultDisplay")
    return "\n".join(texts) or (display if isinstance(display, str) else "")


def _learn_cwd(
    ctx: dict[str, Any], em: Emitter, sid: str, args: dict[str, Any], output: str
) -> None:
    """The directory is the folder, among those of the absolute paths a call names or its
    result states, that hashes to the chat's projectHash (then it is certain). The edges of
    earlier calls that named paths relative to it are made then."""
    if ctx.get("cwd") or not ctx.get("project_hash"):
        return
    named = [v for v in args.values() if isinstance(v, str)]
    named += [p for p in args.get("paths") or () if isinstance(p, str)]
    for path in [*named, *_ABS_PATH.findall(output[:2000])]:
        folders = path.rstrip(".:,").split("/")
        if not path.startswith("/") or len(folders) > 64:
            continue
        for n in range(len(folders), 1, -1):
            root = "/".join(folders[:n])
            if _hash(root) == ctx["project_hash"]:
                ctx["cwd"] = root
                em.session(sid, cwd=root)
                _flush_deferred(em, ctx)
                return


def _targets(name: str, args: dict[str, Any], cwd: str | None, em: Emitter) -> list[Target]:
    def file(path: Any) -> Entity | None:
        if not isinstance(path, str) or not path:
            return None
        return em.file(path, cwd) if path.startswith(("/", "~")) or cwd else None

    if name in _READ_TOOLS:
        entity = file(next((args[k] for k in _READ_TOOLS[name] if args.get(k)), None))
        return [Target(READS, entity)] if entity else []
    if name == "read_many_files":
        paths = args.get("paths") if isinstance(args.get("paths"), list) else []
        entities = [file(p) for p in paths if isinstance(p, str) and not any(c in p for c in "*?[")]
        return [Target(READS, e) for e in entities if e]
    if name in _SEARCH_TOOLS:
        entity = file(args.get("dir_path") or args.get("path") or cwd)
        detail = f"{name} {args.get('pattern') or ''}".strip()
        return [Target(READS, entity, detail)] if entity else []
    if name in _WRITE_TOOLS:
        entity = file(args.get("file_path"))
        return [Target(MODIFIES, entity, name)] if entity else []
    if name == "run_shell_command":
        where = args.get("dir_path") or args.get("directory")
        if isinstance(where, str) and where:
            cwd = normalize_path(where, cwd) if where.startswith("/") or cwd else None
        return shell_targets(str(args.get("command") or ""), cwd, em.source)
    if name == "web_fetch":
        urls = [
            canonical_url(u) for u in _URL.findall(str(args.get("prompt") or args.get("url") or ""))
        ]
        found = [Target(READS, u) for u in urls if u]
        if found:
            return found
    return [Target(EXECUTES, canonical_tool(name), str(args.get("description") or "")[:200])]
