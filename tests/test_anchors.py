"""Memories checked against the code (memoryd/anchors.py): a decision remembered about a
function of a real tree (arq's), then the function edited, then the file deleted, each
re-indexed by the daemon's own jobs; what `anchors`, `get`, search and the MCP text say; and
migration step 028 anchoring notes written before anchors."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from memoryd import client
from memoryd.migrate import migrate
from memoryd.present import get_text, hit_line
from memoryd.results import SearchRequest
from memoryd.runtime import Runtime
from memoryd.scan import project_id_for
from tests.conftest import index_tree

SYMBOL = "connections.py#RedisSettings.from_dsn"
DECISION = "Decision: from_dsn rejects every DSN scheme but redis, rediss and unix."
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"


@pytest.mark.e2e
async def test_a_decision_about_a_function_reads_current_then_changed_then_deleted(
    stack: Runtime, arq_tree: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "arq"
    shutil.copytree(arq_tree, repo)
    await index_tree(stack, repo)
    project = project_id_for(repo)
    memoryd = client.Client(stack.redis, stack.settings)
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
async def test_a_symbol_the_index_does_not_keep_is_refused(
    stack: Runtime, arq_tree: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "arq"
    shutil.copytree(arq_tree, repo)
    await index_tree(stack, repo)
    memoryd = client.Client(stack.redis, stack.settings)
    with pytest.raises(Exception, match=r"no indexed symbol .*connections.py#RedisSettings.nope"):
        await memoryd.remember(
            DECISION, "decision", ["connections.py#RedisSettings.nope"], cwd=repo
        )


@pytest.mark.e2e
async def test_step_028_anchors_notes_written_before_at_the_code_of_their_time(
    stack: Runtime, arq_tree: Path, tmp_path: Path
) -> None:
    assert stack.store is not None
    repo = tmp_path / "arq"
    shutil.copytree(arq_tree, repo)
    await index_tree(stack, repo)
    project = project_id_for(repo)
    memoryd = client.Client(stack.redis, stack.settings)
    files = [SYMBOL, "cron.py"]
    done = await memoryd.remember(DECISION, "decision", files, cwd=repo, project=project)
    memory = done["id"]
    # As an earlier memoryd left it: no anchors, the step not run.
    await stack.store.query(
        "UPDATE memory SET anchors = NONE; DELETE schema_version:028_anchor_notes;"
    )
    assert await memoryd.anchors([memory]) == {}
    # The function changes before the step runs: the note was about the code before.
    source = repo / "connections.py"
    check = "        conf = urlparse(dsn)\n"
    source.write_text(source.read_text().replace(check, check + "        assert dsn\n"))
    await index_tree(stack, repo)

    backups = stack.settings.data_dir / "backups"
    assert await migrate(stack.store, stack.settings, backups) == ["028_anchor_notes"]
    states = {s["key"]: s for s in (await memoryd.anchors([memory]))[memory]}
    assert {key: (s["state"], s["lines"]) for key, s in states.items()} == {
        f"{project}:{SYMBOL}": ("changed", 1),
        f"{project}:cron.py": ("current", None),
    }
