"""The typed client API against a real stack: typed results, typed errors, one job registry."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd import channel, client, jobs
from memoryd.daemon.runtime import Runtime
from memoryd.errors import DaemonUnavailable, InvalidRequest, NotFound
from memoryd.results import SearchRequest, SearchResult
from tests.conftest import settings_for
from workers.registry import FUNCTIONS


def test_every_declared_job_has_exactly_one_function() -> None:
    assert set(FUNCTIONS) == set(jobs.ALL)
    assert len({spec.name for spec in jobs.ALL}) == len(jobs.ALL)


def test_importing_the_client_loads_neither_the_model_nor_the_database() -> None:
    """The MCP server and the hooks hold a client: they must start fast and stay small. The
    queue's client (arq, redis) loads only when work goes on the queue."""
    probe = (
        "import sys, memoryd.client, memoryd.results; "
        "print(sorted(m for m in ('fastembed', 'onnxruntime', 'surrealdb', 'arq', 'redis', "
        "'pydantic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.e2e
async def test_typed_results_and_errors_through_the_queue(
    arq_stack: Runtime, arq_tree: Path
) -> None:
    stack = arq_stack
    assert stack.redis is not None
    memoryd = client.Client(stack.redis, stack.settings)

    hits = (await memoryd.search(SearchRequest("parse a redis connection DSN url", limit=3))).hits
    assert all(isinstance(hit, SearchResult) for hit in hits)
    assert hits[0].path == "connections.py" and hits[0].kind == "code"

    with pytest.raises(NotFound, match="no session 'no-such-session'"):
        await memoryd.session("no-such-session")
    with pytest.raises(InvalidRequest, match="unknown kind 'nonsense'"):
        await memoryd.search(SearchRequest("x", ("nonsense",)))
    with pytest.raises(NotFound, match="no memory 'nope'"):
        await memoryd.pin("nope")

    history = await memoryd.history(str(arq_tree / "connections.py"))
    assert history["sessions"] == []
    assert history["file"]["path"] == "connections.py"
    assert any(chunk["name"] == "from_dsn" for chunk in history["chunks"])


@pytest.mark.e2e
async def test_the_daemons_channel_answers_as_the_queue_does(
    arq_stack: Runtime, arq_tree: Path
) -> None:
    """Queries over the daemon's unix socket: the same typed answers and errors as over the
    queue, without touching Redis; the socket is its owner's alone."""
    stack = arq_stack
    assert stack.redis is not None
    path = stack.settings.channel_socket
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    over_queue = client.Client(stack.redis, stack.settings)
    async with client.connect(stack.settings) as memoryd:
        request = SearchRequest("parse a redis connection DSN url", limit=5)
        assert await memoryd.search(request) == await over_queue.search(request)
        history = await memoryd.history(str(arq_tree / "connections.py"))
        assert history == await over_queue.history(str(arq_tree / "connections.py"))
        with pytest.raises(NotFound, match="no session 'no-such-session'"):
            await memoryd.session("no-such-session")
        with pytest.raises(InvalidRequest, match="unknown kind 'nonsense'"):
            await memoryd.search(SearchRequest("x", ("nonsense",)))
        assert memoryd._redis is None  # no query needed the queue
    with pytest.raises(InvalidRequest, match="no query 'drop_everything'"):
        await channel.ask(path, "drop_everything", (), timeout=10)
    with pytest.raises(InvalidRequest, match="no query 'index_files'"):
        await channel.ask(path, "index_files", (), timeout=10)  # work goes on the queue
    await stack.close()
    assert not path.exists()
    with pytest.raises(DaemonUnavailable):
        await channel.ask(path, "status", (), timeout=10)


async def test_an_agents_client_never_starts_a_daemon(data_dir: Path) -> None:
    settings = settings_for(data_dir)
    with pytest.raises(DaemonUnavailable, match="memoryd service install"):
        async with client.connect(settings):
            pass
    assert not settings.redis_socket.exists()  # nothing was started on its behalf
