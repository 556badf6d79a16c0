"""`memoryd export` and `memoryd import`: a real transcript through the real daemon path into a
second data dir, which then holds the same graph."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from memoryd.client import Client
from memoryd.daemon.runtime import Runtime
from memoryd.embedding import Embedder
from tests.conftest import cli, git_init, status_of
from tests.fixtures import RENDERER, S37

# Each test here runs a whole scenario through a daemon or the full stack: not the quick loop.
pytestmark = pytest.mark.e2e

TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJ012345"


def test_export_import_gives_an_equal_graph(
    two_dirs: tuple[Path, Path], tmp_path: Path, embedder: Embedder
) -> None:
    source, target = two_dirs
    cli("ingest", str(S37), "--data-dir", str(source))
    exported = cli("export", "--data-dir", str(source)).stdout
    lines = [json.loads(line) for line in exported.splitlines()]
    tables = {line["table"] for line in lines}
    assert {"session", "memory", "entity", "reads", "modifies", "has_goal"} <= tables
    assert "schema_version" not in tables
    assert sum(line["table"] == "memory" for line in lines) == 282
    assert not any("embedding" in line["row"] for line in lines)
    # An export of an earlier memoryd also held CONTAINS and NEXT edges: an import skips them.
    key = next(line["row"]["id"] for line in lines if line["table"] == "memory")
    session, memory = f"session:{S37.stem}", f"memory:{key}"
    retired = [
        {"table": "contains", "row": {"id": key, "in": session, "out": memory}},
        {"table": "next", "row": {"id": key, "in": memory, "out": memory}},
    ]
    dump = tmp_path / "graph.jsonl"
    dump.write_text(exported + "".join(json.dumps(line) + "\n" for line in retired))

    imported = json.loads(cli("import", str(dump), "--data-dir", str(target), "--json").stdout)
    per_table: dict[str, int] = {"contains": 0, "next": 0}
    for line in lines:
        per_table[line["table"]] = per_table.get(line["table"], 0) + 1
    assert imported == per_table

    # The same rows, field for field, in the same order: references and times restored.
    assert cli("export", "--data-dir", str(target)).stdout == exported
    found = cli("search", "_get_enhanced_session_navigation", "--kind", "memory", "--json",
                "--data-dir", str(target)).stdout  # fmt: skip
    assert S37.stem in {r["session"] for r in json.loads(found)["results"]}
    history = [cli("history", RENDERER, "--data-dir", str(d), "--json").stdout for d in two_dirs]
    assert json.loads(history[0])["sessions"] and history[0] == history[1]
    statuses = [status_of(d, embedder) for d in two_dirs]  # in this process: not about status
    assert statuses[0]["counts"] == statuses[1]["counts"]
    # Imported rows wait for their vectors: every row that had one, and only those.
    had_vector = {
        t: sum(1 for line in lines if line["table"] == t and line["row"].get("embedding_model"))
        for t in statuses[1]["waiting_for_reembed"]
    }
    assert statuses[0]["waiting_for_reembed"] == dict.fromkeys(had_vector, 0)
    assert statuses[1]["waiting_for_reembed"] == had_vector and had_vector["memory"] > 0


def test_export_of_one_project(two_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    data = two_dirs[0]
    for name in ("alpha", "beta"):
        repo = tmp_path / name
        repo.mkdir()
        (repo / f"{name}.py").write_text(f"def {name}_function():\n    return 1\n")
        (repo / "notes.md").write_text(f"# {name}\n\nAbout {name}.\n")
        git_init(repo)
        cli("index", str(repo), "--data-dir", str(data))
    exported = cli("export", "--project", "alpha", "--data-dir", str(data)).stdout
    lines = [json.loads(line) for line in exported.splitlines()]
    per_table: dict[str, int] = {}
    for line in lines:
        per_table[line["table"]] = per_table.get(line["table"], 0) + 1
    assert "beta" not in exported and "alpha_function" in exported
    assert per_table["project"] == 1 and per_table["file_state"] == 2
    [project] = [line["row"] for line in lines if line["table"] == "project"]
    owned = [line["row"] for line in lines if line["table"] in ("code_chunk", "file_state")]
    assert per_table["code_chunk"] >= 2
    assert all(row["project"] == f"project:{project['id']}" for row in owned)
    assert "transcript_cursor" not in per_table and "maintenance_run" not in per_table
    dump = tmp_path / "alpha.jsonl"
    dump.write_text(exported)
    cli("import", str(dump), "--data-dir", str(two_dirs[1]))
    again = cli("export", "--project", "alpha", "--data-dir", str(two_dirs[1])).stdout
    assert again == exported


async def test_export_and_import_pass_through_the_redactor(stack: Runtime, tmp_path: Path) -> None:
    """A secret an earlier memoryd stored raw never leaves in an export, and one in a file
    being imported never enters the database."""
    assert stack.redis is not None and stack.store is not None
    client = Client(stack.redis, stack.settings)

    def note(key: str, content: str) -> dict[str, object]:
        at = "2026-01-02T03:04:05Z"
        return {"id": key, "session": "session:s1", "kind": "note", "content": content,
                "seq": 0, "ingestion_time": at, "valid_from": at}  # fmt: skip

    # A row as a memoryd from before redaction wrote it, put in past the worker's jobs.
    await stack.store.import_rows("memory", [note("old", f"deploy with {TOKEN} today")])
    out = io.BytesIO()
    assert await client.export(out) == 1
    assert TOKEN.encode() not in out.getvalue()
    [line] = [json.loads(raw) for raw in out.getvalue().splitlines()]
    assert (line["table"], line["row"]["id"], line["row"]["session"]) == (
        "memory",
        "old",
        "session:s1",
    )
    assert line["row"]["content"] == "deploy with [REDACTED:github-token] today"

    dump = tmp_path / "old.jsonl"
    dump.write_text(json.dumps({"table": "memory", "row": note("new", f"push {TOKEN}")}) + "\n")
    assert await client.import_file(dump) == {"memory": 1}
    stored = {r["id"]: r["content"] for r in await stack.store.rows_after("memory", None, 10)}
    assert stored == {"new": "push [REDACTED:github-token]", "old": f"deploy with {TOKEN} today"}
