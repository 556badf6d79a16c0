"""MCP tool calls and hooks, counted where they run and exported by the daemon's endpoint."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from memoryd.daemon import agent_metrics, metrics
from memoryd.daemon.runtime import Runtime


def exported(name: str, **labels: str) -> float:
    """One sample of what the daemon's endpoint serves (its registry, rendered as a scrape)."""
    text = generate_latest(metrics.REGISTRY).decode()
    [found] = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.labels == labels
    ]
    return float(found)


def test_importing_it_loads_nothing_heavy() -> None:
    probe = (
        "import sys, memoryd.daemon.agent_metrics; print(sorted(m for m in ('prometheus_client', "
        "'arq', 'redis', 'fastembed', 'surrealdb', 'pydantic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_calls_are_counted_timed_and_exported(
    stack: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    redis = stack.redis
    assert redis is not None
    caplog.set_level(logging.INFO, logger=agent_metrics.__name__)
    async with agent_metrics.observed(redis, "mcp", "search"):
        pass
    async with agent_metrics.observed(redis, "mcp", "search"):
        pass
    with pytest.raises(KeyError):
        async with agent_metrics.observed(redis, "hook", "session-start"):
            raise KeyError("boom")
    await agent_metrics.record(redis, "hook", "prompt", 0.3, True)

    stats = {(s.surface, s.name): s for s in await agent_metrics.read(redis)}
    assert sorted(stats) == [("hook", "prompt"), ("hook", "session-start"), ("mcp", "search")]
    search, prompt = stats["mcp", "search"], stats["hook", "prompt"]
    assert (search.ok, search.error, stats["hook", "session-start"].error) == (2, 0, 1)
    # 0.3 s: in every bucket from 0.5 s up, in none below.
    assert prompt.buckets == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1] and prompt.seconds == 0.3
    lines = [r.getMessage() for r in caplog.records if r.name == agent_metrics.__name__]
    assert lines[2].startswith("hook session-start: error: KeyError in ")
    assert lines[3] == "hook prompt: ok in 300 ms"

    await metrics.Sampler(stack.redis, queues=[]).sample_once()
    total = "memoryd_agent_calls_total"
    assert exported(total, surface="mcp", call="search", outcome="ok") == 2
    assert exported(total, surface="hook", call="session-start", outcome="error") == 1
    seconds = "memoryd_agent_call_seconds"
    assert exported(f"{seconds}_count", surface="hook", call="prompt") == 1
    assert exported(f"{seconds}_sum", surface="hook", call="prompt") == 0.3
    assert exported(f"{seconds}_bucket", surface="hook", call="prompt", le="0.25") == 0
    assert exported(f"{seconds}_bucket", surface="hook", call="prompt", le="0.5") == 1
