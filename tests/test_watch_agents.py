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
from memoryd.runtime import Runtime
from memoryd.watch.repos import RepoWatcher
from memoryd.watch.transcripts import AIDER_LOG, is_transcript, transcript_files
from tests.conftest import git_init
from tests.fixtures import AIDER, GEMINI

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
