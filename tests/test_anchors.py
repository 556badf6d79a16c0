"""Memories checked against the code (memoryd/anchors.py): a decision remembered about a
function of a real tree (arq's), then the function edited, then the file deleted, each
re-indexed by the daemon's own jobs; what `anchors`, `get`, search and the MCP text say; the
same for a session's edit and a note as file_history, recent_activity and the CLI's history
show them; and migration steps 028 and 031 anchoring notes and actions stored before, and
032 giving notes' file anchors the digest actions keep."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from asyncio.subprocess import PIPE
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from surrealdb import RecordID

from memoryd import client
from memoryd.agent import present
from memoryd.agent.present import get_text, hit_line
from memoryd.agent_shared import Scope
from memoryd.anchors import action_version
from memoryd.daemon.runtime import Runtime
from memoryd.database.migrate import migrate
from memoryd.ids import file_key
from memoryd.results import FileHistory, RecentActivity, SearchRequest
from memoryd.scan import project_id_for
from memoryd.vocabulary import FILE, MODIFIES
from tests.conftest import MEMORYD, cli_env, index_tree

SYMBOL = "connections.py#RedisSettings.from_dsn"
DECISION = "Decision: from_dsn rejects every DSN scheme but redis, rediss and unix."
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"


@pytest.fixture(scope="module")
def tree(arq_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of arq's tree, which the tests change (`tree_stack` serves it indexed)."""
    repo = tmp_path_factory.mktemp("anchors") / "arq"
    shutil.copytree(arq_tree, repo)
    return repo


def project_client(stack: Runtime, repo: Path) -> tuple[str, client.Client]:
    """The project of the indexed copy of arq's tree (`tree`), and a client of `stack`."""
    return project_id_for(repo), client.Client(stack.redis, stack.settings)


@pytest.mark.e2e
async def test_a_decision_about_a_function_reads_current_then_changed_then_deleted(
    tree_stack: Runtime, tree: Path
) -> None:
    stack, repo = tree_stack, tree
    project, memoryd = project_client(stack, repo)
    done = await memoryd.remember(DECISION, "decision", [SYMBOL], cwd=repo, project=project)
    memory = done["id"]
    assert done["files"] == [f"{project}:{SYMBOL}"]

    [state] = (await memoryd.anchors([memory]))[memory]
    assert state == {
        "key": f"{project}:{SYMBOL}",
        "kind": "symbol",
        "state": "current",
        "since": None,
        "lines": None,
    }
    [record] = await memoryd.get([memory])
    assert record["anchor"] == "current"
    assert "(code current)" in get_text([record], 2000).splitlines()[0]

    # The function gains two lines; the rest of the file stays as it was.
    source = repo / "connections.py"
    text = source.read_text()
    check = "        conf = urlparse(dsn)\n"
    assert text.count(check) == 1
    source.write_text(
        text.replace(check, check + "        if not dsn:\n            raise ValueError(dsn)\n")
    )
    await index_tree(stack, repo)
    [state] = (await memoryd.anchors([memory]))[memory]
    assert (state["state"], state["lines"]) == ("changed", 2)
    [record] = await memoryd.get([memory])
    assert re.fullmatch(rf"changed since {WHEN} \(2 lines\)", record["anchor"] or "")
    hits = (
        await memoryd.search(SearchRequest("which DSN schemes does from_dsn accept", ("memory",)))
    ).hits
    [hit] = [h for h in hits if f"memory:{h.id}" == memory]
    assert hit.anchor == record["anchor"]
    assert f"(code {record['anchor']})" in hit_line(hit)

    source.unlink()
    await index_tree(stack, repo)
    [state] = (await memoryd.anchors([memory]))[memory]
    assert state["state"] == "deleted"
    [record] = await memoryd.get([memory])
    assert record["anchor"] == "file deleted"


@pytest.mark.e2e
async def test_a_symbol_the_index_does_not_keep_is_refused(tree_stack: Runtime, tree: Path) -> None:
    stack, repo = tree_stack, tree
    _, memoryd = project_client(stack, repo)
    with pytest.raises(Exception, match=r"no indexed symbol .*connections.py#RedisSettings.nope"):
        await memoryd.remember(
            DECISION, "decision", ["connections.py#RedisSettings.nope"], cwd=repo
        )


async def _one_line_into_from_dsn(stack: Runtime, repo: Path) -> None:
    """from_dsn gets one line more, re-indexed."""
    source = repo / "connections.py"
    check = "        conf = urlparse(dsn)\n"
    source.write_text(source.read_text().replace(check, check + "        assert dsn\n"))
    await index_tree(stack, repo)


@pytest.mark.e2e
async def test_step_028_anchors_notes_written_before_at_the_code_of_their_time(
    tree_stack: Runtime, tree: Path
) -> None:
    stack, repo = tree_stack, tree
    assert stack.store is not None
    project, memoryd = project_client(stack, repo)
    files = [SYMBOL, "cron.py"]
    done = await memoryd.remember(DECISION, "decision", files, cwd=repo, project=project)
    memory = done["id"]
    # As an earlier memoryd left it: no anchors, the step not run.
    await stack.store.query(
        "UPDATE memory SET anchors = NONE; DELETE schema_version:028_anchor_notes;"
    )
    assert await memoryd.anchors([memory]) == {}
    # The function changes before the step runs: the note was about the code before.
    await _one_line_into_from_dsn(stack, repo)

    backups = stack.settings.data_dir / "backups"
    assert await migrate(stack.store, stack.settings, backups) == ["028_anchor_notes"]
    states = {s["key"]: s for s in (await memoryd.anchors([memory]))[memory]}
    assert {key: (s["state"], s["lines"]) for key, s in states.items()} == {
        f"{project}:{SYMBOL}": ("changed", 1),
        f"{project}:cron.py": ("current", None),
    }


@pytest.mark.e2e
async def test_step_032_gives_notes_file_anchors_the_actions_digest_their_states_kept(
    tree_stack: Runtime, tree: Path
) -> None:
    """A note's file anchors as memoryd kept them before step 032 (the chunks' `file_hash`):
    after the step each is the digest an action keeps of the same chunks, and reads as it
    did (a file changed since: changed, with its lines; one unchanged: current)."""
    stack, repo = tree_stack, tree
    assert stack.store is not None
    project, memoryd = project_client(stack, repo)
    files = ["connections.py", "cron.py", SYMBOL]
    done = await memoryd.remember(DECISION, "decision", files, cwd=repo, project=project)
    memory, key = done["id"], done["id"].split(":", 1)[1]
    [stored] = (await stack.store.memory_anchors([key])).values()
    digests = [a["hash"] for a in stored]
    # As an earlier memoryd wrote them: a file's anchor held its chunks' file_hash.
    chunks = await stack.store.anchor_chunks([(a["kind"], a["key"], a["at"]) for a in stored])
    old = [
        a | {"hash": rows[0]["file_hash"]} if a["kind"] == "file" else a
        for a, rows in zip(stored, chunks, strict=True)
    ]
    assert [a["hash"] for a in old] != digests
    await stack.store.set_anchors({key: old})
    await stack.store.query("DELETE schema_version:032_rehash_note_files;")
    await _one_line_into_from_dsn(stack, repo)

    backups = stack.settings.data_dir / "backups"
    assert await migrate(stack.store, stack.settings, backups) == ["032_rehash_note_files"]
    [after] = (await stack.store.memory_anchors([key])).values()
    assert [a["hash"] for a in after] == digests
    states = {s["key"]: s for s in (await memoryd.anchors([memory]))[memory]}
    assert {key: (s["state"], s["lines"]) for key, s in states.items()} == {
        f"{project}:connections.py": ("changed", 1),
        f"{project}:cron.py": ("current", None),
        f"{project}:{SYMBOL}": ("changed", 1),
    }
    # Run again (a step cut short resumes): nothing moves.
    await stack.store.query("DELETE schema_version:032_rehash_note_files;")
    assert await migrate(stack.store, stack.settings, backups) == ["032_rehash_note_files"]
    assert [a["hash"] for a in (await stack.store.memory_anchors([key]))[key]] == digests


NOTE = "Decision: connections.py keeps every Redis setting in RedisSettings."


def _aider_edit(repo: Path, path: str) -> Path:
    """The log aider writes for a session that edited `path`, started now (aider's own format,
    as its `.aider.chat.history.md` holds it)."""
    log = repo / ".aider.chat.history.md"
    started = datetime.now().strftime("%Y-%m-%d %H:%M:%S")  # aider writes local time
    log.write_text(
        f"\n# aider chat started at {started}\n\n#### make from_dsn refuse an empty DSN  \n\n"
        f"> Applied edit to {path}  \n"
    )
    return log


def _shown(history: FileHistory, activity: RecentActivity) -> dict[str, str | None]:
    """What file_history and recent_activity say of the session's edit and of the note, in
    their data and in the MCP tools' text."""
    # The aider session (the note's own session MENTIONS the file too).
    [edit] = [a for s in history["sessions"] for a in s["actions"] if a["verb"] == "MODIFIES"]
    [note] = history["notes"]
    [change] = activity["files"]
    [recent] = activity["notes"]
    assert (recent["id"], recent["anchor"]) == (note["id"], note["anchor"])
    scope = Scope(activity["project"], None)
    history_lines = present.history_text(history, 100_000).splitlines()
    activity_lines = present.activity_text(activity, scope, 100_000).splitlines()
    for anchor, lines, marker in (
        (edit["anchor"], history_lines, "MODIFIES ok via edit"),
        (note["anchor"], history_lines, note["id"]),
        # The file's own line: the session's line names the file too, without a count.
        (change["anchor"], activity_lines, "modified connections.py ×"),
        (note["anchor"], activity_lines, note["id"]),
    ):
        [line] = [line for line in lines if marker in line]
        assert f"(code {anchor})" in line, line
    return {"edit": edit["anchor"], "note": note["anchor"], "recent edit": change["anchor"]}


@pytest.mark.e2e
async def test_a_sessions_edit_and_a_note_read_current_then_changed_then_deleted_in_history(
    tree_stack: Runtime, tree: Path
) -> None:
    """An aider session edits connections.py; a decision names the file. file_history and
    recent_activity (their data and the MCP tools' text) say how the file stands against what
    the edit left and what the note saw: current, changed since (2 lines), file deleted."""
    stack, repo = tree_stack, tree
    assert stack.store is not None
    project, memoryd = project_client(stack, repo)
    source = repo / "connections.py"
    check = "        conf = urlparse(dsn)\n"
    text = source.read_text()
    assert text.count(check) == 1
    # The session: its log, then the edit it made, indexed, then the log ingested.
    log = _aider_edit(repo, "connections.py")
    source.write_text(text.replace(check, check + "        assert dsn\n"))
    await index_tree(stack, repo)
    [report] = await memoryd.ingest([str(log)])
    assert report["memories"] >= 1
    # The edit's hash is stored at ingest: the version the indexer wrote after it.

    async def edit_hashes() -> list[str | None]:
        assert stack.store is not None
        found = await stack.store.query(
            "SELECT VALUE code_hash FROM modifies WHERE out.project = $p",
            {"p": RecordID("project", project)},
        )
        return list(found[0] or [])

    # Ingest writes anchors after its batch, without holding the job up: wait for it.
    deadline = time.monotonic() + 300
    while (await edit_hashes()) == [None]:
        assert time.monotonic() < deadline, "the edit's anchor was never stored"
        await asyncio.sleep(0.5)
    [stored] = await edit_hashes()
    assert isinstance(stored, str) and len(stored) == 64
    await memoryd.remember(NOTE, "decision", ["connections.py"], cwd=repo, project=project)
    since = datetime.now(UTC) - timedelta(days=1)

    async def shown() -> dict[str, str | None]:
        history = await memoryd.history(str(source))
        return _shown(history, await memoryd.recent_activity(project, since))

    assert await shown() == {"edit": "current", "note": "current", "recent edit": "current"}

    text = source.read_text()
    source.write_text(
        text.replace(check, check + "        if not dsn:\n            raise ValueError(dsn)\n")
    )
    await index_tree(stack, repo)
    states = await shown()
    assert set(states) == {"edit", "note", "recent edit"}
    for state in states.values():
        assert re.fullmatch(rf"changed since {WHEN} \(2 lines\)", state or ""), states
    # The CLI's `history` says the same of the session's last edit.
    done = await cli_history(stack, source)
    assert f"  code: {states['edit']} (after its last MODIFIES)" in done.splitlines()
    assert f"(code {states['note']})" in done

    # Migration step 031 gives actions stored before anchors theirs: the same version (what
    # the edit left, not the file changed since).
    await stack.store.query(
        "UPDATE modifies SET code_hash = NONE; DELETE schema_version:031_anchor_actions;"
    )
    backups = stack.settings.data_dir / "backups"
    assert await migrate(stack.store, stack.settings, backups) == ["031_anchor_actions"]
    assert await edit_hashes() == [stored]
    assert await shown() == states

    source.unlink()
    await index_tree(stack, repo)
    assert await shown() == {
        "edit": "file deleted",
        "note": "file deleted",
        "recent edit": "file deleted",
    }


async def cli_history(stack: Runtime, path: Path) -> str:
    """`memoryd history PATH`, answered by this test's worker (so run without blocking it)."""
    env = cli_env()
    data = str(stack.settings.data_dir)
    process = await asyncio.create_subprocess_exec(
        MEMORYD, "history", str(path), "--data-dir", data, stdout=PIPE, stderr=PIPE, env=env
    )
    out, err = await asyncio.wait_for(process.communicate(), 600)
    assert process.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.e2e
async def test_an_edit_is_anchored_to_what_it_left_when_the_version_before_it_is_indexed_late(
    stack: Runtime, tmp_path: Path
) -> None:
    """An agent breaks a file, then (at `edit`) fixes it; the indexer read the broken version
    before the fix but wrote it after `edit`. The fix's anchor is the fixed version: a version
    is valid from when the file came to hold it (its mtime), not from when it was written."""
    assert stack.store is not None
    repo = tmp_path / "repo"
    repo.mkdir()
    source = repo / "total.py"
    good, bad = "import json\n\nprint(json.dumps(1))\n", "import jsony as json\n\nprint(1)\n"
    source.write_text(good)
    await index_tree(stack, repo)
    source.write_text(bad)
    # The fix is asked for just after the break, before the break is indexed.
    edit = datetime.fromtimestamp(source.stat().st_mtime_ns / 1e9, UTC) + timedelta(microseconds=1)
    await index_tree(stack, repo)
    source.write_text(good)
    await index_tree(stack, repo)

    key = file_key(project_id_for(repo), "total.py")
    [rows] = await stack.store.anchor_chunks([(FILE, key, edit)])
    version = action_version(MODIFIES.name, rows, edit)
    assert version is not None
    assert "".join(str(c["content"]) for c in version[1]) == good
    [broken] = [r for r in rows if "jsony" in str(r["content"])]
    assert broken["valid_from"] < edit < broken["valid_until"]
