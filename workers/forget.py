"""The one deletion path.

Everything memoryd removes on request goes through :func:`forget_rows` with a set of row
references: the database rows (and their edges, derived goals, orphaned entities) first, then
every derived index. Forgetting whole sessions, projects or paths (workers/privacy.py) resolves
them to row references and calls the same function.
"""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.store import Ref
from workers.context import JobContext


async def forget_rows(ctx: JobContext, refs: Sequence[Ref]) -> dict[str, int]:
    """THE deletion path (see the module's docstring). Returns rows removed per table."""
    removed = await ctx["store"].forget_records(refs)
    await forget_in_derived_indexes(ctx, refs)
    return removed


async def forget_in_derived_indexes(ctx: JobContext, refs: Sequence[Ref]) -> None:
    """Where deletion from the derived search indexes (full-text and vector, built from the
    database) belongs: every forgotten row must leave them too. Today search runs on the
    database's own indexes, which the delete above already updated."""
    del ctx, refs
