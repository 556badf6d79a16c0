"""Hybrid search: vector k-NN + BM25, fused with reciprocal rank fusion, over what is valid now."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memoryd.embedding import Embedder
from memoryd.errors import InvalidRequest, NotFound
from memoryd.results import SearchResult
from memoryd.searchindex import keywords
from memoryd.store import Store, key_of


@dataclass(frozen=True, slots=True)
class Kind:
    table: str
    text_field: str
    fields: tuple[str, ...]
    valid_now: bool


KINDS = {
    "code": Kind(
        "code_chunk",
        "content",
        ("path", "start_line", "end_line", "name", "parent_name", "chunk_type", "project"),
        True,
    ),
    "memory": Kind("memory", "content", ("session", "seq", "kind", "content", "tool"), True),
    "goal": Kind("goal", "intent", ("session", "intent"), False),
}
# Characters of a memory or goal shown in a result.
SNIPPET_CHARS = 160


async def resolve_project(store: Store, given: str) -> str:
    """Accept a project's id, its name or its root path."""
    projects = await store.projects()
    for field in ("id", "name", "root"):
        matches = [p["id"] for p in projects if p.get(field) == given]
        if len(matches) == 1:
            return matches[0]
    raise NotFound(
        f"unknown project {given!r}; known: {', '.join(p['id'] for p in projects) or 'none'}"
    )


async def search(
    store: Store,
    embedder: Embedder,
    query: str,
    *,
    limit: int = 10,
    project: str | None = None,
    kind: str = "code",
    as_of: datetime | None = None,
) -> list[SearchResult]:
    """Hybrid search over what is valid now, or over what was valid `as_of` a past time."""
    spec = KINDS.get(kind)
    if spec is None:
        raise InvalidRequest(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    [vector] = await asyncio.to_thread(embedder.embed, [query])
    # Only vectors of the configured model are compared: never two models in one k-NN.
    filters: dict[str, Any] = (
        {"valid_at": as_of} if as_of and spec.valid_now else {"valid_now": spec.valid_now}
    )
    if project is not None:
        if kind != "code":
            raise InvalidRequest("--project applies to code search")
        filters["project"] = await resolve_project(store, project)
    hits = await store.hybrid_search(
        spec.table,
        spec.text_field,
        vector,
        keywords(query),
        limit,
        filters,
        spec.fields,
        embedder.model,
    )
    if kind == "memory":
        await store.bump_access("memory", [hit.id for hit in hits], datetime.now(UTC))
    return [_result(kind, hit.id, round(hit.score, 6), hit.fields) for hit in hits]


def _result(kind: str, id_: str, score: float, f: dict[str, Any]) -> SearchResult:
    if kind == "code":
        name, parent = f.get("name"), f.get("parent_name")
        return SearchResult(
            kind,
            id_,
            score,
            project=key_of(f["project"]) if f.get("project") else None,
            path=f.get("path"),
            start_line=f.get("start_line"),
            end_line=f.get("end_line"),
            name=f"{parent}.{name}" if name and parent else name or parent,
        )
    text = f.get("content") if kind == "memory" else f.get("intent")
    snippet = " ".join((text or "").split())[:SNIPPET_CHARS]
    return SearchResult(
        kind,
        id_,
        score,
        session=key_of(f["session"]) if f.get("session") else None,
        seq=f.get("seq"),
        name=f.get("kind") or "goal",
        text=snippet,
    )
