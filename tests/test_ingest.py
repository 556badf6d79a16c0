"""Transcripts through the real queue into the real database: counts, views, dedupe, bad input.

Exact numbers were checked by reading the fixtures (see tests/test_transcripts_claude.py for
the per-file derivations): 37f83ec9 has 6 prompts, 76 assistant messages, 101 tool calls, 80
tool results and 19 errors (282 memories); renderer.py was read 8 times and edited 6 times.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from memoryd import jobs, projects, queue
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from tests.conftest import cli, git_init, status_of
from tests.fixtures import CLAUDE, CODEX, RENDERER, S37, SMALL

CB2 = "cb2e607c-c758-415a-8b45-c49e4631906a"


@pytest.fixture(scope="module")
def ingested(short_tmp: Path) -> Iterator[tuple[Path, dict]]:
    """All Claude Code and Codex fixtures, ingested once with `memoryd ingest`."""
    data = Path(tempfile.mkdtemp(dir=short_tmp))
    done = cli("ingest", str(CLAUDE), str(CODEX), "--data-dir", str(data), "--json")
    yield data, json.loads(done.stdout)
    shutil.rmtree(data, ignore_errors=True)


@pytest.mark.e2e
def test_ingest_report_has_the_exact_counts(ingested: tuple[Path, dict]) -> None:
    _, totals = ingested
    by_name = {Path(r["path"]).name: r for r in totals["reports"]}
    assert len(by_name) == 7
    s37 = by_name[S37.name]
    assert s37["agent"] == "claude-code"
    assert s37["memories"] == 282 and s37["skipped"] == 0
    assert s37["edges"]["modifies"] == 30  # 27 ok + 3 "Found 2 matches" failures
    assert s37["edges"]["reads"] == 28  # 24 by file tools, 4 read off grep/find commands
    assert s37["edges"]["triggered"] == 19
    assert s37["edges"]["denied"] == 2
    # A session's memories and their order are the memories' fields, not edges.
    assert not {"contains", "next"} & set(s37["edges"])
    assert s37["session_ids"] == [S37.stem]  # what `memoryd session` takes next
    assert s37["edges"]["mentions"] > 0
    cb2 = by_name[f"{CB2}.jsonl"]
    assert cb2["memories"] == 201 and cb2["edges"]["spawned"] == 1
    assert cb2["edges"]["triggered"] == 5
    summary_only = by_name["4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl"]
    assert summary_only["memories"] == 0 and summary_only["sessions"] == 0
    assert summary_only["session_ids"] == []
    codex = by_name["rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"]
    assert codex["agent"] == "codex"
    assert codex["memories"] == 117 and codex["edges"]["triggered"] == 2
    assert totals["memories"] == 696


@pytest.mark.e2e
def test_history_of_a_file(ingested: tuple[Path, dict]) -> None:
    data, _ = ingested
    doc = json.loads(cli("history", RENDERER, "--data-dir", str(data), "--json").stdout)
    assert doc["file"] == {"kind": "file", "key": RENDERER, "project": None, "path": None}
    [session] = doc["sessions"]
    assert session["session"] == S37.stem
    assert session["goal"].startswith("Hey Claude, please have a look at the git diff")
    verbs: dict[str, int] = {}
    for action in session["actions"]:
        key = f"{action['verb']} {action['outcome'] or action['reason']}"
        verbs[key] = verbs.get(key, 0) + 1
    # Shell commands, resolved where each ran: `grep -n … <abs path>` twice reads it; git diff,
    # ruff format and two ruff checks name it. The other commands that named
    # claude_code_log/renderer.py ran in test/ (after `cd test`) and so named
    # test/claude_code_log/renderer.py, which does not exist (they say so, and fail).
    assert verbs == {
        "READS ok": 10,
        "MODIFIES ok": 6,
        "DENIED user_rejected": 1,
        "MENTIONS ok": 4,
    }
    # Everything before the session's last edit of the file is stale now.
    last_edit = max(a["event_time"] for a in session["actions"] if a["verb"] == "MODIFIES")
    for action in session["actions"]:
        assert action["changed_since"] == (action["event_time"] < last_edit)
    # 19 failures, 12 distinct (fixtures/transcripts/expected-errors.tsv): each shown once, as
    # it first appeared, with its count
    errors = session["errors"]
    assert (len(errors), sum(e["count"] for e in errors)) == (12, 19)
    found = [e for e in errors if e["message"].startswith("Found 2 matches of the string")]
    assert [e["count"] for e in found] == [3]
    text = cli("history", RENDERER, "--data-dir", str(data)).stdout
    assert "error: error:" not in text and "  error (×3): Found 2 matches of the string" in text
    assert doc["chunks"] == []  # not a watched project on this machine


@pytest.mark.e2e
def test_session_replay_and_subagent_link(ingested: tuple[Path, dict]) -> None:
    data, _ = ingested
    doc = json.loads(cli("session", "cb2e607c", "--data-dir", str(data), "--json").stdout)
    assert doc["session"] == CB2
    assert doc["goal"] == (
        "How can I make this possible to install as a library with `uv` so I can run from "
        "any directory?"
    )
    assert len(doc["events"]) == 201
    assert [e["seq"] for e in doc["events"]] == sorted(e["seq"] for e in doc["events"])
    assert doc["subagents"] == [
        {
            "session": f"{CB2}:agent-ea02459f",
            "description": "Explore project structure for packaging",
            "seq": 2,
        }
    ]
    assert len(doc["errors"]) == 5
    triggered = [x["target"] for e in doc["events"] for x in e["edges"] if x["verb"] == "TRIGGERED"]
    assert (
        len(triggered) == 5 and "ValueError: Unable to determine which files to ship" in triggered
    )
    child = json.loads(
        cli("session", f"{CB2}:agent-ea02459f", "--data-dir", str(data), "--json").stdout
    )
    assert child["parent"] == CB2
    # 13 by Read/LS/Glob, and `ls -la <repo>` read off its one Bash command
    assert sum(1 for e in child["events"] for x in e["edges"] if x["verb"] == "READS") == 14


@pytest.mark.e2e
def test_search_memories_and_goals(ingested: tuple[Path, dict]) -> None:
    data, _ = ingested
    goals = json.loads(
        cli(
            "search",
            "make the project installable as a library with uv",
            "--kind",
            "goal",
            "--data-dir",
            str(data),
            "--json",
        ).stdout
    )
    assert goals["results"][0]["session"].startswith(CB2)
    memories = json.loads(
        cli(
            "search",
            "No PR found for the current branch",
            "--kind",
            "memory",
            "--data-dir",
            str(data),
            "--json",
            "--limit",
            "3",
        ).stdout
    )
    top = memories["results"][0]
    assert top["session"] == CB2 and top["name"] == "error"
    assert "No PR found" in top["text"]


@pytest.mark.e2e
def test_reingest_and_replaced_file_change_nothing(
    ingested: tuple[Path, dict], tmp_path: Path, embedder: Embedder
) -> None:
    data, _ = ingested
    before = status_of(data, embedder)["counts"]  # in this process: the test is about ingest
    again = json.loads(cli("ingest", str(S37), "--data-dir", str(data), "--json").stdout)
    assert again["reports"][0]["note"] == "up to date"
    # The same transcript under another path and inode: read from 0, deduplicated by its ids.
    copy = tmp_path / "moved.jsonl"
    shutil.copyfile(S37, copy)
    moved = json.loads(cli("ingest", str(copy), "--data-dir", str(data), "--json").stdout)
    assert moved["reports"][0]["memories"] == 282
    assert status_of(data, embedder)["counts"] == before


@pytest.mark.e2e
async def test_agent_edits_join_the_indexed_code(stack: Runtime, tmp_path: Path) -> None:
    """The product's point: a session's edits and the file's current chunks, one hop apart."""
    repo = tmp_path / "claude-code-log"
    (repo / "claude_code_log").mkdir(parents=True)
    (repo / "claude_code_log" / "renderer.py").write_text(
        "def generate_html(messages):\n    return '<html>' + ''.join(messages) + '</html>'\n\n\n"
        "def session_navigation(sessions):\n    return [s.title for s in sessions]\n"
    )
    git_init(repo)
    assert stack.redis is not None
    project = projects.resolve(repo)
    for job, _ in await projects.sync(stack.redis, project, 32):
        await queue.wait_for(job, 300)
    # The real transcript, as if it had been recorded in this repository.
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(
        S37.read_bytes().replace(b"/Users/dain/workspace/claude-code-log", str(repo).encode())
    )
    [job] = await queue.enqueue_ingest(stack.redis, [str(transcript)])
    await queue.wait_for(job, 300)
    doc = await queue.call(stack.redis, jobs.HISTORY, str(repo / "claude_code_log" / "renderer.py"))
    assert doc["file"] == {
        "kind": "file",
        "key": f"{project.id}:claude_code_log/renderer.py",
        "project": project.id,
        "path": "claude_code_log/renderer.py",
    }
    [session] = doc["sessions"]
    modified = [a for a in session["actions"] if a["verb"] == "MODIFIES"]
    assert len(modified) == 6 and {a["outcome"] for a in modified} == {"ok"}
    assert [(c["start_line"], c["end_line"]) for c in doc["chunks"]] == [(1, 6)]


async def test_planted_secrets_never_reach_the_database(stack: Runtime, tmp_path: Path) -> None:
    secrets = {
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB",
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ",
        "hunter2-super-secret-password",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    }
    lines = SMALL.read_bytes().splitlines(keepends=True)
    prompt = json.loads(lines[2])  # the user's first prompt
    prompt["message"]["content"] = (
        "deploy with AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE and "
        "GITHUB_TOKEN=ghp_1234567890abcdefghijklmnopqrstuvwxyzAB\n"
        "ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ\n"
        "DB_PASSWORD=hunter2-super-secret-password\n"
        "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    )
    lines[2] = json.dumps(prompt).encode() + b"\n"
    planted = tmp_path / "planted.jsonl"
    planted.write_bytes(b"".join(lines))
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(planted)])
    report = await queue.wait_for(job, 300)
    assert report["memories"] == 22
    everything = repr(await stack.store.dump())
    assert "[REDACTED:" in everything
    for secret in secrets:
        assert secret not in everything


async def test_bad_lines_are_skipped_and_a_partial_line_waits(
    stack: Runtime, tmp_path: Path
) -> None:
    lines = SMALL.read_bytes().splitlines(keepends=True)
    assert len(lines) == 24
    bad = tmp_path / "bad.jsonl"
    # A NUL-padded stub glued to the next record, pure garbage, invalid UTF-8, and the last
    # record cut in half (no newline yet), as a writer mid-append leaves it.
    damaged = [
        *lines[:3],
        b"\x00\x00\x00" + lines[3],
        b'{"type": "user", "trunc' + lines[4],
        b"this is not json\n",
        b'\xff\xfe{"type":"x"}\n',
        *lines[5:23],
    ]
    half = len(lines[23]) // 2
    bad.write_bytes(b"".join(damaged) + lines[23][:half])
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(bad)])
    first = await queue.wait_for(job, 300)
    # Skipped, each with a log line: the glued stub's fragment, the garbage line, and on the
    # undecodable line its broken prefix and then the record it held (an unknown type).
    assert first["skipped"] == 4
    cursor = await stack.store.transcript_cursor(str(bad))
    assert cursor is not None and cursor["offset"] == bad.stat().st_size - half
    with bad.open("ab") as f:
        f.write(lines[23][half:])
    [job] = await queue.enqueue_ingest(stack.redis, [str(bad)], fresh=True)
    second = await queue.wait_for(job, 300)
    assert second["lines"] == 1 and second["skipped"] == 0
    # Everything the clean file holds is there: same memories as ingesting it whole.
    clean = tmp_path / "clean.jsonl"
    shutil.copyfile(SMALL, clean)
    [job] = await queue.enqueue_ingest(stack.redis, [str(clean)])
    assert (await queue.wait_for(job, 300))["memories"] == first["memories"] + second["memories"]
    assert (await stack.store.counts())["memory"] == 22


async def test_compressed_archive_and_vanished_file(stack: Runtime, tmp_path: Path) -> None:
    archive = tmp_path / "rollout.jsonl.zst"
    archive.write_bytes(zstandard.ZstdCompressor().compress(SMALL.read_bytes()))
    gone = tmp_path / "gone.jsonl"
    gone.write_bytes(SMALL.read_bytes())
    assert stack.redis is not None and stack.store is not None
    jobs = await queue.enqueue_ingest(stack.redis, [str(archive), str(gone)])
    gone.unlink()  # deleted before the worker gets to it
    zst, vanished = [await queue.wait_for(job, 300) for job in jobs]
    assert zst["agent"] == "claude-code" and zst["memories"] == 22
    assert vanished["memories"] == 0 and "memories stay" in vanished["note"]
    [job] = await queue.enqueue_ingest(stack.redis, [str(archive)], fresh=True)
    assert (await queue.wait_for(job, 300))["note"] == "up to date"


async def test_truncated_then_rewritten_transcript_is_read_again(
    stack: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(SMALL.read_bytes())
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(path)], fresh=True)
    assert (await queue.wait_for(job, 300))["memories"] == 22
    # Truncated (an editor, a rotation): the stored offset is past the end, so read from 0.
    lines = SMALL.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:10]))
    [job] = await queue.enqueue_ingest(stack.redis, [str(path)], fresh=True)
    report = await queue.wait_for(job, 300)
    assert report["restarted"] is True and report["lines"] == 10
    path.write_bytes(SMALL.read_bytes())
    [job] = await queue.enqueue_ingest(stack.redis, [str(path)], fresh=True)
    assert (await queue.wait_for(job, 300))["lines"] == 14
    # Every record is there exactly once.
    assert (await stack.store.counts())["memory"] == 22
    cursor = await stack.store.transcript_cursor(str(path))
    assert cursor is not None and cursor["offset"] == path.stat().st_size


async def test_a_huge_transcript_is_read_in_slices_of_jobs(
    stack: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job reads a slice and hands the rest on, so no job runs into the job timeout."""
    import asyncio
    import functools

    from workers import ingest
    from workers.stages.transcripts import read_lines

    # Batches of about 4 KB (a few lines), one batch per job.
    monkeypatch.setattr(ingest, "BATCH_BYTES", 4096)
    monkeypatch.setattr(ingest, "read_lines", functools.partial(read_lines, chunk_size=4096))
    monkeypatch.setattr(ingest, "JOB_SLICE_SECONDS", 0.0)
    path = tmp_path / "big.jsonl"
    path.write_bytes(SMALL.read_bytes())
    assert stack.redis is not None and stack.store is not None
    [job] = await queue.enqueue_ingest(stack.redis, [str(path)], fresh=True)
    first = await queue.wait_for(job, 300)
    assert first["note"].startswith("continues from byte ")
    assert 0 < first["lines"] < 24
    for _ in range(600):
        cursor = await stack.store.transcript_cursor(str(path))
        busy = [k async for k in stack.redis.scan_iter(match="arq:in-progress:*")]
        queued = await queue.queue_depth(stack.redis)
        if cursor and cursor["offset"] == path.stat().st_size and not busy and not queued:
            break
        await asyncio.sleep(0.1)
    assert cursor is not None and cursor["offset"] == path.stat().st_size
    assert (await stack.store.counts())["memory"] == 22
