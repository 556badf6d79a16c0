"""Which rows are which search kind (the kinds are declared in memoryd.vocabulary).

A code chunk is `docs` when its file is prose (Markdown, reStructuredText, plain text, a
changelog or readme), else `code`. Within a kind each row has a role whose prior scales its
rank, so tests, config and prose do not outrank the source for a code query but are still found.
"""

from __future__ import annotations

import os

DOC_EXTENSIONS = frozenset(
    "md markdown mdown mkd mdx rst txt text adoc asciidoc org rdoc textile pod".split()
)
# Prose files by name, whatever their extension (CHANGES, HISTORY.md, NEWS.rst...).
DOC_STEMS = frozenset(
    "changelog changes history news readme license licence copying authors contributors "
    "contributing notice releasenotes release-notes release_notes code_of_conduct security "
    "todo faq install upgrading migration".split()
)
_DOC_DIRS = frozenset({"doc", "docs", "documentation", "changelog.d", "changes", "newsfragments"})
_CONFIG_LANGUAGES = frozenset(
    "json yaml toml ini xml hcl terraform make cmake dockerfile nix starlark".split()
)
_TEST_DIRS = frozenset({"test", "tests", "testing", "spec", "specs", "__tests__", "testdata"})

# Multipliers of a row's fused rank score, by role (see `role`). Tuned on task-style queries
# (bench/task_queries.py): at 0.8 a test file held a fifth of the top 5 files.
PRIORS: dict[str, float] = {
    "source": 1.0,
    "config": 0.85,
    "test": 0.7,
    "docs": 0.65,
    "memory": 1.0,
    "goal": 1.0,
}


def is_doc_path(path: str, language: str | None = None) -> bool:
    """Prose: by extension, by a well-known name, or any file of no code language under a
    docs directory."""
    parts = path.replace("\\", "/").lower().split("/")
    base = parts[-1]
    stem, _, ext = base.partition(".")
    if ext.rpartition(".")[2] in DOC_EXTENSIONS or stem in DOC_STEMS:
        return True
    return language in (None, "markdown", "rst") and any(p in _DOC_DIRS for p in parts[:-1])


def is_test_path(path: str) -> bool:
    parts = path.replace("\\", "/").lower().split("/")
    base = parts[-1]
    stem = base.partition(".")[0]
    return (
        any(p in _TEST_DIRS for p in parts[:-1])
        or stem.startswith("test_")
        or stem.endswith(("_test", "_tests", "_spec", "test"))
        or ".test." in base
        or ".spec." in base
        or stem == "conftest"
    )


def chunk_kind(path: str, language: str | None) -> str:
    return "docs" if is_doc_path(path, language) else "code"


def role(kind: str, path: str | None, language: str | None) -> str:
    if kind != "code":
        return kind
    assert path is not None
    if is_test_path(path):
        return "test"
    if language in _CONFIG_LANGUAGES or language is None:
        return "config"
    return "source"


def file_name(path: str) -> str:
    return os.path.basename(path.replace("\\", "/")).lower()
