"""CHANGES_WITH from a scripted git history with known pairs, counted through the real queue,
and counted again incrementally when HEAD moves; and what the pre-edit hook says of them."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from memoryd import client, projects, queue
from memoryd.agent import hooks
from memoryd.daemon.runtime import Runtime
from tests.conftest import git, git_init, index_tree
from workers.cochange import Commit, commits_of, pairs, weight

pytestmark = pytest.mark.e2e

SOURCES = ("a.py", "b.py", "c.py", "d.py", "e.py", "f.py")


def _write(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.write_text(path.read_text() + "x = 1\n" if path.exists() else f"# {name}\n")


def _commit(root: Path, *names: str) -> None:
    _write(root, *names)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "change " + " ".join(names))


async def _counted(rt: Runtime, root: Path) -> dict:
    """Wait for the co-change job the project's registration queued for its HEAD."""
    assert rt.redis is not None
    head = git(root, "rev-parse", "HEAD").strip()
    job = projects.cochange_job(rt.redis, projects.resolve(root).id, head)
    return await queue.wait_for(job, timeout=300)


def test_large_commits_count_less_or_not_at_all() -> None:
    assert [weight(n, 30) for n in (1, 2, 4, 8, 30, 31)] == [0.0, 1.0, 1.0, 0.5, 4 / 30, 0.0]
    # git's own bytes for `log -z --name-only --format=%x01%H %ct`
    log = "\x01abc 1700000000\x00\na.py\x00b.py\x00README.md\x00\x01def 1700000100\x00\na.py\x00"
    assert [(c.sha, c.files) for c in commits_of(log)] == [
        ("abc", ("a.py", "b.py", "README.md")),
        ("def", ("a.py",)),
    ]
    rows = pairs("p", commits_of(log), {"a.py", "b.py", "README.md"}, 30)
    assert [(r["count"], r["last_at"].timestamp()) for r in rows] == [(1.0, 1700000000)]
    gone = pairs("p", [Commit("x", rows[0]["last_at"], ("a.py", "gone.py"))], {"a.py"}, 30)
    assert gone == []


async def test_files_that_change_together(stack: Runtime, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    _write(root, *SOURCES, "README.md")
    git_init(root)  # 6 source files in one commit: each pair counts 4/6
    _commit(root, "a.py", "b.py")
    _commit(root, "a.py", "b.py", "README.md")  # prose changes with everything: not counted
    _commit(root, "a.py", "c.py")
    _commit(root, "c.py", "d.py")
    stack.settings.cochange_max_files = 6
    _commit(root, *SOURCES, "g.py")  # a mass change over cochange_max_files: not counted
    await index_tree(stack, root)
    assert await _counted(stack, root) == {"commits": 6, "pairs": 15}
    async with client.connect(stack.settings) as memoryd:
        doc = await memoryd.related(str(root / "a.py"), cwd=str(root))
    assert [(c["path"], c["count"]) for c in doc["changes_with"]] == [
        ("b.py", 2.667),
        ("c.py", 1.667),
        ("d.py", 0.667),
        ("e.py", 0.667),
        ("f.py", 0.667),
    ]
    # HEAD moves: only the new commit is read.
    _commit(root, "a.py", "d.py")
    await projects.register(stack.redis, projects.resolve(root))  # what the watcher does
    assert await _counted(stack, root) == {"commits": 1, "pairs": 1}
    async with client.connect(stack.settings) as memoryd:
        doc = await memoryd.related(str(root / "a.py"), cwd=str(root))
    assert [(c["path"], c["count"]) for c in doc["changes_with"]][:3] == [
        ("b.py", 2.667),
        ("c.py", 1.667),
        ("d.py", 1.667),
    ]


async def test_a_file_that_is_not_indexed_is_left_out_of_changes_with(
    stack: Runtime, tmp_path: Path
) -> None:
    """History pairs every source file git holds, but memoryd keeps no entity for one it does
    not index (generated, excluded, too large): `related` answered such a pair with a crash
    (its path unknown) and now leaves it out."""
    root = tmp_path / "repo"
    root.mkdir()
    _write(root, "a.py", "b.py", "h_pb2.py")
    git_init(root)
    _commit(root, "a.py", "h_pb2.py")
    _commit(root, "a.py", "b.py")
    report = await index_tree(stack, root)
    assert (report["indexed"], report["skipped"]) == (2, 1)
    assert await _counted(stack, root) == {"commits": 3, "pairs": 3}
    async with client.connect(stack.settings) as memoryd:
        doc = await memoryd.related(str(root / "a.py"), cwd=str(root))
    assert [(c["path"], c["count"]) for c in doc["changes_with"]] == [("b.py", 2.0)]


async def _before_edit(memoryd: client.Client, root: Path, name: str, session: str) -> str:
    payload = {
        "session_id": session,
        "cwd": str(root),
        "hook_event_name": "PreToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": str(root / name), "old_string": "x", "new_string": "y"},
    }
    answer = await hooks.run(memoryd, "claude-code", "pre-tool-use", json.dumps(payload), "", None)
    return json.loads(answer)["hookSpecificOutput"]["additionalContext"] if answer else ""


async def test_the_pre_edit_hook_names_files_that_usually_change_with_the_file(
    stack: Runtime, tmp_path: Path
) -> None:
    """Before an edit, the hook adds the files the history changed with this one at least
    twice (CHANGES_WITH), and nothing when none did; within its budget, once per session."""
    root = tmp_path / "repo"
    root.mkdir()
    _write(root, "a.py", "b.py", "c.py")
    git_init(root)  # a-b, a-c, b-c: 1 each
    _commit(root, "a.py", "b.py")
    _commit(root, "a.py", "b.py")
    _commit(root, "a.py", "c.py")
    _commit(root, "d.py")  # alone: changes with nothing
    await index_tree(stack, root)
    assert await _counted(stack, root) == {"commits": 5, "pairs": 3}
    memoryd = client.Client(stack.redis, stack.settings)

    async def before_edit(name: str, session: str = "s1") -> str:
        return await _before_edit(memoryd, root, name, session)

    assert await before_edit("a.py") == (
        "memoryd: before you edit a.py:\n- usually changes with b.py (3 commits), c.py (2 commits)"
    )
    assert await before_edit("a.py") == ""  # said once in a session
    # b.py changed with c.py once: chance, not "usually".
    assert await before_edit("b.py") == (
        "memoryd: before you edit b.py:\n- usually changes with a.py (3 commits)"
    )
    assert await before_edit("d.py") == ""
    assert len(await before_edit("a.py", "s2")) <= stack.settings.hook_action_max_chars


# Two aider sessions that edited a.py: the first with four other files (b.py twice) and
# d.py only read, the second alone.
TWO_SESSIONS = """
# aider chat started at 2026-11-20 10:00:00

> Added d.py to the chat

#### rename the total helper everywhere

> Applied edit to c.py
> Applied edit to a.py
> Applied edit to b.py
> Applied edit to f.py
> Applied edit to e.py
> Applied edit to b.py

# aider chat started at 2026-11-21 10:00:00

#### make the script faster

> Applied edit to a.py
"""


async def test_the_pre_edit_hook_names_the_files_each_session_edited_along_with_the_file(
    stack: Runtime, tmp_path: Path
) -> None:
    """Before an edit of a.py, the line of each earlier session that edited it names the other
    files that session modified (the most edited first, then the first edited, then by path),
    at most three and how many more; a session that edited only a.py names none."""
    root = tmp_path / "repo"
    root.mkdir()
    _write(root, *SOURCES)
    git_init(root)  # one commit of six files: no pair changes together twice
    log = root / ".aider.chat.history.md"
    log.write_text(TWO_SESSIONS)
    await index_tree(stack, root)
    memoryd = client.Client(stack.redis, stack.settings)
    [report] = await memoryd.ingest([str(log)])
    assert report["sessions"] == 2, report
    when = r"\(aider, \d{4}-\d\d-\d\d \d\d:\d\d\) edited it \(code current\)"
    assert re.fullmatch(
        "memoryd: before you edit a.py, what earlier sessions did to it:\n"
        f"- session [0-9a-f]{{32}} {when}; goal: make the script faster; no failure followed\n"
        f"- session [0-9a-f]{{32}} {when} along with b.py, c.py, f.py \\(\\+1 more\\); "
        "goal: rename the total helper everywhere; no failure followed",
        await _before_edit(memoryd, root, "a.py", "s1"),
    )
    # From b.py: the first session's other files, each edited once, in the order it edited
    # them first.
    assert re.fullmatch(
        "memoryd: before you edit b.py, what earlier sessions did to it:\n"
        f"- session [0-9a-f]{{32}} {when} along with c.py, a.py, f.py \\(\\+1 more\\); "
        "goal: rename the total helper everywhere; no failure followed",
        await _before_edit(memoryd, root, "b.py", "s1"),
    )


async def test_the_briefing_names_the_files_each_session_modified(
    stack: Runtime, tmp_path: Path
) -> None:
    """At a session's start, each earlier session's line names the files it modified as the
    pre-edit hook names them (the most edited first, at most three and how many more), ahead
    of its goal: the newest session's files are what the next work most likely goes on with,
    and the file list, ranked by how many sessions came back to a file, can leave them out."""
    root = tmp_path / "repo"
    root.mkdir()
    _write(root, *SOURCES)
    git_init(root)
    log = root / ".aider.chat.history.md"
    # Both in the week before now, whenever the test runs.
    days = [(datetime.now() - timedelta(days=n)).strftime("%Y-%m-%d %H:%M:%S") for n in (2, 1)]
    log.write_text(
        TWO_SESSIONS.replace("2026-11-20 10:00:00", days[0]).replace("2026-11-21 10:00:00", days[1])
    )
    await index_tree(stack, root)
    memoryd = client.Client(stack.redis, stack.settings)
    [report] = await memoryd.ingest([str(log)])
    assert report["sessions"] == 2, report
    payload = {"session_id": "s1", "cwd": str(root), "source": "startup"}
    answer = await hooks.run(memoryd, "claude-code", "session-start", json.dumps(payload), "", None)
    lines = json.loads(answer)["hookSpecificOutput"]["additionalContext"].splitlines()
    sessions = [line for line in lines if line.startswith("- session ")]
    when = r"\(aider, \d{4}-\d\d-\d\d \d\d:\d\d\)"
    assert len(sessions) == 2, lines
    assert re.fullmatch(
        f"- session [0-9a-f]{{32}} {when} modified a.py: make the script faster", sessions[0]
    )
    assert re.fullmatch(
        f"- session [0-9a-f]{{32}} {when} modified b.py, c.py, a.py \\(\\+2 more\\): "
        "rename the total helper everywhere",
        sessions[1],
    )


async def test_the_window_counts_back_from_heads_commit_not_from_now(
    stack: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository picked up again after quiet years: `cochange_days` before HEAD's own
    commit, so the last year of its history counts and what is older does not."""
    root = tmp_path / "old"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for when, names in (
        ("2020-01-01T12:00:00Z", ("a.py", "b.py", "c.py")),  # over 365 days before HEAD's
        ("2023-01-01T12:00:00Z", ("a.py", "c.py")),
        ("2023-06-01T12:00:00Z", ("a.py", "b.py")),
    ):
        monkeypatch.setenv("GIT_COMMITTER_DATE", when)
        monkeypatch.setenv("GIT_AUTHOR_DATE", when)
        _commit(root, *names)
    await index_tree(stack, root)
    assert await _counted(stack, root) == {"commits": 2, "pairs": 2}
    async with client.connect(stack.settings) as memoryd:
        doc = await memoryd.related(str(root / "a.py"), cwd=str(root))
    assert [(c["path"], c["count"]) for c in doc["changes_with"]] == [("b.py", 1.0), ("c.py", 1.0)]
