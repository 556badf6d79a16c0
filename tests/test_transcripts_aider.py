"""aider's chat log: the real 4.1 MB history, read by the parser and by a plain line count here
(no parser import for the counts), and the same log fed in random byte batches."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from workers.transcripts import ParserState, detect_agent
from workers.transcripts import aider as ad
from workers.transcripts.lines import split_lines
from workers.transcripts.model import Action, Goal, Memory, ParseResult, Source

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
    assert events == list(log.events)
