"""End to end: a real tree through the real queue into embedded SurrealDB, searched back."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd import projects
from memoryd.daemon.runtime import Runtime
from memoryd.store import key_of
from tests.conftest import index_tree, queued_search

pytestmark = pytest.mark.e2e


def _def_line(path: Path, pattern: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if re.search(pattern, line):
            return number
    raise AssertionError(f"{pattern!r} not in {path}")


async def _chunk_ids(rt: Runtime) -> set[str]:
    assert rt.store is not None
    return {key_of(row["id"]) for row in (await rt.store.dump())["code_chunk"]}


async def test_index_then_search_finds_the_one_function(stack: Runtime, arq_tree: Path) -> None:
    expected = sorted(
        p.relative_to(arq_tree).as_posix()
        for p in arq_tree.rglob("*")
        if p.is_file() and not {".git", "ignored_dir"} & set(p.parts) and p.suffix != ".tmp"
    )
    assert "py.typed" in expected and ".gitignore" in expected
    totals = await index_tree(stack, arq_tree)
    # The gitignored directory, the *.tmp file and .git/ are never walked.
    assert totals["files"] == len(expected)
    assert stack.store is not None
    indexed = await stack.store.indexed_paths(projects.resolve(arq_tree).id)
    assert indexed == expected
    assert totals["chunks"] > len(expected)
    assert totals["embedded"] <= totals["chunks"]

    assert stack.redis is not None
    hits = await queued_search(stack.redis, "parse a redis connection DSN url", 3)
    from_dsn = _def_line(arq_tree / "connections.py", r"def from_dsn")
    assert any(
        h["path"] == "connections.py" and h["start_line"] <= from_dsn <= h["end_line"] for h in hits
    ), [(h["path"], h["start_line"], h["end_line"], h["name"]) for h in hits]

    hits = await queued_search(
        stack.redis, "log redis server version, memory use and client count", 3
    )
    log_info = _def_line(arq_tree / "connections.py", r"def log_redis_info")
    assert any(
        h["path"] == "connections.py" and h["start_line"] <= log_info <= h["end_line"] for h in hits
    ), [(h["path"], h["start_line"], h["end_line"], h["name"]) for h in hits]

    # Nothing from the gitignored directory reached the index.
    hidden = await queued_search(stack.redis, "hidden_function", 10)
    assert all("ignored_dir" not in h["path"] for h in hidden)


async def test_indexing_twice_leaves_the_same_rows(arq_stack: Runtime, arq_tree: Path) -> None:
    stack = arq_stack  # the first index: `arq_indexed`'s
    first = await _chunk_ids(stack)
    assert stack.store is not None
    counts_first = await stack.store.counts()
    again = await index_tree(stack, arq_tree)
    assert again["indexed"] == 0
    assert again["unchanged"] == again["files"]
    assert again["embedded"] == 0
    assert await _chunk_ids(stack) == first
    assert await stack.store.counts() == counts_first


async def test_changed_and_deleted_files_are_retired(
    stack: Runtime, arq_tree: Path, tmp_path: Path
) -> None:
    import shutil

    root = tmp_path / "tree"
    shutil.copytree(arq_tree, root)
    await index_tree(stack, root)
    assert stack.store is not None and stack.redis is not None
    before = await stack.store.valid_chunk_count()
    before_change = datetime.now(UTC).isoformat()
    (root / "version.py").unlink()
    (root / "constants.py").write_text("def brand_new_marker_function():\n    return 42\n")
    totals = await index_tree(stack, root)
    assert totals["indexed"] == 1 and totals["removed"] == 1
    # Every old chunk of the two files is retired, the one new chunk is valid.
    assert await stack.store.valid_chunk_count() == before - totals["retired"] + 1
    hits = await queued_search(stack.redis, "brand_new_marker_function", 1)
    assert hits[0]["path"] == "constants.py"
    assert hits[0]["start_line"] == 1 and hits[0]["end_line"] == 2
    project = projects.resolve(root)
    assert "version.py" not in await stack.store.indexed_paths(project.id)
    # The deleted file is gone from search now, and still there as of before the change.
    now = await queued_search(stack.redis, "package VERSION string", 10)
    assert "version.py" not in {h["path"] for h in now}
    then = await queued_search(stack.redis, "package VERSION string", 10, "code", before_change)
    assert "version.py" in {h["path"] for h in then}
    assert "brand_new_marker_function" not in {h["name"] for h in then}


async def test_a_renamed_class_moves_its_unchanged_methods_to_the_new_symbol(
    stack: Runtime, tmp_path: Path
) -> None:
    """A method chunked on its own keeps its text (so its chunk) when its class is renamed;
    its symbol is another one: the chunk's link moves to it (a link's ends cannot change in
    place, and trying refused the whole file: its index stayed the old one)."""
    body = "\n".join(f"        v{i} = x + {i}" for i in range(40))
    method = "\n    def {name}(self, x):\n" + body + "\n        return x\n"
    text = 'class Alpha:\n    """A thing."""\n' + method.format(name="first")
    text += method.format(name="second")
    root = tmp_path / "tree"
    root.mkdir()
    (root / "shapes.py").write_text(text)
    await index_tree(stack, root)
    (root / "shapes.py").write_text(text.replace("Alpha", "Beta"))
    assert (await index_tree(stack, root))["indexed"] == 1
    assert stack.store is not None
    pid = projects.resolve(root).id
    links = await stack.store.code_chunk_links(pid, "shapes.py")
    assert [(c["name"], c["parent_name"]) for c in links] == [("first", "Beta"), ("second", "Beta")]
    for chunk in links:
        assert {(d["kind"], d["key"]) for d in chunk["defined_in"]} == {
            ("file", f"{pid}:shapes.py"),
            ("symbol", f"{pid}:shapes.py#Beta.{chunk['name']}"),
        }
    assert await stack.store.live_symbols(pid) == {
        f"{pid}:shapes.py#Beta.first",
        f"{pid}:shapes.py#Beta.second",
    }
