"""The code graph end to end: arq's real source through the queue into the database, read
back by `related` and `impact` through the typed client and the MCP tools."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient

from memoryd import client, projects
from memoryd.agent.mcp_server import build_server
from memoryd.agent.present_graph import hit_lines
from memoryd.daemon.runtime import Runtime
from memoryd.database.migrate import migrate
from memoryd.results import SearchRequest
from memoryd.search_related import related_of_hits
from tests.conftest import MEMORYD, cli_env, git, git_init, index_tree
from tests.test_codegraph_cochange import _counted

pytestmark = pytest.mark.e2e

ARQ = Path(__file__).parent / "data" / "arq"


def _arq_repo(folder: Path) -> Path:
    """arq 0.28.0's source as vendored in tests/data/arq (MIT), as a git repository."""
    root = folder / "arq-src"
    shutil.copytree(ARQ, root)
    git_init(root)
    return root


@pytest.fixture
def arq_repo(tmp_path: Path) -> Path:
    return _arq_repo(tmp_path)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repo of the tests that start on it indexed (`tree_stack`): indexing it was most of
    each test's time."""
    return _arq_repo(tmp_path_factory.mktemp("codegraph"))


def _links(links: list[Any]) -> list[tuple[str, str, int, float]]:
    """(key without its project, path, line, confidence) of each neighbour."""
    return [(x["key"].split(":", 1)[1], x["path"], x["line"], x["confidence"]) for x in links]


async def _related(rt: Runtime, root: Path, target: str, **kw: Any) -> Any:
    async with client.connect(rt.settings) as memoryd:
        return await memoryd.related(target, cwd=str(root), **kw)


async def test_callers_importers_and_impact_in_arq(tree_stack: Runtime, tree: Path) -> None:
    stack, arq_repo = tree_stack, tree
    doc = await _related(stack, arq_repo, "arq/connections.py#create_pool")
    assert doc["target"]["kind"] == "symbol"
    assert _links(doc["definitions"]) == [
        ("arq/connections.py#create_pool", "arq/connections.py", 220, 1.0)
    ]
    assert _links(doc["callers"]) == [
        ("arq/worker.py#Worker.main", "arq/worker.py", 351, 1.0),
        ("arq/worker.py#async_check_health", "arq/worker.py", 907, 1.0),
    ]
    # The same symbol asked by the id of the chunk that holds it, as search shows it.
    assert stack.store is not None
    [chunk] = (
        await stack.store.query(
            "SELECT record::id(id) AS id, start_line FROM code_chunk "
            "WHERE path = 'arq/connections.py' AND name = 'create_pool' "
            "AND valid_until IS NONE ORDER BY start_line LIMIT 1"
        )
    )[0]
    by_chunk = await _related(stack, arq_repo, f"code:{chunk['id']}")
    assert by_chunk["target"] == doc["target"]
    assert by_chunk["callers"] == doc["callers"]
    # A method called through `self`, by its name alone.
    doc = await _related(stack, arq_repo, "Worker.run_job")
    assert _links(doc["callers"]) == [
        ("arq/worker.py#Worker.start_jobs", "arq/worker.py", 474, 1.0)
    ]
    # The importers of a module.
    doc = await _related(stack, arq_repo, str(arq_repo / "arq/connections.py"))
    assert _links(doc["importers"]) == [
        ("arq/__init__.py", "arq/__init__.py", 1, 1.0),
        ("arq/worker.py", "arq/worker.py", 19, 1.0),
    ]
    assert [x["key"] for x in doc["bases"]] == [
        f"{doc['target']['project']}:arq/connections.py#BaseRedis"
    ]
    async with client.connect(stack.settings) as memoryd:
        impact = await memoryd.impact([str(arq_repo / "arq/utils.py")], cwd=str(arq_repo))
    assert impact["paths"] == ["arq/utils.py"]
    assert [(d["path"], d["depth"], d["via"], d["of"]) for d in impact["dependents"]] == [
        ("arq/cli.py", 1, "imports", "arq/utils.py"),
        ("arq/connections.py", 1, "imports", "arq/utils.py"),
        ("arq/cron.py", 1, "imports", "arq/utils.py"),
        ("arq/jobs.py", 1, "imports", "arq/utils.py"),
        ("arq/worker.py", 1, "imports", "arq/utils.py"),
        ("arq/__init__.py", 2, "imports", "arq/connections.py"),
        ("arq/__main__.py", 2, "imports", "arq/cli.py"),
        ("arq/typing.py", 2, "imports", "arq/cron.py"),
    ]
    assert (impact["tests"], impact["failures"]) == ([], [])


async def test_a_rename_moves_definitions_and_their_edges(tree_stack: Runtime, tree: Path) -> None:
    stack, arq_repo = tree_stack, tree
    before = await _related(stack, arq_repo, "arq/utils.py#to_unix_ms")
    assert _links(before["callers"]) == [
        ("arq/connections.py#ArqRedis.enqueue_job", "arq/connections.py", 164, 1.0),
        ("arq/worker.py#Worker.run_cron", "arq/worker.py", 758, 1.0),
    ]
    git(arq_repo, "mv", "arq/utils.py", "arq/helpers.py")
    for path in (arq_repo / "arq").glob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"from (\.|arq\.)utils import", r"from \1helpers import", text))
    await index_tree(stack, arq_repo)
    after = await _related(stack, arq_repo, "arq/helpers.py#to_unix_ms")
    assert _links(after["definitions"]) == [
        ("arq/helpers.py#to_unix_ms", "arq/helpers.py", 33, 1.0)
    ]
    assert _links(after["callers"]) == [
        ("arq/connections.py#ArqRedis.enqueue_job", "arq/connections.py", 164, 1.0),
        ("arq/worker.py#Worker.run_cron", "arq/worker.py", 758, 1.0),
    ]
    gone = await _related(stack, arq_repo, "arq/utils.py#to_unix_ms")
    assert (gone["definitions"], gone["callers"], gone["callees"]) == ([], [], [])


async def test_a_deleted_files_edges_retire_and_come_back_as_of(
    tree_stack: Runtime, tree: Path
) -> None:
    stack, arq_repo = tree_stack, tree
    before = await _related(stack, arq_repo, "arq/cron.py")
    assert [x["key"].split("#")[1] for x in before["definitions"]][:4] == [
        "CronJob",
        "CronJob.__repr__",
        "CronJob.calculate_next",
        "CronJob.coroutine",
    ]
    at = datetime.now(UTC)
    (arq_repo / "arq/cron.py").unlink()
    await index_tree(stack, arq_repo)
    now = await _related(stack, arq_repo, "arq/cron.py")
    assert (now["definitions"], now["imports"], now["callees"]) == ([], [], [])
    # worker.py still imports it: that edge is worker.py's, and worker.py did not change.
    assert _links(now["importers"]) == _links(before["importers"])
    then = await _related(stack, arq_repo, "arq/cron.py", as_of=at)
    for part in ("definitions", "imports", "callees", "importers", "bases"):
        assert then[part] == before[part], part


async def test_related_and_impact_over_the_mcp_sdk_client(tree_stack: Runtime, tree: Path) -> None:
    stack, arq_repo = tree_stack, tree
    async with McpClient(build_server(stack.settings, arq_repo)) as mcp:
        related = await mcp.call_tool("related", {"target": "create_pool", "max_chars": 700})
        impact = await mcp.call_tool("impact", {"paths": ["arq/connections.py"], "depth": 1})
    assert not related.is_error and not impact.is_error
    assert related.content[0].text == (  # type: ignore[union-attr]
        "related symbol arq/connections.py#create_pool: 1 definitions, 2 callers, 2 callees, "
        "2 importers, 13 imports\n"
        "defines arq/connections.py#create_pool at arq/connections.py:220\n"
        "called by arq/worker.py#Worker.main at arq/worker.py:351\n"
        "called by arq/worker.py#async_check_health at arq/worker.py:907\n"
        "calls arq/connections.py#RedisSettings at arq/connections.py:234\n"
        "calls arq/jobs.py#Job.info at arq/connections.py:298 (guess 0.90)\n"
        "imported by arq/__init__.py at arq/__init__.py:1\n"
        "imported by arq/worker.py at arq/worker.py:19\n"
        "imports arq/constants.py at arq/connections.py:16\n"
        "imports arq/jobs.py at arq/connections.py:17\n"
        "… 22 more links not shown (narrow the request or raise max_chars)"
    )
    assert impact.content[0].text == (  # type: ignore[union-attr]
        "impact of arq/connections.py (depth 1): 2 dependent files, 0 tests, "
        "0 failures after earlier edits\n"
        "dependent arq/__init__.py (imports arq/connections.py, depth 1)\n"
        "dependent arq/worker.py (imports arq/connections.py, depth 1)"
    )


async def test_migration_29_fills_the_graph_of_a_database_indexed_before_it(
    tree_stack: Runtime, tree: Path
) -> None:
    """A database indexed by a memoryd without the code graph (its graph rows removed and
    step 029 not recorded) gets the same graph from the backfill as indexing gives."""
    stack, arq_repo = tree_stack, tree
    assert stack.store is not None
    store = stack.store
    indexed = await _related(stack, arq_repo, "arq/connections.py")
    tables = ("defines", "imports", "calls", "inherits", "code_ref")
    counts = await store.table_counts()
    await store.query(
        "".join(f"DELETE {t};" for t in tables) + "DELETE schema_version:029_codegraph_backfill;"
    )
    empty = await _related(stack, arq_repo, "arq/connections.py")
    assert (empty["definitions"], empty["callers"], empty["importers"]) == ([], [], [])

    assert await migrate(store, stack.settings, None) == ["029_codegraph_backfill"]

    assert await _related(stack, arq_repo, "arq/connections.py") == indexed
    after = await store.table_counts()
    assert {t: after[t] for t in tables} == {t: counts[t] for t in tables}


async def test_search_hits_with_their_co_changed_files_and_callers(
    stack: Runtime, arq_repo: Path
) -> None:
    """`search --related`: under a code hit, the files its file changed with and the callers
    of its symbol, through the typed client and the CLI."""
    for name in ("arq/connections.py", "arq/worker.py"):
        (arq_repo / name).write_text((arq_repo / name).read_text() + "\n# changed together\n")
    git(arq_repo, "commit", "-q", "-am", "connections and worker")
    await index_tree(stack, arq_repo)
    assert (await _counted(stack, arq_repo))["commits"] == 2
    # A call on an instance keeps its class (code_ref.owner): `job.result_info()` of `job = Job(…)`.
    assert stack.store is not None
    refs = await stack.store.refs_named(projects.resolve(arq_repo).id, ["result_info"], "calls")
    assert [(r["path"], r["line"], r["owner"]) for r in refs] == [
        ("arq/connections.py", 186, "Job")
    ]
    async with client.connect(stack.settings) as memoryd:
        results = list(
            (await memoryd.search(SearchRequest("create a redis connection pool", limit=20))).hits
        )
        hit = next(r for r in results if r.name == "create_pool")  # its first chunk found
        graphs = await related_of_hits(memoryd, results)
    assert hit_lines(graphs[hit.id]) == [
        # the import of 12 source files counts each pair 4/12; the commit of two, 1
        "  changes with arq/worker.py (1.333 commits)",
        "  changes with arq/__init__.py (0.333 commits)",
        "  changes with arq/__main__.py (0.333 commits)",
        "  called by arq/worker.py#Worker.main at arq/worker.py:351",
        "  called by arq/worker.py#async_check_health at arq/worker.py:907",
    ]
    # Asked for one, the file changed with most often, not the first by name: the pairs come
    # from the database ordered by path, so a few read first would be arq/__init__.py's.
    async with client.connect(stack.settings) as memoryd:
        one = await related_of_hits(memoryd, [hit], per_hit=1)
    assert one[hit.id]["changes_with"][0]["path"] == "arq/worker.py"
    # The CLI beside the daemon this event loop serves (a blocking run would starve it).
    proc = await asyncio.create_subprocess_exec(
        MEMORYD, "search", "create a redis connection pool", "--limit", "20", "--related",
        "--json", "--data-dir", str(stack.settings.data_dir), env=cli_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, errors = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, errors.decode()
    rows = {row["id"]: row for row in json.loads(out)["results"]}
    assert rows[hit.id]["related"] == graphs[hit.id]
