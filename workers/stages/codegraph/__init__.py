"""The code as a graph: symbols, imports, calls and base classes from the syntax trees
(extract.py, pure), resolved against the project's files (resolve.py), and the files that change
together from git history (cochange.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tree_sitter import Tree

from workers.stages.chunking import language_for_path
from workers.stages.codegraph.extract import extract
from workers.stages.codegraph.resolve import GraphRows, resolve

__all__ = ["DiskTree", "GraphRows", "file_graph", "file_graph_of"]


class DiskTree:
    """The project's files as they are on disk now: what imports resolve against."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Each import tries several paths, and a batch's files import the same modules: one
        # stat per path and batch (a third of the pure stage's time on ansible went to stat).
        self._is_file: dict[str, bool] = {}

    def is_file(self, rel: str) -> bool:
        found = self._is_file.get(rel)
        if found is None:
            found = self._is_file[rel] = os.path.isfile(os.path.join(self.root, rel))
        return found

    def files_in(self, rel_dir: str, suffix: str) -> list[str]:
        try:
            names = sorted(os.listdir(self.root / rel_dir))
        except OSError:  # not a directory of the project
            return []
        base = f"{rel_dir}/" if rel_dir else ""
        return [
            base + n for n in names if n.endswith(suffix) and (self.root / rel_dir / n).is_file()
        ]


def file_graph(
    project_id: str,
    root: Path,
    rel: str,
    text: str,
    language: str | None,
    tree: DiskTree | None = None,
    parsed: Tree | None = None,
) -> GraphRows:
    """One file's graph rows; a language without an extractor gives none (but still replaces
    what an earlier version of the file had, should its name have changed language). `tree`:
    the project's files as a batch shares them; `parsed`: the text's syntax tree when the caller
    has it."""
    facts = extract(text, language, parsed)
    if facts is None:
        return GraphRows(rel)
    return resolve(project_id, rel, facts, tree or DiskTree(root))


def file_graph_of(project_id: str, root: Path, paths: list[str]) -> list[GraphRows]:
    """The graph rows of files as they are on disk (those gone or unreadable give none: the
    next reconcile retires or skips them)."""
    found = []
    tree = DiskTree(root)
    for rel in paths:
        language = language_for_path(rel)
        try:
            text = (root / rel).read_text("utf-8", "replace") if language else None
        except OSError:
            continue
        found.append(file_graph(project_id, root, rel, text or "", language, tree))
    return found
