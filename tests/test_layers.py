"""The layers run one way: memoryd/ never imports workers/ (workers/ builds on memoryd/); what
memoryd runs of workers/ it names by dotted path, and every such name loads."""

from __future__ import annotations

import ast
from pathlib import Path

from memoryd.daemon import runtime
from memoryd.database import migrate
from memoryd.dotted import resolve

REPO = Path(__file__).resolve().parent.parent


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_memoryd_imports_nothing_of_workers() -> None:
    found = {
        str(path.relative_to(REPO)): sorted(
            n for n in _imported(path) if n.split(".")[0] == "workers"
        )
        for path in sorted((REPO / "memoryd").rglob("*.py"))
    }
    assert {path: names for path, names in found.items() if names} == {}


def test_every_dotted_name_memoryd_runs_loads() -> None:
    table = resolve(runtime.JOB_TABLE)
    assert all(
        callable(getattr(table, name)) for name in ("job_context", "close_context", "build_workers")
    )
    assert callable(resolve(migrate.REDACT))
    steps = [
        step.run.path for step in migrate.DATA_STEPS if isinstance(step.run, migrate.WorkerStep)
    ]
    assert [path.rpartition(".")[2] for path in steps] == [
        "scrub_secrets",
        "rederive_edges",
        "rederive_edges_2",
        "resolve_errors",
        "backfill_code_graph",
    ]
    assert all(callable(resolve(path)) for path in steps)
