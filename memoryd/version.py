"""memoryd's version, as installed (pyproject.toml's `version`)."""

from __future__ import annotations

import importlib.metadata


def version() -> str:
    try:
        return importlib.metadata.version("memoryd")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"
