"""Deterministic ids and canonical keys: every write is an upsert, so a job can run twice with the
same result, and the code indexer and the transcript ingester name one file the same way."""

from __future__ import annotations

from blake3 import blake3


def stable_id(*parts: str) -> str:
    """A 128-bit hex id from the given parts (joined with a separator no part contains): the
    first 16 bytes of the digest (BLAKE3's shorter output is a prefix of the longer, so these
    are the ids 32 bytes cut to 32 hex digits gave; half a million ids index kafka's graph)."""
    return blake3("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest(16).hex()


def entity_id(kind: str, key: str) -> str:
    """The record key of the entity with this canonical key: the code indexer and the
    transcript ingester both derive it, so the file an agent edited is the file indexed."""
    return stable_id(kind, key)


def file_key(project_id: str, rel_path: str) -> str:
    """Canonical key of a file inside a watched project: the join between the code index and
    what agents did (both write the entity of this key)."""
    return f"{project_id}:{rel_path}"


def split_file_key(key: str) -> tuple[str, str]:
    """(project id, relative path) of a key made by :func:`file_key`."""
    project_id, _, rel_path = key.partition(":")
    return project_id, rel_path


def file_entity_id(project_id: str, rel_path: str) -> str:
    return entity_id("file", file_key(project_id, rel_path))


def symbol_key(project_id: str, rel_path: str, name: str, parent: str | None) -> str:
    """`<project>:<path>#<Parent>.<name>` or `<project>:<path>#<name>`."""
    qualified = f"{parent}.{name}" if parent else name
    return f"{file_key(project_id, rel_path)}#{qualified}"


def symbol_entity_id(key: str) -> str:
    return entity_id("symbol", key)


def file_state_id(project_id: str, rel_path: str) -> str:
    return stable_id(project_id, rel_path)


def module_key(language: str, module: str) -> str:
    """An external module a file imports (`python:redis`): one entity for every project."""
    return f"{language}:{module}"


def module_entity_id(key: str) -> str:
    return entity_id("module", key)
