"""`memoryd hook <agent> <event>`: context for Claude Code and Codex at the start of a session
and with each prompt, worked out in the daemon (the hook's process, memoryd/agent/hook_client.py,
only passes the JSON over and prints the answer).

- Reads the hook's JSON from stdin (`session_id`, `transcript_path`, `cwd`, `source`, `prompt`)
  and prints `{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`, or
  nothing at all when there is nothing new to say.
- SessionStart: a briefing on the repository of `cwd` (recent sessions and their goals, files
  changed lately, failures still open; after a pause, those of the week before it).
  UserPromptSubmit: the few memories and code chunks most relevant to the prompt.
- Before an edit (PreToolUse; Gemini's AfterTool of an edit, its BeforeTool cannot add
  context): the earlier sessions that edited the file (goal, agent, when, the files they
  edited along with it), the failures that followed those edits and what fixed them, the
  notes and decisions that name the file. After a failed call (PostToolUseFailure, Codex's
  PostToolUse, Gemini's AfterTool): where the same error (its signature) was seen before
  and what fixed it (RESOLVED_BY). Nothing when there is nothing earlier; at most
  `hook_action_max_chars` (default 600); never a decision to block.
- At most `hook_max_chars` characters (default 2000); every item says where it came from (which
  session, which tool, when).
- Never the same item twice in one session: what was injected is recorded in
  `<data dir>/hooks/<agent>-<session hash>.json` (0600; at most MAX_RECORDED keys, about 100 KB).
  The record starts afresh when the session is compacted or cleared (that context is gone), and
  a record unused for `hook_state_days` (default 7) is deleted by the daily prune. It also
  keeps the text of the last SHOWN_RECORDED injections (each at most `hook_max_chars`), so a
  person can see what went into their sessions (`memoryd ui`).
- Only this repository's own memory, and no tool output: raw results of tools (a web page, a
  command's output) could carry a prompt injection into later sessions, so prompts, assistant
  messages, agents' notes and code are injected, tool results and other repositories never.
- Fast: the whole hook runs under `hook_timeout_seconds` (default 1.5 s); when the daemon is
  down or slow it exits 0 with no output rather than hold up the agent. Its process starts
  in about 40 ms: it loads nothing but the standard library and the query channel.
- The transcript named by `transcript_path` is queued for ingestion at once, or once it
  appears when it does not exist yet (Claude Code's first SessionStart and UserPromptSubmit run
  before it writes the file). Stop / SessionEnd (Gemini CLI: AfterAgent / SessionEnd) only
  queue it: the turn's or the session's final read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import zip_longest
from pathlib import Path
from typing import Any

from memoryd import client
from memoryd.agent.present import activity_blocks, code_state, edited_files
from memoryd.agent_shared import clip, one_line, qualified
from memoryd.anchors import GONE
from memoryd.config import Settings
from memoryd.errors import MemorydError
from memoryd.hook_events import ACTION_EVENTS, CAPTURE_EVENTS, EVENTS, MAX_CHARS_RANGE
from memoryd.ids import stable_id
from memoryd.results import RecentActivity, Record, SearchRequest, SearchResult
from memoryd.vocabulary import INJECTABLE_MEMORY_KINDS

# SessionStart sources after which the agent's earlier context is gone.
RESET_SOURCES = frozenset({"compact", "clear"})
MAX_RECORDED = 1000
SHOWN_RECORDED = 10
# The share of the hook's budget its work may take in the daemon.
ANSWER_SHARE = 0.8
# Hits looked at per kind by a prompt hook's search (code: 20, as bench/context.py's code-only
# search: the fused order of shorter candidate lists is worse), and items it injects at most.
PROMPT_HITS = (("memory", 20), ("code", 20), ("docs", 4))
PROMPT_ITEMS = 12
ITEM_CHARS = 400
# A memory's line when its whole item does not fit: where it is and how it begins.
SHORT_CHARS = 200
RECENT_DAYS = 7
# Since when a briefing after a pause looks for the newest session: any time.
PAUSED_SINCE = datetime(1970, 1, 1, tzinfo=UTC)
# Files a briefing lists at most: the likeliest to be touched next, not all a long session did;
# sessions it lists before them (the newest: where the work stands; the rest come after the
# files, since a goal takes the room of two files and the files are what the next work touches).
BRIEFING_FILES = 8
BRIEFING_SESSIONS = 1
# Say nothing: fewer words than this, or an acknowledgement this short.
MIN_WORDS = 4
ACK_WORDS = 8
_ACK = re.compile(
    r"^(ok(ay)?|sure|done|thanks?( you)?|great|got it|yes|no|perfect|alright|will do|"
    r"understood|you'?re welcome|i'?ll)\b",
    re.IGNORECASE,
)
# A chunk of fewer lines says nothing on its own (a 2-line .gitattributes), unless the prompt
# names its file.
MIN_CHUNK_LINES = 3
# Agents' internal blocks and markers (aider's thinking blocks) are not context.
_MARKED_BLOCK = re.compile(r"<(thinking-content-[0-9a-f]+)>.*?</\1>", re.DOTALL)
_MARKER = re.compile(r"</?thinking-content-[0-9a-f]+>")
# What an agent puts before a prompt it echoes (aider: `/ask X` and then `X`).
_COMMAND = re.compile(r"^/(ask|code|architect|chat-mode|context|help)\s+", re.IGNORECASE)
# A relevance for rows of a file the prompt names (memoryd/searchindex: they score 1.0).
NAMED = 1.0


# The tools that write a file: Claude Code's, Codex's apply_patch, Gemini CLI's.
EDIT_TOOLS = frozenset(
    {"Edit", "Write", "MultiEdit", "NotebookEdit", "apply_patch", "replace", "write_file"}
)
# The files an apply_patch names (relative to the session's folder).
_PATCH_FILES = re.compile(r"^\*\*\* (?:(?:Update|Add|Delete) File|Move to): (.+)$", re.M)
# "Exit code 1" (Claude Code), "Exit code: 0" (Codex), "Exit Code: 1" (Gemini CLI).
_EXIT_CODE = re.compile(r"^\W*Exit code:? (-?\d+)", re.I | re.M)


@dataclass(slots=True)
class Item:
    """One injected piece of context and the key that keeps it from coming twice; `short`, a
    line that still says where it is (its id for `get`), for when the whole does not fit."""

    key: str
    text: str
    short: str = ""


@dataclass(slots=True)
class State:
    """What was injected into one agent session so far."""

    path: Path
    agent: str
    session: str
    injected: list[str] = field(default_factory=list)
    # The injections themselves, newest last: {"at", "event", "text"}.
    shown: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    def load(cls, settings: Settings, agent: str, session_id: str, reset: bool) -> State:
        path = settings.data_dir / "hooks" / f"{agent}-{stable_id(session_id)}.json"
        state = cls(path, agent, session_id)
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            recorded = json.loads(path.read_text())
            # What was shown stays shown after a reset: only the keys start afresh.
            state.shown = list(recorded.get("shown", []))
            if not reset:
                state.injected = list(recorded["injected"])
        return state

    def save(self, added: Sequence[str], event: str = "", text: str = "") -> None:
        self.injected = [*self.injected, *added][-MAX_RECORDED:]
        if text:
            at = datetime.now(UTC).isoformat()
            self.shown = [*self.shown, {"at": at, "event": event, "text": text}]
            self.shown = self.shown[-SHOWN_RECORDED:]
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        record = {
            "agent": self.agent,
            "session": self.session,
            "injected": self.injected,
            "shown": self.shown,
        }
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, self.path)


def injections(settings: Settings, limit: int) -> list[dict[str, str]]:
    """What the hooks injected lately, newest first, at most `limit`: each with its agent,
    session, time, event and text (the records above; expired with them)."""
    folder = settings.data_dir / "hooks"
    found: list[dict[str, str]] = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        # A record of an older memoryd (no agent, no texts) or a broken one: nothing shown.
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            recorded = json.loads(path.read_text())
            who = {"agent": str(recorded["agent"]), "session": str(recorded["session"])}
            found.extend(who | shown for shown in recorded.get("shown", []))
    return sorted(found, key=lambda shown: shown["at"], reverse=True)[:limit]


def expire_states(settings: Settings, now: float, dry_run: bool = False) -> int:
    """Delete records of sessions no hook touched for `hook_state_days` (the prune job's
    part: not per hook, where it would read the folder on every prompt); returns how many
    went (or would go)."""
    folder = settings.data_dir / "hooks"
    cutoff = now - settings.hook_state_days * 86400
    removed = 0
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            if path.stat().st_mtime < cutoff:
                if not dry_run:
                    path.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def pack(head: str, items: Sequence[Item], seen: set[str], limit: int) -> tuple[str, list[str]]:
    """`head` and the new items that fit in `limit` characters, index first: as many items as
    fit in their short form (whole when they have none), then, in order, each made whole while
    the budget allows (the agent can `get` the rest by id): a long first item must not crowd
    out the ones after it. Returns the text (empty when no item is new) and the keys of the
    items it holds."""
    chosen: list[Item] = []
    used = len(head)
    for item in items:
        first = item.short or item.text
        if item.key in seen or any(c.key == item.key for c in chosen):
            continue
        if used + 1 + len(first) <= limit:  # else a shorter one further down may still fit
            chosen.append(item)
            used += 1 + len(first)
    lines = []
    for item in chosen:
        first = item.short or item.text
        whole = used - len(first) + len(item.text) <= limit
        lines.append(item.text if whole else first)
        used += len(item.text) - len(first) if whole else 0
    return ("\n".join([head, *lines]) if chosen else ""), [item.key for item in chosen]


def _briefing_items(activity: RecentActivity, session_id: str) -> list[Item]:
    """The recent-activity lines, the hook's own session left out, each with its key; of
    the files, the BRIEFING_FILES likeliest to be touched next: those that still exist, then
    those more sessions came back to, then the most recently changed. In the order `pack`
    should try them."""
    files = sorted(
        activity["files"],
        key=lambda f: (f.get("anchor") != GONE, f["sessions"], f.get("last_at") or ""),
    )
    activity = {
        **activity,
        "sessions": [s for s in activity["sessions"] if s["session"] != session_id],
        "files": files[::-1][:BRIEFING_FILES],
        "failures": [f for f in activity["failures"] if not _from_web(f.get("tool"))],
    }
    keys = (
        [f"session:{s['session']}" for s in activity["sessions"]]
        + [n["id"] for n in activity["notes"]]  # the key a prompt's hit of the note has
        + [f"file:{f['file']}:{f.get('last_at')}" for f in activity["files"]]
        + [f"failure:{f['session']}#{f.get('seq')}" for f in activity["failures"]]
    )
    lines = activity_blocks(activity)  # type: ignore[arg-type]
    items = [Item(key, "- " + line) for key, line in zip(keys, lines, strict=True)]
    # The newest sessions, then notes, files and failures, then the older sessions: a long
    # list of sessions must not crowd out what the next work will touch.
    older = len(activity["sessions"])
    newest = min(BRIEFING_SESSIONS, older)
    return items[:newest] + items[older:] + items[newest:older]


def _from_web(tool: str | None) -> bool:
    name = (tool or "").lower().replace("_", "")
    return any(word in name for word in ("web", "fetch", "browser", "search"))


def record_item(record: Record) -> Item:
    """A record as the prompt hook injects it (bench/context.py prints its baseline so too)."""
    if record["kind"] == "code":
        where = f"{record.get('path')}:{record.get('start_line')}-{record.get('end_line')}"
        name = f" {record['name']}" if record.get("name") else ""
        head = f"- [{record['id']}] {record['kind']} {where}{name} (current index)"
        body = clip(record["text"].strip("\n"), ITEM_CHARS)[0]
        return Item(record["id"], f"{head}:\n{body}", head)
    when = (record.get("event_time") or "?")[:16].replace("T", " ")
    tool = record.get("tool") or "-"
    code = f", code {record['anchor']}" if record.get("anchor") else ""
    head = (
        f"- [{record['id']}] {record['kind']} (session {record.get('session')}#"
        f"{record.get('seq')}, tool {tool}, {when}{code}):"
    )
    whole = f"{head} {clean(record['text'])}"
    return Item(record["id"], one_line(whole, ITEM_CHARS), one_line(whole, SHORT_CHARS))


def clean(text: str) -> str:
    """A memory's text without agents' internal blocks and markers."""
    return _MARKER.sub("", _MARKED_BLOCK.sub("", text)).strip()


def said(text: str) -> str:
    """What a prompt or message says, for comparing: clean, without the command an agent
    put before an echoed prompt, in lower case, words only."""
    return " ".join(re.findall(r"[^\W_]+", _COMMAND.sub("", clean(text)).lower()))


def contentless(text: str) -> bool:
    """Too short to say anything, or an acknowledgement (`Done.`, `Sure, will do.`)."""
    words = said(text).split()
    return len(words) < MIN_WORDS or (len(words) < ACK_WORDS and bool(_ACK.match(" ".join(words))))


async def _briefing(
    memoryd: client.Client, payload: dict[str, Any], project: str
) -> tuple[str, list[Item]]:
    """The briefing's head and items: the work of the last RECENT_DAYS; after a pause that
    left nothing in them, the work of the RECENT_DAYS before the newest session: where the
    work stood when it stopped is what someone coming back needs, rather than nothing."""
    week = timedelta(days=RECENT_DAYS)
    activity = await memoryd.recent_activity(project, datetime.now(UTC) - week)
    head = f"memoryd: recent agent work in this repository ({project}):"
    if not (activity["sessions"] or activity["notes"]):
        # The newest sessions of any age (a few, newest first): when the work stopped.
        newest = (await memoryd.recent_activity(project, PAUSED_SINCE))["sessions"][:1]
        stopped = newest and (newest[0]["ended_at"] or newest[0]["started_at"])
        if stopped:
            activity = await memoryd.recent_activity(
                project, datetime.fromisoformat(stopped) - week
            )
            head = (
                f"memoryd: the last agent work in this repository ({project}), "
                f"before a pause (nothing since {stopped[:10]}):"
            )
    return head, _briefing_items(activity, str(payload.get("session_id") or ""))


async def _relevant(
    memoryd: client.Client, payload: dict[str, Any], project: str, seen: set[str]
) -> list[Item]:
    """Memories, code and docs near the prompt, above the relevance floor: files the prompt
    names first, then by relevance; none that says nothing, repeats the prompt or another
    item, at most one per earlier session (unless the prompt names it) and one per file."""
    prompt = str(payload.get("prompt") or "").strip()
    if not prompt:
        return []
    session_id = str(payload.get("session_id") or "")
    floor = memoryd.settings.hook_min_relevance
    kinds = tuple(kind for kind, _ in PROMPT_HITS)
    found = await memoryd.search(SearchRequest(prompt, kinds, project=project, limits=PROMPT_HITS))
    hits = [
        h
        for h in found.hits
        if h.kind != "memory" or (h.name in INJECTABLE_MEMORY_KINDS and h.session != session_id)
    ]
    hits = _in_turns([h for h in hits if h.score >= floor and _key(h) not in seen])
    hits = hits[: PROMPT_ITEMS * 3]  # room for what `_pick` leaves out
    if not hits:
        return []
    records = await memoryd.get([_key(h) for h in hits], ITEM_CHARS * len(hits))
    items = _pick(prompt, hits, records)
    memories = [item.key for item in items if item.key.startswith("memory:")]
    led = await memoryd.then_modified(memories) if memories else {}
    return [_then(item, led.get(item.key, [])) for item in items]


def _in_turns(hits: Sequence[SearchResult]) -> list[SearchResult]:
    """The rows of files the prompt names first, then the kinds taking turns, each in the
    search's own order (fused BM25 and k-NN ranks; a stale memory after a current one): what
    earlier sessions did and where the code is, rather than one crowding out the other (code
    scores above the prompts that led to it; the score is the relevance the floor is for)."""
    named = [h for h in hits if h.score >= NAMED]
    kinds = [[h for h in hits if h.kind == kind and h.score < NAMED] for kind, _ in PROMPT_HITS]
    return named + [h for turn in zip_longest(*kinds) for h in turn if h is not None]


def _then(item: Item, files: Sequence[str]) -> Item:
    """A memory's item with the files its session then modified, ahead of its text (which
    the item's budget may cut)."""
    if not files:
        return item
    then = f", then modified {', '.join(files)}"

    def led(text: str, limit: int) -> str:
        head, sep, rest = text.partition("): ")
        return one_line(f"{head}{then}{sep}{rest}", limit + len(then))

    return Item(item.key, led(item.text, ITEM_CHARS), led(item.short, SHORT_CHARS))


def _key(hit: SearchResult) -> str:
    """The id `get` gives the hit's record (a docs hit is a code chunk)."""
    return qualified("code_chunk" if hit.path is not None else hit.kind, hit.id)


def _pick(prompt: str, hits: Sequence[SearchResult], records: Sequence[Record]) -> list[Item]:
    own = said(prompt)
    texts, sources, items = {own}, set(), []
    for hit, record in zip(hits, records, strict=True):
        if hit.path is not None:
            lines = (record.get("chunk_end_line") or 0) - (record.get("start_line") or 0) + 1
            if lines < MIN_CHUNK_LINES and hit.score < NAMED:
                continue
            source = f"file:{hit.project}:{hit.path}"
        else:
            text = said(record["text"])
            if contentless(record["text"]) or text in texts or (len(text) > 20 and text in own):
                continue
            texts.add(text)
            source = "" if hit.session and hit.session in prompt else f"session:{hit.session}"
        if source and source in sources:
            continue
        sources.add(source)
        items.append(record_item(record))
        if len(items) == PROMPT_ITEMS:
            break
    return items


async def capture(memoryd: client.Client, payload: dict[str, Any]) -> None:
    """Queue the transcript the hook names: at once, or once it appears (a client's first
    hooks run before it writes the file)."""
    transcript = payload.get("transcript_path")
    if isinstance(transcript, str) and os.path.isabs(transcript):
        await memoryd.queue_ingest([transcript])


def edited_paths(payload: dict[str, Any]) -> list[str]:
    """The files an edit tool call is about to write, as the agent named them."""
    given = payload.get("tool_input")
    if payload.get("tool_name") not in EDIT_TOOLS or not isinstance(given, dict):
        return []
    named = [given.get(k) for k in ("file_path", "notebook_path", "absolute_path")]
    patch = given.get("command") or given.get("input")
    if isinstance(patch, str):
        named += _PATCH_FILES.findall(patch)
    return list(dict.fromkeys(p.strip() for p in named if isinstance(p, str) and p.strip()))


def failure_output(payload: dict[str, Any]) -> str:
    """What a failed tool call said, or "" when it did not fail as far as the client tells.

    Claude Code's PostToolUseFailure carries `error`; Gemini CLI's AfterTool a
    `tool_response` with `error` or, for a command, its output ending in a nonzero exit
    code; Codex's PostToolUse only the output, so any output but an exit code 0 is taken
    (a text is then said to have failed only if its error signature failed before)."""
    if isinstance(payload.get("error"), str):
        return str(payload["error"])
    response = payload.get("tool_response")
    if isinstance(response, dict):
        error = response.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or "error")
        if error:
            return str(error)
        text = str(response.get("llmContent") or "")
        code = _EXIT_CODE.search(text)
        return text if code and code.group(1) != "0" else ""
    if isinstance(response, str):
        code = _EXIT_CODE.search(response)
        return "" if code and code.group(1) == "0" else response
    return ""


def _when(value: str | None) -> str:
    return (value or "?")[:16].replace("T", " ")


def _fix_text(fix: dict[str, Any]) -> str:
    """How a fix went: the files modified, then the command (or edit) that succeeded."""
    files = fix.get("files") or []
    done = f"modified {', '.join(files)}, then " if files else ""
    return f"{done}`{one_line(str(fix.get('detail') or fix.get('verb') or '?'), 120)}` succeeded"


def file_items(context: dict[str, Any]) -> list[Item]:
    """The lines about one file, each with the key that keeps it from coming twice (a note's
    is the key its prompt hit and briefing line have)."""
    items = []
    for s in context.get("sessions", []):
        goal = f"; goal: {one_line(s['goal'], 120)}" if s.get("goal") else ""
        outcome = [
            f"then {f['name']} (#{f['seq']}): "
            + (
                f"fixed in session {f['fixed']['session']} ({_when(f['fixed']['event_time'])}), "
                f"{_fix_text(f['fixed'])}"
                if f.get("fixed")
                else "not fixed since"
            )
            for f in s["failures"]
        ]
        after = "; ".join(outcome) or "no failure followed"
        along = edited_files(s.get("edited_with"), "along with")
        text = (
            f"- session {s['session']} ({s.get('agent') or '?'}, {_when(s['last_edit'])}) "
            f"edited it{code_state(s.get('anchor'))}{along}{goal}; {after}"
        )
        # Clipped, not dropped: a long session's line must still fit the small budget.
        items.append(Item(f"edit:{s['session']}:{context['file']}", one_line(text, ITEM_CHARS)))
    for n in context.get("notes", []):
        code = code_state(n.get("anchor"))
        head = f"- [{n['id']}] {n['kind']} ({_when(n.get('event_time'))}){code}:"
        items.append(Item(n["id"], one_line(f"{head} {n['text']}", ITEM_CHARS)))
    usually = context.get("changes_with") or []
    if usually:
        # Last: the least about this file itself, so the first to stay out of a full budget.
        files = ", ".join(f"{c['path']} ({c['count']:g} commits)" for c in usually)
        items.append(Item(f"usually:{context['file']}", f"- usually changes with {files}"))
    return items


def error_items(context: dict[str, Any]) -> list[Item]:
    """Where an error was seen before and what fixed it, each line with its key."""
    signature, last = context["signature"], context["seen"][-1]
    times = f"{context['times']} times, last" if context["times"] > 1 else "once,"
    items = [
        Item(
            f"error:{signature}",
            f"- seen {times} in session {last['session']} ({last.get('agent') or '?'}, "
            f"{_when(last.get('event_time'))})",
        )
    ]
    for fix in context["resolutions"]:
        items.append(
            Item(
                f"resolved:{signature}:{fix['session']}:{fix.get('event_time')}",
                f"- fixed in session {fix['session']} ({_when(fix.get('event_time'))}): "
                f"{_fix_text(fix)}",
            )
        )
    if not context["resolutions"]:
        items.append(
            Item(f"unresolved:{signature}", "- no fix recorded: the same call never succeeded")
        )
    return items


async def _before_edit(
    memoryd: client.Client, payload: dict[str, Any], project: str, cwd: Path
) -> tuple[str, list[Item]]:
    session = str(payload.get("session_id") or "")
    files: list[str] = []
    items: list[Item] = []
    for path in edited_paths(payload):
        context = await memoryd.file_context(project, str(cwd), path, session)
        if context:
            files.append(context["file"])
            items += file_items(context)
    head = f"memoryd: before you edit {', '.join(files)}, what earlier sessions did to it:"
    if all(item.key.startswith("usually:") for item in items):
        head = f"memoryd: before you edit {', '.join(files)}:"
    return head, items


async def _after_failure(
    memoryd: client.Client, payload: dict[str, Any], project: str
) -> tuple[str, list[Item]]:
    output = failure_output(payload)
    if not output.strip() or _from_web(str(payload.get("tool_name") or "")):
        return "", []
    context = await memoryd.error_context(project, output, str(payload.get("session_id") or ""))
    if not context:
        return "", []
    head = f"memoryd: this failure ({one_line(context['error'], 120)}) happened before here:"
    return head, error_items(context)


async def _action_context(
    memoryd: client.Client, event: str, payload: dict[str, Any], project: str, cwd: Path
) -> tuple[str, list[Item]]:
    """The head and items of a hook about one action (see the module's docstring)."""
    if event == "PreToolUse" or (event == "AfterTool" and edited_paths(payload)):
        return await _before_edit(memoryd, payload, project, cwd)
    return await _after_failure(memoryd, payload, project)


async def context_for(
    memoryd: client.Client, event: str, payload: dict[str, Any], state: State, limit: int
) -> tuple[str, list[str]]:
    cwd = Path(str(payload["cwd"]))
    await capture(memoryd, payload)
    scope = await memoryd.scope(cwd)
    if scope.project is None:
        return "", []  # not a watched repository: other repositories' memory stays out
    seen = set(state.injected)
    if event in ACTION_EVENTS:
        head, items = await _action_context(memoryd, event, payload, scope.project, cwd)
    elif event == "SessionStart":
        head, items = await _briefing(memoryd, payload, scope.project)
    else:
        items = await _relevant(memoryd, payload, scope.project, seen)
        head = "memoryd: earlier work related to this prompt (ids work with memoryd's get):"
    return pack(head, items, seen, limit)


def cap(given: object, default: int) -> int:
    """The hook process's `hook_max_chars` (a string from its environment or a TOML value),
    within bounds; the daemon's own when it gives none or nonsense."""
    try:
        low, high = MAX_CHARS_RANGE
        return default if given is None else max(low, min(int(str(given)), high))
    except ValueError:
        return default


async def run(
    memoryd: client.Client, agent: str, command: str, stdin: str, cwd: str, max_chars: object
) -> str:
    """The hook's whole answer, worked out in the daemon: what the hook prints (maybe
    nothing). Never raises for a problem of memoryd's: the agent must go on."""
    settings = memoryd.settings
    event = EVENTS[(agent, command)]
    # The hook process's own cap is for the session and prompt hooks.
    limit = (
        settings.hook_action_max_chars
        if event in ACTION_EVENTS
        else cap(max_chars, settings.hook_max_chars)
    )
    try:
        payload = json.loads(stdin or "{}")
    except ValueError:
        return ""
    if not isinstance(payload, dict):
        return ""
    payload.setdefault("cwd", cwd)  # the hook's own folder when the agent names none
    # Inside the hook process's budget, with room for the answer's way back.
    budget = settings.hook_timeout_seconds * ANSWER_SHARE
    if event in CAPTURE_EVENTS:
        with contextlib.suppress(MemorydError, TimeoutError, OSError):
            await asyncio.wait_for(capture(memoryd, payload), budget)
        return ""
    session_id = str(payload.get("session_id") or "")
    reset = event == "SessionStart" and payload.get("source") in RESET_SOURCES
    state = State.load(settings, agent, session_id or "no-session", reset)
    try:
        text, keys = await asyncio.wait_for(
            context_for(memoryd, event, payload, state, limit), budget
        )
    except (MemorydError, TimeoutError, OSError):
        text, keys = "", []
    if keys or reset:
        with contextlib.suppress(OSError):
            state.save(keys, event, text)
    if not text:
        return ""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})
