"""One search request from end to end: the CLI, the MCP tools and the hooks ask the daemon one
SearchRequest, answered in one query over its channel, memories kept to a project the same way
whoever asks."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd import client, jobs
from memoryd.agent import hooks, mcp_server
from memoryd.daemon import metrics
from memoryd.daemon.runtime import Runtime
from memoryd.errors import InvalidRequest
from memoryd.results import SearchAnswer, SearchRequest, SearchResult
from tests.conftest import cli, git_init, index_tree

QUERIES = frozenset(spec.name for spec in jobs.ALL if spec.is_query)
WORDS = "retry backoff doubles each attempt"


def test_a_request_crosses_the_channel_as_plain_values_and_comes_back_equal() -> None:
    request = SearchRequest(
        "parse a dsn",
        ("code", "memory"),
        limit=3,
        project="arq",
        cwd="/somewhere",
        path="**/*.py",
        as_of=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        limits=(("memory", 7),),
    )
    wire = request.wire()
    assert all(isinstance(v, str | int | tuple | datetime | None) for v in wire.values())
    assert SearchRequest.from_wire(wire) == request
    assert (request.limit_of("code"), request.limit_of("memory")) == (3, 7)
    answer = SearchAnswer((SearchResult("memory", "m1", 0.5, project="p", session="s"),), "p")
    assert SearchAnswer.from_wire(answer.wire()) == answer


def test_path_and_language_keep_a_search_to_code_and_docs() -> None:
    every = ("code", "docs", "memory", "goal")
    assert SearchRequest("q", every).searched_kinds() == every
    assert SearchRequest("q", every, path="*.py").searched_kinds() == ("code", "docs")
    assert SearchRequest("q", ("docs", "goal"), language="markdown").searched_kinds() == ("docs",)
    with pytest.raises(InvalidRequest, match="apply to code and docs search"):
        SearchRequest("q", ("memory",), path="*.py").searched_kinds()
    with pytest.raises(InvalidRequest, match="unknown kind 'nonsense'; choose from code, docs"):
        SearchRequest("q", ("code", "nonsense")).searched_kinds()


def _answered() -> Counter[str]:
    """Queries this process's daemon answered so far, by name (its own job counter)."""
    counts: Counter[str] = Counter()
    for family in metrics.REGISTRY.collect():
        for sample in family.samples:
            if sample.name == "memoryd_jobs_total" and sample.labels["job"] in QUERIES:
                counts[sample.labels["job"]] += int(sample.value)
    return counts


async def _asked(work: object) -> tuple[object, Counter[str]]:
    """What `work` (an awaitable) gave, and the queries the daemon answered meanwhile."""
    before = _answered()
    done = await work  # type: ignore[misc]
    return done, _answered() - before


def _tree(root: Path, text: str) -> Path:
    root.mkdir(parents=True)
    (root / "retry.py").write_text(
        f'def backoff(attempt):\n    """{text}"""\n    return 2**attempt\n'
    )
    git_init(root)
    return root


def _memory_ids(text: str) -> dict[str, str]:
    """memory id -> project of each memory hit line of an MCP search answer."""
    return dict(re.findall(r"^(memory:\S+) \[([^\]]+)\]", text, re.M))


@pytest.mark.e2e
async def test_one_query_per_search_and_the_same_project_scoping_everywhere(
    stack: Runtime, tmp_path: Path
) -> None:
    alpha = _tree(tmp_path / "alpha", "Exponential retry delays.")
    beta = _tree(tmp_path / "beta", "Exponential retry delays, too.")
    for root in (alpha, beta):
        await index_tree(stack, root)
    settings = stack.settings
    async with client.connect(settings) as memoryd:
        ids = {p["name"]: p["id"] for p in await memoryd.projects()}
        mine = {}
        for name, root in (("alpha", alpha), ("beta", beta)):
            text = f"Decision: the {WORDS} in {name}."
            note = await memoryd.remember(text, "decision", cwd=root, project=ids[name])
            mine[name] = note["id"]

    # MCP, kind=all from alpha's folder: one query of the daemon (not the projects, four
    # searches and two session lookups it took), every kind kept to alpha.
    async with client.connect(settings) as memoryd:
        dbg = await memoryd.search(SearchRequest(WORDS, ("memory",)))
        print("DEBUG", dbg, mine)
    tools = mcp_server.Tools(settings, alpha)
    text, asked = await _asked(tools.search(WORDS, "all", None, None, None, 10, 8000))
    assert asked == Counter({"search": 1})
    assert isinstance(text, str)
    assert text.startswith(f"search {WORDS!r}: ") and f"— project {ids['alpha']}" in text
    assert _memory_ids(text) == {mine["alpha"]: ids["alpha"]}
    assert re.search(rf"^code:\S+ \[{ids['alpha']}\] retry.py:1-3 backoff$", text, re.M)
    assert f"[{ids['beta']}]" not in text

    # The same question of beta: from MCP by its name, and from the CLI, which refused
    # --project for memories before.
    text, asked = await _asked(tools.search(WORDS, "memory", "beta", None, None, 10, 8000))
    assert asked == Counter({"search": 1})
    assert isinstance(text, str) and _memory_ids(text) == {mine["beta"]: ids["beta"]}
    args = ("search", WORDS, "--kind", "memory", "--project", "beta", "--json")
    done = await asyncio.to_thread(cli, *args, "--data-dir", str(settings.data_dir))
    results = json.loads(done.stdout)["results"]
    assert [(f"memory:{r['id']}", r["project"]) for r in results] == [(mine["beta"], ids["beta"])]
    # Every project: both notes, each named with its session's project.
    done = await asyncio.to_thread(
        cli, "search", WORDS, "--kind", "memory", "--json", "--data-dir", str(settings.data_dir)
    )
    everywhere = {f"memory:{r['id']}": r["project"] for r in json.loads(done.stdout)["results"]}
    assert everywhere == {mine["alpha"]: ids["alpha"], mine["beta"]: ids["beta"]}

    # The prompt hook: memories, code and docs near the prompt in one search too.
    async with client.connect(settings) as memoryd:
        payload = {"prompt": f"how does the {WORDS} work?", "session_id": "s1", "cwd": str(beta)}
        state = hooks.State.load(settings, "claude-code", "s1", False)
        context = hooks.context_for(memoryd, "UserPromptSubmit", payload, state, 8000)
        (_head, keys), asked = await _asked(context)  # type: ignore[misc]
    assert asked["search"] == 1 and asked["projects"] == 1
    assert mine["beta"] in keys and mine["alpha"] not in keys
