"""Deterministic ids: every write is an upsert, so a job can run twice with the same result."""

from __future__ import annotations

from blake3 import blake3


def stable_id(*parts: str) -> str:
    """A 128-bit hex id from the given parts (joined with a separator no part contains)."""
    return blake3("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def entity_id(kind: str, key: str) -> str:
    """The record key of the entity with this canonical key: the code indexer and the
    transcript ingester both derive it, so the file an agent edited is the file indexed."""
    return stable_id(kind, key)
