"""aider's chat log: the real 4.1 MB history, read by the parser and by a plain line count here
(no parser import for the counts), and the same log fed in random byte batches."""

from __future__ import annotations

import bisect
import dataclasses
import json
import random
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from workers.stages.transcripts import ParserState, detect_agent
from workers.stages.transcripts import aider as ad
from workers.stages.transcripts.events import Action, Goal, Memory, Source
from workers.stages.transcripts.lines import split_lines
from workers.stages.transcripts.state import ParseResult

LOG = Path(__file__).parent / "fixtures" / "transcripts" / "aider" / "chat-history.md"
# Where the log would sit: the root of the repository aider worked in (not this machine's).
REPO = "/home/ann/src/aider"
SOURCE = f"{REPO}/.aider.chat.history.md"


@pytest.fixture(scope="module")
def log() -> ParseResult:
    lines, _ = split_lines(LOG.read_bytes(), 0)
    return ad.parse(lines, None, Source.of(SOURCE, [("aider", REPO)]))


def plain_reading() -> dict[str, int]:
    """Counts straight from the Markdown: session markers, blocks of `####` lines (a prompt:
    each ends at a line that is not one), aider's edit and add lines."""
    lines = LOG.read_text(encoding="utf-8", errors="replace").splitlines()
    blocks: list[tuple[int, str]] = []  # (session number, the block's first non-blank text)
    session, previous = 0, ""
    for line in lines:
        if line.startswith("# aider chat started at"):
            session += 1
        elif line.startswith("####"):
            text = line[4:].strip()
            if not previous.startswith("####"):
                blocks.append((session, text))
            elif not blocks[-1][1]:
                blocks[-1] = (session, text)
        previous = line
    # a prompt that only greets is no goal (issue 33: 233 sessions of this log say just "hi")
    with_goal = {
        n
        for n, text in blocks
        if text and not text.startswith(("/", "!")) and text.lower() not in ("hi", "hello")
    }
    return {
        "sessions": session,
        "prompts": len(blocks),
        "runs": sum(text.startswith(("/run ", "!")) for _, text in blocks),
        "goals": len(with_goal),  # session 0: the one the log starts inside
        "applied": sum(1 for x in lines if re.match(r"> Applied edit to \S", x)),
        "added": sum(1 for x in lines if re.match(r"> Added .+ to the chat\.? *$", x)),
    }


def test_detected_as_aider() -> None:
    assert detect_agent(LOG.read_bytes()[:65536], str(LOG)) == "aider"
    assert ad.detect_path("/w/repo/.aider.chat.history.md")


def test_counts_match_a_plain_reading(log: ParseResult) -> None:
    plain = plain_reading()
    assert plain == {
        "sessions": 1133,
        "prompts": 1776,
        "runs": 27,
        "goals": plain["goals"],
        "applied": 413,
        "added": 430,
    }
    # the log starts inside a session begun before it: one more session
    assert len(log.sessions) == plain["sessions"] + 1
    memories = [m for m in log.events if isinstance(m, Memory)]
    prompts = [m for m in memories if m.kind == "user_prompt"]
    assert len(prompts) == plain["prompts"]
    assert sum(m.content.startswith(("/run ", "!")) for m in prompts) == plain["runs"]
    actions = [a for a in log.events if isinstance(a, Action)]
    assert Counter(a.verb for a in actions if a.tool in ("edit", "add")) == {
        "MODIFIES": plain["applied"],
        "READS": plain["added"],
    }
    assert all(a.outcome == "ok" for a in actions)
    # a goal: a session's first prompt that is not a /command nor a greeting
    assert len([g for g in log.events if isinstance(g, Goal)]) == plain["goals"]
    assert log.skipped == ()


def test_edits_land_on_project_files(log: ParseResult) -> None:
    edits = Counter(a.entity.key for a in log.events if isinstance(a, Action) and a.tool == "edit")
    assert edits.most_common(3) == [
        ("aider:aider/coders/base_coder.py", 60),  # counted with grep | sort | uniq -c
        ("aider:aider/commands.py", 43),
        ("aider:tests/basic/test_main.py", 35),
    ]
    assert all(k.startswith("aider:") for k in edits)


def test_a_run_prompt_executes_and_touches_files(log: ParseResult) -> None:
    runs = [a for a in log.events if isinstance(a, Action) and a.tool == "run"]
    pytest_runs = [a for a in runs if a.verb == "EXECUTES" and a.entity.key == "pytest"]
    mentioned = {a.entity.key for a in runs if a.verb == "MENTIONS"}
    assert len(pytest_runs) == 14  # grep -cE "^#### (/run|!) *pytest"
    assert "aider:tests/scrape/test_scrape.py" in mentioned
    assert all(a.via == "shell" for a in runs if a.verb != "EXECUTES")


@pytest.mark.parametrize("seed", [1, 2])
def test_random_byte_batches_give_the_same_events(log: ParseResult, seed: int) -> None:
    data = LOG.read_bytes()
    rng = random.Random(seed)
    state: ParserState | None = None
    offset, events = 0, []
    while offset < len(data):
        size = rng.randint(1, 400_000)
        lines, next_offset = split_lines(data[offset : offset + size], offset)
        while next_offset == offset:
            size *= 2
            lines, next_offset = split_lines(data[offset : offset + size], offset)
        offset = next_offset
        r = ad.parse(lines, state, Source.of(SOURCE, [("aider", REPO)]))
        state = ParserState.from_json(json.loads(json.dumps(r.state.to_json())))
        events += r.events
    # Times are interpolated up to the next point a batch shows: a session cut by a batch
    # boundary has other (still ordered) times for its events. Everything else is the same.
    untimed = [dataclasses.replace(e, event_time=None) for e in events]
    assert untimed == [dataclasses.replace(e, event_time=None) for e in log.events]


def test_events_carry_their_own_time_between_session_starts(log: ParseResult) -> None:
    # issue 33: every event had its session's start time. Each memory's time now lies between
    # the start of the session it is in and the start of the next, in file order.
    data = LOG.read_bytes()
    marks = [
        (m.start(), m.group(1).decode().replace(" ", "T") + ".000Z")
        for m in re.finditer(rb"^# aider chat started at (\S+ \S+)$", data, re.M)
    ]
    memories = [m for m in log.events if isinstance(m, Memory) and m.byte_offset > marks[0][0]]
    moved = 0
    for m in memories:
        k = bisect.bisect_right([o for o, _ in marks], m.byte_offset) - 1
        begin = marks[k][1]
        end = max(begin, marks[k + 1][1]) if k + 1 < len(marks) else begin
        assert m.event_time is not None and begin <= m.event_time <= end, m
        moved += m.event_time > begin
    assert moved == 4486  # of 4497: the others open their session (or it lasted no second)
    by_session: dict[str, list[str]] = {}
    for m in memories:
        by_session.setdefault(m.session_id, []).append(m.event_time or "")
    assert all(times == sorted(times) for times in by_session.values())
    last_of = {m.session_id: m.event_time for m in memories}
    assert all(s.ended_at == last_of[s.session_id] for s in log.sessions if s.session_id in last_of)


def test_the_last_session_runs_until_the_file_was_last_written() -> None:
    log = (
        b"# aider chat started at 2024-05-01 10:00:00\n\n"
        b"#### fix the parser\n\n"
        b"> Applied edit to src/parser.py\n\n"
        b"#### now the tests\n\n"
        b"> Applied edit to tests/test_parser.py\n"
    )
    lines, _ = split_lines(log, 0)
    written = (len(log), "2024-05-03T10:00:00.000Z")  # two days later
    r = ad.parse(lines, None, Source(SOURCE, written=written))
    edits = [(a.entity.key, a.event_time) for a in r.events if isinstance(a, Action)]
    offsets = [log.index(b"> Applied edit to src"), log.index(b"> Applied edit to tests")]
    start, span = 1714557600.0, 2 * 86400  # 2024-05-01T10:00:00Z, two days
    expected = [
        datetime.fromtimestamp(start + span * o / len(log), UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        for o in offsets
    ]
    assert [(k, t[:20]) for k, t in edits] == list(
        zip([f"{REPO}/src/parser.py", f"{REPO}/tests/test_parser.py"], expected, strict=True)
    )
    assert r.sessions[0].started_at == "2024-05-01T10:00:00.000Z"
    assert r.sessions[0].ended_at == edits[-1][1]
    # Without the file's time, events keep their session's start.
    r = ad.parse(lines, None, Source(SOURCE))
    assert {a.event_time for a in r.events if isinstance(a, Action)} == {"2024-05-01T10:00:00.000Z"}


def test_lines_of_output_added_to_the_chat_are_no_file() -> None:
    log = (
        b"# aider chat started at 2024-05-01 10:00:00\n\n"
        b"#### /run pytest -q\n\n"
        b"> 3 passed in 0.12s\n"
        b"> Add command output to the chat? (Y)es/(N)o [Yes]: y\n"
        b"> Added 6 lines of output to the chat.\n"
        b"> Added src/app.py to the chat.\n"
    )
    r = ad.parse(split_lines(log, 0)[0], None, Source(SOURCE))
    reads = [a.entity.key for a in r.events if isinstance(a, Action) and a.verb == "READS"]
    assert reads == [f"{REPO}/src/app.py"]
