"""Hybrid search: BM25 and vector k-NN over the derived search indexes (memoryd.searchindex),
fused by reciprocal rank, over what is valid now or was valid at a past time.

Hits come in the fused order, a memory whose code changed since (memoryd/anchors.py) below a
current one of the same rank score; each hit's `score` is its relevance (SearchIndex.hybrid):
the cosine similarity of query and row in [0, 1], 1.0 for a file the query names, the same
scale for every query and kind, so a floor means the same thing everywhere."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from memoryd.anchors import STALE_FACTOR, anchor_states, anchor_text, is_stale
from memoryd.embedding import Embedder
from memoryd.errors import InvalidRequest, NotFound
from memoryd.results import SearchResult
from memoryd.searchindex import Filters, Hit, SearchIndex, micros
from memoryd.store import Store
from memoryd.vocabulary import SEARCH_KINDS_BY_NAME

# Kinds whose rows belong to a project (code chunks); the others are found by session.
_PROJECT_KINDS = frozenset(k.name for k in SEARCH_KINDS_BY_NAME.values() if k.table == "code_chunk")


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
    index: SearchIndex,
    query: str,
    *,
    limit: int = 10,
    project: str | None = None,
    kind: str = "code",
    as_of: datetime | None = None,
    path: str | None = None,
    language: str | None = None,
) -> list[SearchResult]:
    """Hybrid search over what is valid now, or over what was valid `as_of` a past time.
    `path` is a glob over paths within their project (`*` stays in a directory, `**` does not;
    without a `/` it matches the file name anywhere)."""
    if kind not in SEARCH_KINDS_BY_NAME:
        raise InvalidRequest(
            f"unknown kind {kind!r}; choose from {', '.join(SEARCH_KINDS_BY_NAME)}"
        )
    if kind not in _PROJECT_KINDS and (project, path, language) != (None, None, None):
        raise InvalidRequest("--project, --path and --language apply to code and docs search")
    filters = Filters(
        kinds=(kind,),
        project=await resolve_project(store, project) if project is not None else None,
        path=path,
        language=language,
        as_of=micros(as_of) if as_of else None,
    )
    vector = await asyncio.to_thread(embedder.embed_query, query)
    hits = await asyncio.to_thread(index.hybrid, query, vector, embedder.model, filters, limit)
    if kind != "memory":
        return [_result(hit) for hit in hits]
    keys = [hit.id for hit in hits]
    store.later(store.bump_access("memory", keys, datetime.now(UTC)), "memory reads")
    states = await anchor_states(store, keys)
    ranked = sorted(
        hits,
        key=lambda hit: -hit.score * (STALE_FACTOR if is_stale(states.get(hit.id, [])) else 1.0),
    )
    return [_result(hit, anchor_text(states.get(hit.id, [])) or None) for hit in ranked]


def _result(hit: Hit, anchor: str | None = None) -> SearchResult:
    f = hit.fields
    if hit.table == "code_chunk":
        name, parent = hit.name, hit.parent_name
        return SearchResult(
            hit.kind,
            hit.id,
            hit.relevance,
            project=hit.project,
            path=hit.path,
            start_line=f.get("start_line"),
            end_line=f.get("end_line"),
            name=f"{parent}.{name}" if name and parent else name or parent,
        )
    return SearchResult(
        hit.kind,
        hit.id,
        hit.relevance,
        session=f.get("session"),
        seq=f.get("seq"),
        name=f.get("kind") or "goal",
        text=f.get("snippet"),
        anchor=anchor,
    )
