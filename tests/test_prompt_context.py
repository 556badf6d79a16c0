"""What the prompt hook injects (memoryd/agent/hooks.py), against a real stack: arq's tree indexed,
a real aider session (from the fixture, with aider's `/ask` echo and its long reply) and a short
one after it ingested from the tree's own `.aider.chat.history.md`. Nothing that says nothing,
nothing that repeats the prompt, one item per earlier session, files the prompt names first,
and nothing below the relevance floor."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import tempfile
from datetime import date, timedelta
from pathlib import Path

import pytest

from memoryd import client
from memoryd.agent import hooks
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from memoryd.results import SearchResult
from tests.conftest import _serving, copy_data_dir, index_tree

AIDER = Path(__file__).parent / "fixtures" / "transcripts" / "aider" / "chat-history.md"
# The fixture's session of 2024-08-06 09:44:24: `/ask …`, aider's echo of it, a long answer.
ASK_SESSION = (4674, 4943)
ASKED = "is there a portable way to know the user's preferred language?"
DONE_SESSION = (
    "\n# aider chat started at 2024-08-07 10:00:00\n\n"
    "#### make from_dsn reject a redis DSN url with an unknown scheme  \n\n"
    "Done.\n\n"
)
DOC = (
    "# Connecting to Redis\n\n"
    "arq reads its Redis settings from a DSN url: redis://, rediss:// or unix://.\n"
    "The database number comes from the path or from a `db` query parameter.\n"
    "Timeouts and retries are settings of their own.\n"
)


@pytest.fixture(scope="module")
def indexed(
    arq_tree: Path, embedder: Embedder, short_tmp: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """The tree (arq, a doc, the aider log) and a data dir holding its index and the log's
    sessions, built once for the module: indexing and ingesting were most of each test."""
    root = tmp_path_factory.mktemp("prompt") / "arq"
    shutil.copytree(arq_tree, root)
    (root / "docs").mkdir()
    (root / "docs" / "connections.md").write_text(DOC)
    lines = AIDER.read_text().splitlines(keepends=True)
    log = root / ".aider.chat.history.md"
    log.write_text("".join(lines[ASK_SESSION[0] - 1 : ASK_SESSION[1] - 1]) + DONE_SESSION)
    built = Path(tempfile.mkdtemp(dir=short_tmp))

    async def build() -> None:
        async with _serving(built, embedder, scheduled=False) as rt:
            await index_tree(rt, root)
            [report] = await client.Client(rt.redis, rt.settings).ingest([str(log)])
            assert report["memories"] > 0, report

    asyncio.run(build())
    return root, built


@pytest.fixture
def data_dir(indexed: tuple[Path, Path], short_tmp: Path) -> Path:
    """A copy of the module's data dir for each test, so that no test sees what another
    asked."""
    path = Path(tempfile.mkdtemp(dir=short_tmp))
    copy_data_dir(indexed[1], path)
    return path


@pytest.fixture
def repo(indexed: tuple[Path, Path]) -> Path:
    return indexed[0]


async def prompt_context(memoryd: client.Client, root: Path, prompt: str, session: str) -> str:
    payload = {"session_id": session, "cwd": str(root), "prompt": prompt}
    out = await hooks.run(
        memoryd, "claude-code", "user-prompt-submit", json.dumps(payload), str(root), None
    )
    if not out:
        return ""
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


async def briefing(memoryd: client.Client, root: Path, session: str) -> str:
    payload = {"session_id": session, "cwd": str(root), "source": "startup"}
    out = await hooks.run(
        memoryd, "claude-code", "session-start", json.dumps(payload), str(root), None
    )
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"]) if out else ""


def patient(stack: Runtime, **settings: object) -> client.Client:
    """A client whose hooks take the time a loaded test machine needs (a hook gives up after
    `hook_timeout_seconds`, 1.5 s by default, and then says nothing)."""
    given = dataclasses.replace(stack.settings, hook_timeout_seconds=20.0, **settings)
    return client.Client(stack.redis, given)


def items(text: str) -> list[str]:
    """The item lines (`- [id] …`) of a hook's context."""
    return [line for line in text.splitlines() if line.startswith("- [")]


@pytest.mark.e2e
async def test_prompt_context_has_no_noise_and_names_files_first(
    stack: Runtime, repo: Path
) -> None:
    memoryd = patient(stack)

    # An earlier session near this prompt: one item of it, though aider logged the prompt
    # twice (`/ask X`, then `X`) and its answer is near too.
    text = await prompt_context(
        memoryd, repo, "detect the user's preferred language portably on windows", "p1"
    )
    assert sum(ASKED in line for line in items(text)) <= 1, text
    sessions = [
        line.split("(session ")[1].split("#")[0] for line in items(text) if "(session " in line
    ]
    assert len(sessions) == len(set(sessions)) >= 1

    # The prompt itself, asked again: the earlier copies of it say nothing new.
    text = await prompt_context(memoryd, repo, ASKED, "p2")
    assert ASKED not in text

    # `Done.` never: not for the prompt it answered, not for one that names its words.
    for n, prompt in enumerate(
        (
            "make from_dsn reject a redis DSN url with an unknown scheme",
            "is it done? the redis DSN url scheme check in from_dsn",
        )
    ):
        text = await prompt_context(memoryd, repo, prompt, f"p-done-{n}")
        assert text, prompt  # from_dsn's code is relevant
        assert not [line for line in items(text) if line.rstrip().endswith(": Done.")], text

    # A Markdown file the prompt names comes first, then code of the file it also names.
    text = await prompt_context(
        memoryd, repo, "rewrite docs/connections.md for the unix socket DSN", "p-doc"
    )
    first = items(text)[0]
    assert first.split("] ", 1)[1].startswith("code docs/connections.md:1-"), text
    assert "arq reads its Redis settings from a DSN url" in text
    text = await prompt_context(memoryd, repo, "in connections.py, log the DSN url", "p-code")
    assert items(text)[0].split("] ", 1)[1].startswith("code connections.py:"), text


@pytest.mark.e2e
async def test_below_the_relevance_floor_nothing_is_injected(stack: Runtime, repo: Path) -> None:
    unrelated = "how long should sourdough bread proof before baking"
    assert await prompt_context(patient(stack), repo, unrelated, "f1") == ""
    # The floor is what kept it out: with none, the same prompt gets the nearest rows.
    anything = patient(stack, hook_min_relevance=0.0)
    assert items(await prompt_context(anything, repo, unrelated, "f2"))


@pytest.mark.parametrize(
    ("text", "nothing"),
    [
        ("Done.", True),
        ("Sure, will do.", True),
        ("OK  ", True),
        ("Perfect! Now let's test the fix:", True),
        ("Sure: the retry count comes from Worker.max_tries, 5 by default.", False),
        ("from_dsn now rejects unknown schemes; see connections.py", False),
        (
            "<thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b>\nplan\n"
            "</thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b>\nDone.",
            True,
        ),
    ],
)
def test_what_says_nothing(text: str, nothing: bool) -> None:
    assert hooks.contentless(text) is nothing


def test_an_echo_says_what_its_prompt_said_and_markers_go() -> None:
    assert hooks.said("/ask " + ASKED) == hooks.said(" " + ASKED)
    marked = "<thinking-content-7bbeb8e1>\nthe plan\n</thinking-content-7bbeb8e1>\nUse locale."
    assert hooks.clean(marked) == "Use locale."


def test_an_item_that_does_not_fit_whole_comes_as_its_short_line() -> None:
    items = [
        hooks.Item("code:1", "- [code:1] code a.py:1-30 f (current index):\n" + "x" * 300, "- a"),
        hooks.Item("code:2", "- [code:2] code b.py:1-3 g (current index):\nreturn 1"),
        hooks.Item("code:3", "- [code:3] " + "y" * 300),  # no short line: left out
    ]
    text, keys = hooks.pack("head", items, set(), 100)
    assert text == "head\n- a\n- [code:2] code b.py:1-3 g (current index):\nreturn 1"
    assert keys == ["code:1", "code:2"]
    # Index first: every item's short line, then whole items in order while they fit.
    text, keys = hooks.pack("head", [items[1], items[0]], set(), 500)
    assert text == f"head\n{items[1].text}\n{items[0].text}" and keys == ["code:2", "code:1"]
    text, _ = hooks.pack("head", [items[0], items[1]], set(), 70)
    assert text == "head\n- a\n- [code:2] code b.py:1-3 g (current index):\nreturn 1"
    # A long first item does not crowd out the next: it stays short so both are there.
    text, keys = hooks.pack("head", [items[0], items[1]], set(), 360)
    assert text == "head\n- a\n- [code:2] code b.py:1-3 g (current index):\nreturn 1"
    code = hooks.record_item(
        {
            "id": "code:9",
            "kind": "code",
            "path": "c.py",
            "start_line": 4,
            "end_line": 9,
            "name": "h",
            "text": "def h():\n    pass\n",
        }
    )
    assert code.short == "- [code:9] code c.py:4-9 h (current index)"
    assert code.text == code.short + ":\ndef h():\n    pass"


def test_the_kinds_take_turns_after_the_files_the_prompt_names() -> None:
    def hit(kind: str, n: int, score: float) -> SearchResult:
        return SearchResult(kind, f"{kind}{n}", score)

    found = [  # in the search's own order, which the score (relevance) does not change
        hit("code", 1, 0.55),
        hit("code", 2, 0.60),
        hit("docs", 1, 0.4),
        hit("memory", 1, 0.5),
        hit("code", 3, hooks.NAMED),
        hit("memory", 2, 0.45),
    ]
    assert [h.id for h in hooks._in_turns(found)] == [
        "code3",
        "memory1",
        "code1",
        "docs1",
        "memory2",
        "code2",
    ]


def test_the_briefing_lists_deleted_files_after_those_that_still_exist() -> None:
    def change(name: str, sessions: int, anchor: str) -> dict[str, object]:
        return {
            "file": name,
            "project": "p",
            "edits": sessions,
            "sessions": sessions,
            "last_at": "2026-11-28T10:00:00+00:00",
            "last_session": "s1",
            "anchor": anchor,
        }

    activity = {
        "project": "p",
        "since": "2026-11-21T10:00:00+00:00",
        "sessions": [],
        "notes": [],
        "failures": [],
        "files": [change("gone.py", 3, "file deleted"), change("kept.py", 1, "current")],
    }
    lines = [item.text for item in hooks._briefing_items(activity, "s2")]  # type: ignore[arg-type]
    assert [line.split()[2] for line in lines] == ["kept.py", "gone.py"]


@pytest.mark.e2e
async def test_after_a_pause_the_briefing_says_where_the_work_stood(
    stack: Runtime, repo: Path
) -> None:
    """No session in the last week (aider stamps only a session's start: the log's last
    session, begun in August 2024, has its events spread up to when the file was written, its
    last weeks before that): the briefing is of the week before the newest session, says so,
    and leaves out the session that ended long before it."""
    memoryd = patient(stack)
    project = (await memoryd.scope(repo)).project
    lines = (await briefing(memoryd, repo, "b1")).splitlines()
    [session] = lines[1:]
    day = session.split(", ", 1)[1][:10]
    assert date.fromisoformat(day) < date.today() - timedelta(days=hooks.RECENT_DAYS)
    assert lines[0] == (
        f"memoryd: the last agent work in this repository ({project}), "
        f"before a pause (nothing since {day}):"
    )
    assert session.endswith("): make from_dsn reject a redis DSN url with an unknown scheme")
