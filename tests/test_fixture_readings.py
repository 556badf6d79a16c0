"""Every fixture transcript, read twice: by memoryd's parsers and by an independent reading here.

The independent reading does not import memoryd's parsers: it walks the JSON itself, pairs
each tool call with its result, and decides the outcome from what the record says (is_error and
its text for Claude Code; exec_command_end exit codes, patch_apply_end and web search status for
Codex). Both sides are tables of verb x outcome with one count per tool call (edges of one verb
from one call count once). The file entities memoryd makes are checked against the hand-reviewed
list in fixtures/transcripts/expected-files.tsv.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

import pytest

from workers.stages.transcripts import detect_agent, parser_for, split_lines
from workers.stages.transcripts.events import Action, Denied, Memory, Source, Triggered
from workers.stages.transcripts.state import ParseResult

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
TRANSCRIPTS = sorted(
    [
        *FIXTURES.glob("claude-code/*/*.jsonl"),
        *FIXTURES.glob("codex/*.jsonl"),
        *FIXTURES.glob("gemini/session-*.json"),
    ],
    key=lambda p: p.name,
)


def parse(path: Path) -> ParseResult:
    data = path.read_bytes()
    agent = detect_agent(data[:65536], str(path))
    assert agent is not None
    lines, _ = split_lines(data, 0)
    # The path as the fixture sits in the repo: no home directory can be read from it.
    return parser_for(agent).parse(lines, None, Source.of(str(path.relative_to(FIXTURES))))


def memoryd_table(result: ParseResult) -> Counter[str]:
    """One count per (tool call, verb) for the edges of the call's own tool (not the files a
    shell command line implies: those are checked against expected-files.tsv)."""
    seen: set[tuple[str, str]] = set()
    for e in result.events:
        if isinstance(e, Action) and e.via == "tool":
            seen.add((e.memory_id, f"{e.verb} {e.outcome}"))
        elif isinstance(e, Denied):
            seen.add((e.memory_id, f"DENIED {e.reason}"))
        elif isinstance(e, Triggered):
            seen.add((e.memory_id, "TRIGGERED"))
    return Counter(row for _, row in seen)


# --- the independent reading ------------------------------------------------------------------

CLAUDE_VERBS = {
    "Read": "READS",
    "Grep": "READS",
    "Glob": "READS",
    "LS": "READS",
    "WebFetch": "READS",
    "Edit": "MODIFIES",
    "MultiEdit": "MODIFIES",
    "Write": "MODIFIES",
    "NotebookEdit": "MODIFIES",
    "Task": "SPAWNED",  # not a verb edge: the subagent link
}
USER_REJECTED = "The user doesn't want to proceed with this tool use"
PERMISSION = (
    "requested permissions",
    "requires approval",
    "require approval",
    "needs approval",
    "was blocked. For security",
)


def claude_reading(path: Path) -> Counter[str]:
    calls: dict[str, str] = {}
    results: dict[str, tuple[bool, str]] = {}
    for raw in path.read_bytes().splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        message = rec.get("message") if isinstance(rec, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if block.get("type") == "tool_use":
                calls[block["id"]] = block["name"]
            elif block.get("type") == "tool_result":
                body = block.get("content")
                text = body if isinstance(body, str) else json.dumps(body)
                results[block["tool_use_id"]] = (block.get("is_error") is True, text)
    table: Counter[str] = Counter()
    for call_id, name in calls.items():
        if call_id not in results:
            continue  # no result in the file: still pending
        is_error, text = results[call_id]
        verb = CLAUDE_VERBS.get(name, "EXECUTES")
        if is_error and USER_REJECTED in text:
            table["DENIED user_rejected"] += 1
        elif is_error and any(p in text for p in PERMISSION):
            table["DENIED permission_denied"] += 1
        elif verb != "SPAWNED":
            table[f"{verb} {'error' if is_error else 'ok'}"] += 1
            table["TRIGGERED"] += is_error
    return +table


def codex_reading(path: Path) -> Counter[str]:
    calls: dict[str, str] = {}
    ends: dict[str, str] = {}
    for raw in path.read_bytes().splitlines():
        rec = json.loads(raw)
        p = rec["payload"]
        kind = p.get("type")
        if kind in ("function_call", "custom_tool_call") and p["name"] != "write_stdin":
            calls[p["call_id"]] = p["name"]  # write_stdin only polls a running command
        elif kind == "web_search_call":  # no call id in this version: one call per record
            key = f"web_search {len(calls)}"
            calls[key] = "web_search"
            ends[key] = "ok" if p.get("status") == "completed" else "error"
        elif kind == "exec_command_end":
            words = shlex.split(p["command"][-1])  # the script of `zsh -lc '…'`
            last = words[len(words) - words[::-1].index("|") if "|" in words else 0]
            code = p["exit_code"]
            ok = code == 0 or (code == 1 and last in ("rg", "grep"))  # exit 1: no match
            ends[p["call_id"]] = "ok" if ok else "error"
        elif kind == "patch_apply_end":
            ends[p["call_id"]] = "ok" if p["success"] else "error"
        elif kind == "function_call_output" and calls.get(p["call_id"]) == "update_plan":
            ends[p["call_id"]] = "ok"
    table: Counter[str] = Counter()
    for call_id, name in calls.items():
        verb = "MODIFIES" if name == "apply_patch" else "EXECUTES"
        table[f"{verb} {ends[call_id]}"] += 1
        table["TRIGGERED"] += ends[call_id] == "error"
    return +table


GEMINI_VERBS = {
    "read_file": "READS",
    "read_many_files": "READS",
    "list_directory": "READS",
    "glob": "READS",
    "search_file_content": "READS",
    "grep_search": "READS",
    "write_file": "MODIFIES",
    "replace": "MODIFIES",
}


def gemini_reading(path: Path) -> Counter[str]:
    table: Counter[str] = Counter()
    for message in json.loads(path.read_text())["messages"]:
        for call in message.get("toolCalls") or ():
            status = call["status"]
            verb = GEMINI_VERBS.get(call["name"], "EXECUTES")
            # a shell command's non-zero exit is in its output, under status "success"
            output = json.dumps(call.get("result"))
            exited = call["name"] == "run_shell_command" and "Exit Code: " in output
            code = output.rsplit("Exit Code: ", 1)[-1].split("\\n")[0] if exited else "0"
            failed = status == "error" or code.strip() not in ("0", "")
            if status == "cancelled":
                table["DENIED user_rejected"] += 1
            elif status in ("success", "error"):
                table[f"{verb} {'error' if failed else 'ok'}"] += 1
                table["TRIGGERED"] += failed
    return +table


def aider_reading(path: Path) -> Counter[str]:
    """aider states no exit status: every action it logs is ok. `> Applied edit to F` edits,
    `> Added F to the chat` reads (not `> Added 6 lines of output to the chat`), and a
    prompt block starting `/run CMD` or `!CMD` runs CMD."""
    table: Counter[str] = Counter()
    previous = ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("> Applied edit to "):
            table["MODIFIES ok"] += 1
        elif re.fullmatch(r"> Added (.+) to the chat\.?\s*", line) and not re.match(
            r"> Added \d+ lines? of output", line
        ):
            table["READS ok"] += 1
        elif line.startswith("#### ") and not previous.startswith("####"):
            command = line[5:].removeprefix("/run ").removeprefix("!").strip()
            runs = line[5:].startswith(("/run ", "!")) and command
            table["EXECUTES ok"] += bool(runs)
        previous = line
    return +table


def reading(path: Path) -> Counter[str]:
    if "claude-code" in path.parts:
        return claude_reading(path)
    if "aider" in path.parts:
        return aider_reading(path)
    return codex_reading(path) if "codex" in path.parts else gemini_reading(path)


# Where the two readings differ, and why (fixture name -> rows memoryd has minus rows the
# independent reading has; negative = memoryd has fewer).
EXPLAINED: dict[str, dict[str, int]] = {
    # The four BashOutput calls poll the background `uv tool install` Bash call: memoryd
    # settles that call with their status and gives them no edge of their own.
    "cb2e607c-c758-415a-8b45-c49e4631906a.jsonl": {"EXECUTES ok": -4},
    # aider's `#### !!` (line 81237) runs `!`: bash's negation of an empty command, no
    # program, so no EXECUTES edge.
    "chat-history.md": {"EXECUTES ok": -1},
    # Every other fixture agrees call for call. (Task calls make SPAWNED, counted by neither;
    # the denied `Read ~/.claude/CLAUDE.md` is DENIED on the file "~/.claude/CLAUDE.md", as
    # no home is known.)
}


AIDER_LOGS = sorted(FIXTURES.glob("aider/*.md"))


@pytest.mark.parametrize("path", [*TRANSCRIPTS, *AIDER_LOGS], ids=lambda p: p.name[:12])
def test_verbs_and_outcomes_match_an_independent_reading(path: Path) -> None:
    mine = memoryd_table(parse(path))
    theirs = reading(path)
    diff = Counter(mine)
    diff.subtract(theirs)
    assert {k: v for k, v in diff.items() if v} == EXPLAINED.get(path.name, {})


def test_the_tables_hold_what_the_fixtures_are_known_for() -> None:
    # The numbers SOURCES.md states for the fixtures, as a check on both readings.
    by_name = {p.name[:8]: memoryd_table(parse(p)) for p in TRANSCRIPTS}
    s37 = by_name["37f83ec9"]
    assert s37["TRIGGERED"] == 19 and s37["DENIED user_rejected"] == 2
    assert sum(v for k, v in by_name["2b4ed4c0"].items() if k.startswith("DENIED")) == 6
    codex = by_name["rollout-"]
    assert codex["EXECUTES ok"] + codex["EXECUTES error"] == 43 + 2 + 3  # exec, plan, search
    assert codex["MODIFIES ok"] == 3 and codex["TRIGGERED"] == 2


def expected_files() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for line in (FIXTURES / "expected-files.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            fixture, key, verbs = line.split("\t")
            out.setdefault(fixture, {})[key] = verbs
    return out


def memoryd_files(result: ParseResult) -> dict[str, str]:
    verbs: dict[str, set[str]] = {}
    for e in result.events:
        if isinstance(e, Action | Denied) and e.entity.kind == "file":
            verb = (
                e.verb + ("/shell" if e.via == "shell" else "")
                if isinstance(e, Action)
                else "DENIED"
            )
            verbs.setdefault(e.entity.key, set()).add(verb)
    return {key: " ".join(sorted(v)) for key, v in verbs.items()}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name[:12])
def test_file_entities_are_the_hand_reviewed_ones(path: Path) -> None:
    fixture = str(path.relative_to(FIXTURES))
    assert memoryd_files(parse(path)) == expected_files().get(fixture, {})


def test_the_reviewed_list_covers_every_fixture_that_names_files() -> None:
    listed = set(expected_files())
    assert listed <= {str(p.relative_to(FIXTURES)) for p in TRANSCRIPTS}
    assert len(listed) == 8  # 4e27c414 (a lone summary) names no file
    assert sum(len(v) for v in expected_files().values()) == 64 + 12  # Claude, Codex + Gemini


# --- failures and the error entities they trigger ---------------------------------------------


def expected_errors() -> dict[tuple[str, str], tuple[str, str]]:
    """(fixture, call id) -> (reviewed group, the line of the output that states the failure)."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for line in (FIXTURES / "expected-errors.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            fixture, call_id, group, text = line.split("\t")
            out[fixture, call_id] = (group, text)
    return out


def memoryd_failures(result: ParseResult) -> dict[str, Triggered]:
    """The TRIGGERED edges of a parse, by the id of the call that failed."""
    call_of = {e.id: e.call_id for e in result.events if isinstance(e, Memory) and e.call_id}
    triggered = [e for e in result.events if isinstance(e, Triggered)]
    out = {call_of[e.memory_id]: e for e in triggered}
    assert len(out) == len(triggered)  # one error per failed call
    return out


def call_outputs(path: Path) -> dict[str, str]:
    """Each call's output read straight from the JSON: Claude Code's tool_result content,
    Codex's exec_command_end aggregated output."""
    out: dict[str, str] = {}
    for raw in path.read_bytes().splitlines():
        rec = json.loads(raw)
        payload = rec.get("payload") or {}
        if payload.get("type") == "exec_command_end":
            out[payload["call_id"]] = payload["aggregated_output"]
        message = rec.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if block.get("type") == "tool_result":
                body = block["content"]
                text = body if isinstance(body, str) else "\n".join(b.get("text", "") for b in body)
                out[block["tool_use_id"]] = text
    return out


# (failed calls, distinct failures) per fixture, as reviewed; every other fixture has none.
FAILURES = {"37f83ec9": (19, 12), "cb2e607c": (5, 5), "rollout-": (2, 2)}
# aider's history states no exit status, and Gemini's logs.json holds prompts alone.
EVERY_FIXTURE = [
    *TRANSCRIPTS,
    FIXTURES / "aider" / "chat-history.md",
    FIXTURES / "gemini" / "logs.json",
]


@pytest.mark.parametrize("path", EVERY_FIXTURE, ids=lambda p: p.name[:12])
def test_failed_calls_are_the_reviewed_ones(path: Path) -> None:
    fixture = str(path.relative_to(FIXTURES))
    mine = memoryd_failures(parse(path))
    reviewed = {call: v for (fx, call), v in expected_errors().items() if fx == fixture}
    assert sorted(mine) == sorted(reviewed)
    groups = {group for group, _ in reviewed.values()}
    assert (len(reviewed), len(groups)) == FAILURES.get(path.name[:8], (0, 0))
    outputs = call_outputs(path) if reviewed else {}
    for call, (_, line) in reviewed.items():
        # The reviewed line is a line of the call's output, and memoryd shows that line (less
        # Claude Code's <tool_use_error> wrapping) as the failure.
        assert line in {ln.strip() for ln in outputs[call].splitlines()}
        assert mine[call].message and mine[call].message in line


def test_error_entities_split_failures_as_the_review_does() -> None:
    reviewed = expected_errors()
    name_of: dict[str, str] = {}
    groups_of: dict[str, set[str]] = {}  # error entity -> reviewed groups of its failures
    entities_of: dict[str, set[str]] = {}  # reviewed group -> error entities of its failures
    for path in TRANSCRIPTS:
        fixture = str(path.relative_to(FIXTURES))
        for call, t in memoryd_failures(parse(path)).items():
            group = reviewed[fixture, call][0]
            name_of[t.error.key] = t.error.name
            groups_of.setdefault(t.error.key, set()).add(group)
            entities_of.setdefault(group, set()).add(t.error.key)
    merged = {name_of[k]: sorted(g) for k, g in groups_of.items() if len(g) > 1}
    split = {
        g: sorted(name_of[k] for k in keys) for g, keys in entities_of.items() if len(keys) > 1
    }
    assert merged == {}
    assert split == {}
    assert len(entities_of) == len({group for group, _ in reviewed.values()}) == 12 + 5 + 2
