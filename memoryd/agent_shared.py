"""What the agent-facing layers (the MCP server, the hooks, the jobs behind them) share: record
ids an agent can pass back, the project a call is about, and size budgets that cut output the
same way every time. Pure and light: no model, no database SDK."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memoryd.errors import InvalidRequest
from memoryd.results import ProjectInfo
from memoryd.vocabulary import SEARCH_KINDS

# The table of each id prefix an agent sees (`code:…` or `docs:…` from a hit of code or prose,
# `memory:…`, `goal:…`), and the prefix a row of each table gets.
ID_TABLES = {kind.name: kind.table for kind in SEARCH_KINDS}
# A table's prefix is its first kind's (a code chunk's id says `code`, docs or not).
TABLE_PREFIXES = {
    table: next(k for k, t in ID_TABLES.items() if t == table) for table in ID_TABLES.values()
}
DEFAULT_BUDGET = 8000
# The smallest budget a caller may ask for: room for one line and the note that more exists.
MIN_BUDGET = 200
ELLIPSIS = "…"


def qualified(table_or_kind: str, key: str) -> str:
    """`code:<key>` for a code_chunk row (or a code hit), `memory:<key>`, `goal:<key>`."""
    prefix = TABLE_PREFIXES.get(table_or_kind, table_or_kind)
    if prefix not in ID_TABLES:
        raise InvalidRequest(f"no ids for {table_or_kind!r}")
    return f"{prefix}:{key}"


def parse_id(given: str) -> tuple[str | None, str]:
    """(table, key) of a qualified id; (None, key) for a bare key (any table may hold it)."""
    prefix, sep, key = given.strip().partition(":")
    if sep and prefix in ID_TABLES:
        return ID_TABLES[prefix], key
    if sep and prefix in TABLE_PREFIXES:
        return prefix, key
    return None, given.strip()


# -- scope ---------------------------------------------------------------------------------------

ALL_PROJECTS = "all"


@dataclass(frozen=True, slots=True)
class Scope:
    """Which project a call is about. ``project``: its id, or None for every project.
    ``note``: what the agent should be told (the directory is in no watched repository)."""

    project: str | None
    note: str | None = None


def resolve_scope(projects: Sequence[ProjectInfo], cwd: Path, requested: str | None) -> Scope:
    """By default the watched project that contains `cwd` (the nested one when projects
    nest); `requested` names another by id, name or root, or `all`."""
    if requested == ALL_PROJECTS:
        return Scope(None)
    if requested:
        for field in ("id", "name", "root"):
            found = [p["id"] for p in projects if p[field] == requested]
            if len(found) == 1:
                return Scope(found[0])
        known = ", ".join(p["name"] for p in projects) or "none"
        raise InvalidRequest(f"unknown project {requested!r}; watched projects: {known}")
    here = cwd.resolve()
    inside = [p for p in projects if here.is_relative_to(p["root"])]
    if inside:
        return Scope(max(inside, key=lambda p: len(p["root"]))["id"])
    # Here only: memoryd.scan brings pathspec and blake3, which a client's start does without.
    from memoryd.scan import find_repo_root

    root = find_repo_root(here)
    return Scope(
        None,
        f"{here} is in no watched repository (nearest root: {root}); "
        "showing every project. Watch it with `memoryd index` or `memoryd run --repo`.",
    )


# -- budgets -------------------------------------------------------------------------------------


def check_budget(max_chars: int) -> int:
    if max_chars < MIN_BUDGET:
        raise InvalidRequest(f"max_chars must be at least {MIN_BUDGET}")
    return max_chars


def clip(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters (an ellipsis marks the cut)."""
    if len(text) <= limit:
        return text, False
    return text[: max(0, limit - 1)] + ELLIPSIS, True


def one_line(text: str | None, limit: int) -> str:
    """Whitespace collapsed, cut to `limit`."""
    return clip(" ".join((text or "").split()), limit)[0]


def clip_lines(text: str, first_line: int, limit: int) -> tuple[str, int, bool]:
    """Whole lines of `text` (whose first line is `first_line`; a final newline ends the last
    line) that fit in `limit` characters; a first line longer than the budget is cut itself.
    Returns (text, number of the last line shown, truncated)."""
    lines = text.removesuffix("\n").split("\n")
    if len(text) <= limit:
        return text, first_line + len(lines) - 1, False
    shown: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + (1 if shown else 0)
        if used + cost > limit:
            break
        shown.append(line)
        used += cost
    if not shown:
        return clip(lines[0], limit)[0], first_line, True
    return "\n".join(shown), first_line + len(shown) - 1, True


def fit(head: Iterable[str], items: Sequence[str], limit: int, what: str) -> str:
    """`head` lines, then as many whole `items` as fit in `limit` characters (the first one cut
    to fit when even it does not), then one line saying how many were left out.
    Deterministic: same input, same cut."""
    out = list(head)
    used = sum(len(line) + 1 for line in out)
    for shown, item in enumerate(items):
        more = len(items) - shown
        tail = f"… {more} more {what} not shown (narrow the request or raise max_chars)"
        # Keep room for the tail unless this is the last item and it fits by itself.
        room = limit - used - (0 if more == 1 else len(tail) + 1)
        if len(item) + 1 <= room:
            out.append(item)
            used += len(item) + 1
            continue
        if shown == 0 and room > len(ELLIPSIS) + 1:
            out.append(clip(item, room - 1)[0])
            more -= 1
            tail = f"… {more} more {what} not shown (narrow the request or raise max_chars)"
        if more:
            out.append(tail)
        break
    text = "\n".join(out)
    return text if len(text) <= limit else clip(text, limit)[0]
