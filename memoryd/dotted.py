"""Code named by a dotted path and loaded where it is used, arq's way of finding its worker
settings: how memoryd runs what workers/ declares (the job table, the migrations that re-run
a worker's stage) without importing workers/, which imports memoryd."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(path: str) -> Any:
    """The module `path` names, or the attribute its last part names in the module before it."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name != path:
            raise  # the module exists and an import inside it failed
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)
