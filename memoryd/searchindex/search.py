"""Hybrid search: BM25 and vector k-NN over the derived search indexes (memoryd.searchindex),
fused by reciprocal rank, over what is valid now or was valid at a past time.

Hits come in the fused order, a memory whose code changed since (memoryd/anchors.py) below a
current one of the same rank score; each hit's `score` is its relevance (SearchIndex.hybrid):
the cosine similarity of query and row in [0, 1], 1.0 for a file the query names, the same
scale for every query and kind, so a floor means the same thing everywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from memoryd.agent_shared import Scope, resolve_scope
from memoryd.anchors import STALE_FACTOR, anchor_states, anchor_text, is_stale
from memoryd.embedding import Embedder
from memoryd.errors import InvalidRequest, NotFound
from memoryd.results import FILE_KINDS, SearchAnswer, SearchRequest, SearchResult
from memoryd.searchindex import Filters, Hit, SearchIndex, micros
from memoryd.store import Store

# Hits ranked per hit kept when memories and goals are kept to one project (a memory's project
# is its session's, which the index does not hold): enough that the filter still leaves
# `limit`.
OVERSAMPLE = 3
# What a caller's own rules leave out of hits (workers/queries.py: the config's exclude and
# include), and how many hits are ranked per hit kept for it.
Narrow = Callable[[list[SearchResult]], Awaitable[list[SearchResult]]]
NARROW_OVERSAMPLE = 2


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
    request: SearchRequest,
    narrow: Narrow | None = None,
) -> SearchAnswer:
    """Hybrid search over what is valid now, or over what was valid `as_of` a past time: each
    kind of the request ranked on its own (one embedding of the query for all), kept to its
    project, less what `narrow` leaves out, cut to its limit."""
    if not request.query.strip():
        raise InvalidRequest("an empty query finds nothing")
    kinds = request.searched_kinds()
    scope = await _scope(store, request)
    filters = Filters(
        path=request.path,
        language=request.language,
        as_of=micros(request.as_of) if request.as_of else None,
    )
    vector = await asyncio.to_thread(embedder.embed_query, request.query)
    found: list[SearchResult] = []
    for kind in kinds:
        limit = request.limit_of(kind)
        by_session = kind not in FILE_KINDS
        asked = limit * (OVERSAMPLE if by_session and scope.project else 1)
        asked *= NARROW_OVERSAMPLE if narrow else 1
        where = replace(filters, kinds=(kind,), project=None if by_session else scope.project)
        hits = await asyncio.to_thread(
            index.hybrid, request.query, vector, embedder.model, where, asked
        )
        results = await _ranked(store, hits) if kind == "memory" else [_result(h) for h in hits]
        if by_session:
            results = await _in_project(store, results, scope.project)
        if narrow:
            results = await narrow(results)
        found += results[:limit]
    if memories := [r.id for r in found if r.kind == "memory"]:
        store.later(store.bump_access("memory", memories, datetime.now(UTC)), "memory reads")
    return SearchAnswer(tuple(found), scope.project, scope.note)


async def _scope(store: Store, request: SearchRequest) -> Scope:
    """The project searched: the one named, else the watched one holding `cwd` (when given),
    else every project."""
    if request.project is None and request.cwd is None:
        return Scope(None)
    return resolve_scope(await store.projects(), Path(request.cwd or "."), request.project)


async def _ranked(store: Store, hits: Sequence[Hit]) -> list[SearchResult]:
    """Memories with how their code stands, one whose code changed since below a current one
    of the same score."""
    states = await anchor_states(store, [hit.id for hit in hits])
    ranked = sorted(
        hits,
        key=lambda hit: -hit.score * (STALE_FACTOR if is_stale(states.get(hit.id, [])) else 1.0),
    )
    return [_result(hit, anchor_text(states.get(hit.id, [])) or None) for hit in ranked]


async def _in_project(
    store: Store, results: list[SearchResult], project: str | None
) -> list[SearchResult]:
    """Memories and goals with their session's project, those of another project left out
    (when `project` is given)."""
    projects = await store.session_projects(sorted({r.session for r in results if r.session}))
    placed = [replace(r, project=projects.get(r.session or "")) for r in results]
    return [r for r in placed if project is None or r.project == project]


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
