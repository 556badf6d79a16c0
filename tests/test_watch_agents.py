"""Gemini CLI and aider transcripts reach the graph like the others: a Gemini chat rewritten in
place is read again and only what is new is added; aider's log in a watched repository is
followed by the repository watcher."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

import pytest

from memoryd import jobs, projects, queue
from memoryd.daemon.runtime import Runtime
from memoryd.watch.repos import RepoWatcher
from memoryd.watch.transcripts import (
    AIDER_LOG,
    TranscriptWatcher,
    is_transcript,
    transcript_files,
)
from tests.conftest import cli, git_init
from tests.fixtures import AIDER, GEMINI, SMALL

CHAT = GEMINI / "session-2026-01-16T11-01-file-ops-37b7abef.json"
SESSION = "37b7abef-713d-4522-85f0-8ff15a4e6d17"


def test_which_files_are_transcripts(tmp_path: Path) -> None:
    chats = tmp_path / "tmp" / "abc" / "chats"
    chats.mkdir(parents=True)
    for name in ("session-1.json", "session-2.jsonl", "notes.json", "logs.json"):
        (chats / name).write_text("{}")
    (tmp_path / "tmp" / "abc" / "logs.json").write_text("[]")
    (tmp_path / AIDER_LOG).write_text("# aider chat started at 2024-01-01 00:00:00\n")
    found = [Path(p).relative_to(tmp_path).as_posix() for p in transcript_files([tmp_path])]
    assert found == [AIDER_LOG, "tmp/abc/chats/session-1.json", "tmp/abc/chats/session-2.jsonl"]
    assert not is_transcript(str(tmp_path / "README.md"))


async def _ingest(rt: Runtime, path: Path) -> dict:
    assert rt.redis is not None
    [job] = await queue.enqueue_ingest(rt.redis, [str(path)], fresh=True)
    return await queue.wait_for(job, 300)


@pytest.mark.e2e
async def test_a_rewritten_gemini_chat_adds_only_what_is_new(
    stack: Runtime, tmp_path: Path
) -> None:
    chats = tmp_path / "gemini" / "tmp" / "907f2064" / "chats"
    chats.mkdir(parents=True)
    chat = chats / CHAT.name
    shutil.copyfile(CHAT, chat)

    first = await _ingest(stack, chat)
    assert first["agent"] == "gemini" and first["memories"] > 0
    assert (await _ingest(stack, chat))["note"] == "up to date"
    assert stack.redis is not None
    before = await queue.call(stack.redis, jobs.SESSION, SESSION)

    # Gemini CLI rewrites the whole document on every update.
    document = json.loads(chat.read_text())
    document["messages"].append(
        {
            "id": "7e57ab1e-0000-4000-8000-000000000001",
            "timestamp": "2026-01-16T12:40:00.000Z",
            "type": "user",
            "content": "now rename the helper to load_settings",
        }
    )
    chat.write_text(json.dumps(document, indent=2))
    again = await _ingest(stack, chat)
    assert again["memories"] == 1
    after = await queue.call(stack.redis, jobs.SESSION, SESSION)
    assert len(after["events"]) == len(before["events"]) + 1
    assert after["events"][-1]["text"] == "now rename the helper to load_settings"


@pytest.mark.e2e
async def test_aiders_log_in_a_watched_repo_is_ingested(stack: Runtime, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("def main():\n    return 1\n")
    (repo / ".gitignore").write_text(".aider*\n")
    git_init(repo)
    # The first two sessions of a real aider log, written where aider was started: a
    # sub-folder (issue 33: only a log at the top was found).
    text = (AIDER / "chat-history.md").read_text()
    third = text.index("# aider chat started at", text.index("# aider chat started at", 1) + 1)
    (repo / "backend").mkdir()
    (repo / "backend" / AIDER_LOG).write_text(text[:third])
    assert stack.redis is not None and stack.store is not None
    watcher = RepoWatcher(stack.redis, [projects.resolve(repo)], 0.2, 32)
    await watcher.start()
    try:
        deadline = time.monotonic() + 120
        while True:
            rows = await stack.store.query("SELECT VALUE agent FROM session")
            if rows[0]:
                break
            assert time.monotonic() < deadline, "aider's log was never ingested"
            await asyncio.sleep(0.2)
        assert set(rows[0]) == {"aider"} and len(rows[0]) == 2
    finally:
        await watcher.stop()


async def test_odd_entries_in_a_transcript_folder_are_skipped_with_one_line_each(
    stack: Runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO, a symlink loop or a symlink to nothing named like a transcript were passed over
    without a word; a FIFO reaching the ingest job (a watch event) would hold its read. Each
    gets a log line and a stored skip record, listed by `status` as a repository's are."""
    import logging
    import os

    from memoryd.watch.transcripts import TranscriptWatcher

    caplog.set_level(logging.INFO)
    folder = tmp_path / "projects" / "p"
    folder.mkdir(parents=True)
    (folder / "real.jsonl").write_text("")
    os.mkfifo(folder / "pipe.jsonl")
    (folder / "loop_a.jsonl").symlink_to("loop_b.jsonl")
    (folder / "loop_b.jsonl").symlink_to("loop_a.jsonl")
    (folder / "dangling.jsonl").symlink_to("nowhere.jsonl")
    assert stack.redis is not None
    watcher = TranscriptWatcher(stack.redis, [tmp_path / "projects"], 0.1)
    await watcher.start()
    await watcher.stop()
    said = sorted(m for m in caplog.messages if m.startswith("skip transcript "))
    assert said == [
        f"skip transcript {folder / 'dangling.jsonl'}: unreadable: No such file or directory",
        f"skip transcript {folder / 'loop_a.jsonl'}: unreadable: Too many levels of symbolic links",
        f"skip transcript {folder / 'loop_b.jsonl'}: unreadable: Too many levels of symbolic links",
        f"skip transcript {folder / 'pipe.jsonl'}: not a regular file (a FIFO)",
    ]
    [job] = await queue.enqueue_ingest(stack.redis, [str(folder / "pipe.jsonl")], fresh=True)
    report = await queue.wait_for(job, 60)
    assert report["note"] == "not a regular file (a FIFO); skipped"
    loop = "unreadable: Too many levels of symbolic links; skipped"
    expected = [
        [None, str(folder / "dangling.jsonl"), "unreadable: No such file or directory; skipped"],
        [None, str(folder / "loop_a.jsonl"), loop],
        [None, str(folder / "loop_b.jsonl"), loop],
        [None, str(folder / "pipe.jsonl"), "not a regular file (a FIFO); skipped"],
    ]
    # The watcher's start queued their ingest jobs: each stores its skip record.
    assert stack.store is not None
    deadline = time.monotonic() + 300
    while True:
        rows = await stack.store.skipped_files(50)
        if len(rows) >= len(expected):
            break
        assert time.monotonic() < deadline, f"skip records never stored: {rows}"
        await asyncio.sleep(0.2)
    assert [[r["project"], r["path"], r["reason"]] for r in rows] == expected
    # (In a thread: the daemon answering `status` runs on this test's event loop.)
    data_dir = str(stack.settings.data_dir)
    shown = await asyncio.to_thread(cli, "status", "--data-dir", data_dir, "--json")
    listed = json.loads(shown.stdout)["skipped_files"]
    assert [[r["project"], r["path"], r["reason"]] for r in listed] == expected
    text = (await asyncio.to_thread(cli, "status", "--data-dir", data_dir)).stdout
    assert f"skipped       transcript  {folder / 'pipe.jsonl'}: {expected[3][2]}\n" in text
    # The FIFO replaced by a real transcript is read, and its skip record goes.
    (folder / "pipe.jsonl").unlink()
    shutil.copy(SMALL, folder / "pipe.jsonl")
    [job] = await queue.enqueue_ingest(stack.redis, [str(folder / "pipe.jsonl")], fresh=True)
    assert (await queue.wait_for(job, 300))["memories"] == 22
    assert [r["path"] for r in await stack.store.skipped_files(50)] == [e[1] for e in expected[:3]]


async def _sessions_once(rt: Runtime, wanted: set[str], deadline: float) -> set[str]:
    """The sessions' external ids once every one of `wanted` is among them (bounded)."""
    assert rt.store is not None
    while True:
        rows = await rt.store.query("SELECT VALUE external_id FROM session")
        if wanted <= set(rows[0]):
            return set(rows[0])
        assert time.monotonic() < deadline, f"never captured: {wanted - set(rows[0])}"
        await asyncio.sleep(0.2)


@pytest.mark.e2e
async def test_a_transcript_folder_made_after_the_start_or_made_again_is_followed(
    stack: Runtime, tmp_path: Path
) -> None:
    root = tmp_path / "claude" / "projects"  # no part of it exists yet
    assert stack.redis is not None
    watcher = TranscriptWatcher(stack.redis, [root], 0.2)
    await watcher.start()
    try:
        (root / "-tmp-a").mkdir(parents=True)
        shutil.copy(SMALL, root / "-tmp-a" / SMALL.name)
        await _sessions_once(stack, {SMALL.stem}, time.monotonic() + 120)
        # Removed and made again at once: the watch on the removed folder is let go.
        shutil.rmtree(root)
        (root / "b" / "chats").mkdir(parents=True)
        shutil.copy(CHAT, root / "b" / "chats" / CHAT.name)
        found = await _sessions_once(stack, {SMALL.stem, SESSION}, time.monotonic() + 120)
        assert found == {SMALL.stem, SESSION}
    finally:
        await watcher.stop()
