"""Hybrid search: vector k-NN + BM25, fused with reciprocal rank fusion, over what is valid now."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

from memoryd.embedding import Embedder
from memoryd.errors import MemorydError
from memoryd.store import Store, rid

KINDS = ("code",)
_CODE_FIELDS = (
    "path",
    "start_line",
    "end_line",
    "name",
    "parent_name",
    "chunk_type",
    "language",
    "project",
)


@dataclass(frozen=True, slots=True)
class Result:
    kind: str
    id: str
    score: float
    project: str | None
    path: str | None
    start_line: int | None
    end_line: int | None
    name: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """`path:start-end  score  name`, the CLI's plain output."""
        where = f"{self.path}:{self.start_line}-{self.end_line}"
        return f"{where}  {self.score:.4f}  {self.name or '-'}"


async def search(
    store: Store,
    embedder: Embedder,
    query: str,
    *,
    limit: int = 10,
    project: str | None = None,
    kind: str = "code",
) -> list[Result]:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    [vector] = await asyncio.to_thread(embedder.embed, [query])
    filters: dict[str, Any] = {"valid_now": True, "embedding_model": embedder.model}
    if project is not None:
        filters["project"] = rid("project", await resolve_project(store, project))
    hits = await store.hybrid_search(
        "code_chunk", "content", vector, query, limit, filters, _CODE_FIELDS
    )
    return [
        Result(
            kind="code",
            id=hit.id,
            score=round(hit.score, 6),
            project=str(hit.fields["project"].id) if hit.fields.get("project") else None,
            path=hit.fields.get("path"),
            start_line=hit.fields.get("start_line"),
            end_line=hit.fields.get("end_line"),
            name=_display_name(hit.fields),
        )
        for hit in hits
    ]


async def resolve_project(store: Store, given: str) -> str:
    """Accept a project's id, its name or its root path."""
    projects = await store.projects()
    for field in ("id", "name", "root"):
        matches = [p["id"] for p in projects if p.get(field) == given]
        if len(matches) == 1:
            return matches[0]
    raise MemorydError(
        f"unknown project {given!r}; known: {', '.join(p['id'] for p in projects) or 'none'}"
    )


def _display_name(fields: dict[str, Any]) -> str | None:
    name, parent = fields.get("name"), fields.get("parent_name")
    if name and parent:
        return f"{parent}.{name}"
    return name or parent
