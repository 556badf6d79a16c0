"""Forgetting: `forget(ids)` and the one deletion path under it.

Everything memoryd removes on request goes through :func:`forget_rows` with a set of row
references: the database rows (and their edges, derived goals, orphaned entities) and then the
derived search indexes, under the index writer's lock. Forgetting whole sessions, projects or
paths (the privacy work) resolves them to row references and calls the same function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memoryd import agent
from memoryd.errors import InvalidRequest, NotFound
from memoryd.store import Ref
from workers.context import JobContext

# What an agent may forget: the memories and goals memoryd recorded. Code chunks mirror the
# working tree and come back at the next index; delete the file instead.
FORGETTABLE = ("memory", "goal")


async def forget(ctx: JobContext, ids: list[str]) -> dict[str, Any]:
    if not ids:
        raise InvalidRequest("no ids given")
    refs: list[Ref] = []
    for given in ids:
        table, key = agent.parse_id(given)
        if table is not None and table not in FORGETTABLE:
            raise InvalidRequest(
                f"{given!r}: only memories and goals can be forgotten (code follows the files)"
            )
        refs.extend(Ref(t, key) for t in ([table] if table else FORGETTABLE))
    removed = await forget_rows(ctx, refs)
    if not any(removed.get(t) for t in FORGETTABLE):
        raise NotFound(f"no memory or goal {', '.join(repr(i) for i in ids)}")
    return {"ids": ids, "removed": removed}


async def forget_rows(ctx: JobContext, refs: Sequence[Ref]) -> dict[str, int]:
    """THE deletion path (see the module's docstring): the rows leave the database and the
    derived search indexes together (memoryd.indexsync). Returns rows removed per table."""
    removed: dict[str, int] = {}
    for ref in await ctx["search"].forget(refs):
        removed[ref.table] = removed.get(ref.table, 0) + 1
    return removed
