"""Every bench imports: a rename elsewhere must not leave a bench broken until someone runs it
(bench/maintenance.py imported a name workers.ingest no longer had)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHES = sorted(p.stem for p in (Path(__file__).parent.parent / "bench").glob("*.py"))


def test_the_benches_are_found() -> None:
    assert {"search", "maintenance", "searchable", "task_queries"} <= set(BENCHES)


@pytest.mark.parametrize("name", [b for b in BENCHES if b != "__init__"])
def test_a_bench_imports(name: str) -> None:
    assert importlib.import_module(f"bench.{name}").__name__ == f"bench.{name}"
