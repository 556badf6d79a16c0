"""Search hits with the code graph around them, when asked (`memoryd search --related`): per
code hit, the files its file usually changes with and the callers of its symbol (of its
file's symbols, for a chunk that is no symbol), a few of each.

A step after the search, apart from it: it reads the hits as any client gets them and asks
`related` about each, so the search request and its answer stay as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from memoryd.errors import NotFound
from memoryd.results import CoChange, GraphLink, SearchResult

if TYPE_CHECKING:
    from memoryd.client import Client

# Co-changed files and callers shown per hit: a hint under a result, not the whole graph.
PER_HIT = 3


class HitGraph(TypedDict):
    """What `--related` adds to a code hit (memoryd/agent/present_graph.py's `hit_lines` shows
    it)."""

    changes_with: list[CoChange]
    callers: list[GraphLink]


async def related_of_hits(
    memoryd: Client, results: list[SearchResult], per_hit: int = PER_HIT
) -> dict[str, HitGraph]:
    """The graph around each code hit, by the hit's id; a hit the graph does not know (a
    memory, a chunk of a language the graph does not read, a file since deleted) has none."""
    out: dict[str, HitGraph] = {}
    for hit in results:
        if hit.path is None or hit.id in out:
            continue
        try:
            doc = await memoryd.related(hit.id, project=hit.project, limit=per_hit)
        except NotFound:
            continue
        out[hit.id] = {"changes_with": doc["changes_with"], "callers": doc["callers"]}
    return out
