"""Memories checked against the code (memoryd/anchors.py): a decision remembered about a
function of a real tree (arq's), then the function edited, then the file deleted, each
re-indexed by the daemon's own jobs; what `anchors`, `get`, search and the MCP text say."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from memoryd import client
from memoryd.present import get_text, hit_line
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
    hits = await memoryd.search("which DSN schemes does from_dsn accept", kind="memory")
    [hit] = [h for h in hits if f"memory:{h.id}" == memory]
    assert hit.anchor == record["anchor"]
    assert f"(code {record['anchor']})" in hit_line(hit, project)

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
