"""`related` and `impact`: the code graph read around a file, a symbol or a chunk, joined to
the sessions that touched each file. One JSON-ready document each, in a fixed order (README.md
documents them), bounded by `limit` per list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from memoryd import agent_shared as agent
from memoryd.errors import InvalidRequest, NotFound
from memoryd.ids import file_entity_id, split_file_key, symbol_entity_id
from memoryd.store import Store, key_of, plain
from memoryd.vocabulary import CALLS, IMPORTS, INHERITS, MODIFIES
from workers.context import JobContext
from workers.stages.codegraph.resolve import guess
from workers.stages.entities import canonical_file

# Entries per list of a `related` answer; `impact` follows dependents this many steps back.
LIMIT = 50
# A guess by name is never as sure as a call its file settles, even with one candidate.
GUESS = 0.9
MAX_DEPTH = 3
# CHANGES_WITH pairs read per side for one file at most (its co-change window's pairs).
CO_CHANGE_ROWS = 2000
# A test file, by the conventions of the languages the graph reads.
_TEST_FILE = re.compile(
    r"(^|/)(tests?|__tests__|spec)/|(^|/)test_[^/]*\.py$|_test\.(py|go)$|"
    r"\.(test|spec)\.[jt]sx?$|Tests?\.java$"
)


def is_test(path: str) -> bool:
    return bool(_TEST_FILE.search(path))


def _path_of(key: str) -> str:
    """The file path of a file or symbol key (`<project>:<path>#<name>`)."""
    return split_file_key(key.split("#", 1)[0])[1]


def _link(key: str, path: str, line: int | None, confidence: float = 1.0) -> dict[str, Any]:
    """One neighbour: the entity's key, and the file and line of the site (a call, an
    import, a definition)."""
    return {"key": key, "path": path, "line": line, "confidence": round(confidence, 3)}


def _sorted(links: Iterable[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    unique = {(link["key"], link["path"], link["line"]): link for link in links}
    order = sorted(
        unique.values(), key=lambda x: (-x["confidence"], x["key"], x["path"], x["line"] or 0)
    )
    return order[:limit]


async def _target(store: Store, target: str, cwd: str, project: str | None) -> tuple[str, str, str]:
    """(kind, key, project id) of what `related` was asked about: a chunk id, `path#Name`, a
    file path, or a symbol's name (`Worker.run_job`, `create_pool`)."""
    projects = [(p["id"], p["root"]) for p in await store.projects()]
    table, key = agent.parse_id(target)
    if table in (None, "code_chunk") and re.fullmatch(r"[0-9a-f]{32}", key):
        rows = await store.chunks_by_key([key])
        if rows:
            row = rows[0]
            project_id = key_of(row["project"])
            name = row.get("name")
            if name and row["chunk_type"] in ("function", "method", "class", "block"):
                sym = f"{project_id}:{row['path']}#" + ".".join(
                    p for p in (row.get("parent_name"), name) if p
                )
                if await store.entities_by_key("symbol", [sym]):
                    return "symbol", sym, project_id
            return "file", f"{project_id}:{row['path']}", project_id
    path, hash_, name = target.partition("#")
    found = canonical_file(path, cwd, projects)
    if found is not None and found.project_id:
        if hash_:
            return "symbol", f"{found.key}#{name}", found.project_id
        if await store.entities_by_key("file", [found.key]):
            return "file", found.key, found.project_id
    # a symbol by name: the one a file of the project declares (ambiguity is an error)
    short = target.rsplit(".", 1)[-1]
    scopes = [project] if project else [p for p, _ in projects]
    matches = []
    for project_id in scopes:
        for row in await store.symbols_named(project_id, [short]):
            if row["name"] == target or row["name"].endswith(f".{target}") or target == short:
                matches.append((row["key"], project_id))
    if not matches:
        raise NotFound(f"no file or symbol {target!r} in the code graph")
    if len({m[0] for m in matches}) > 1:
        names = ", ".join(sorted({m[0].split(":", 1)[1] for m in matches})[:10])
        raise InvalidRequest(f"{target!r} names {len(matches)} symbols: {names}; ask for one")
    return "symbol", matches[0][0], matches[0][1]


async def _guessed_callers(
    store: Store, project_id: str, symbol_keys: list[str], as_of: datetime | None
) -> list[dict[str, Any]]:
    """Calls by name that may mean these symbols: confidence 1/number of symbols of that name
    in the files the call could reach. Two queries for all of them (a file's page asks for
    every symbol it defines: one pair of queries each cost 40 ms for arq's connections.py)."""
    short = {key: key.rsplit("#", 1)[1].rsplit(".", 1)[-1] for key in symbol_keys}
    refs = await store.refs_named(project_id, sorted(set(short.values())), CALLS.table, as_of)
    if not refs:
        return []
    named = sorted({ref["name"] for ref in refs})
    by_name: dict[str, list[dict[str, Any]]] = {}
    for c in await store.symbols_named(project_id, named, as_of):
        by_name.setdefault(c["name"].rsplit(".", 1)[-1], []).append(c)
    # What each reference may mean, worked out once however many of the symbols share its name.
    guessed = [(ref, {c["key"] for c in guess(ref, by_name.get(ref["name"], []))}) for ref in refs]
    out = []
    for key in symbol_keys:
        for ref, keys in guessed:
            if ref["name"] == short[key] and key in keys:
                out.append(_link(ref["source_key"], ref["path"], ref["line"], GUESS / len(keys)))
    return out


async def _guessed_callees(
    store: Store, project_id: str, sources: list[str], as_of: datetime | None
) -> list[dict[str, Any]]:
    refs = await store.refs_from(sources, CALLS.table, as_of)
    names = sorted({r["name"] for r in refs})
    candidates = await store.symbols_named(project_id, names, as_of)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for c in candidates:
        by_name.setdefault(c["name"].rsplit(".", 1)[-1], []).append(c)
    out = []
    for ref in refs:
        allowed = guess(ref, by_name.get(ref["name"], []))
        for c in allowed:
            out.append(_link(c["key"], ref["path"], ref["line"], GUESS / len(allowed)))
    return out


async def _sessions(store: Store, file_keys: list[str], limit: int) -> list[dict[str, Any]]:
    """The sessions that read or modified each file: per file and session, the verbs and the
    last time, newest first."""
    out = []
    for key in file_keys:
        project_id, rel = split_file_key(key)
        seen: dict[str, dict[str, Any]] = {}
        for action in await store.file_actions(file_entity_id(project_id, rel)):
            action = plain(action)
            doc = seen.setdefault(
                key_of(action["session"]) if action.get("session") else "?",
                {"path": rel, "session": None, "verbs": [], "last_at": None},
            )
            doc["session"] = key_of(action["session"]) if action.get("session") else None
            if action["verb"] not in doc["verbs"]:
                doc["verbs"].append(action["verb"])
            when = action.get("event_time")
            if when and (doc["last_at"] is None or when > doc["last_at"]):
                doc["last_at"] = when
        for doc in seen.values():
            doc["verbs"].sort()
        out += sorted(
            seen.values(), key=lambda d: (d["last_at"] or "", d["session"] or ""), reverse=True
        )
    return out[:limit]


async def co_changed(store: Store, ids: list[str], limit: int) -> list[dict[str, Any]]:
    """The files CHANGES_WITH pairs with these entities, the most often changed with first."""
    # Every pair is read: the edges come ordered by the other file's key, not by count, so a
    # first few would be the alphabetically first, not the most often changed with.
    rows = await store.graph_edges("changes_with", "in", ids, limit=CO_CHANGE_ROWS)
    rows += await store.graph_edges("changes_with", "out", ids, limit=CO_CHANGE_ROWS)
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        # History pairs every source file git holds; one memoryd does not index (generated,
        # excluded, too large) has no entity, so no path to show: left out.
        if row["other"] in ids or row["other_key"] is None:
            continue
        path = _path_of(row["other_key"])
        entry = best.setdefault(path, {"path": path, "count": 0.0, "last_at": None})
        entry["count"] = round(entry["count"] + float(row["count"]), 3)
        when = plain(row["last_at"])
        entry["last_at"] = max(filter(None, (entry["last_at"], when)), default=None)
    return sorted(best.values(), key=lambda e: (-e["count"], e["path"]))[:limit]


async def related(
    store: Store,
    target: str,
    cwd: str,
    project: str | None = None,
    as_of: datetime | None = None,
    limit: int = LIMIT,
) -> dict[str, Any]:
    kind, key, project_id = await _target(store, target, cwd, project)
    path = _path_of(key)
    file_id = file_entity_id(project_id, path)
    if kind == "file":
        defined = await store.graph_edges("defines", "in", [file_id], as_of, limit=2000)
        ids = [row["other"] for row in defined]
        definitions = [_link(row["other_key"], path, row["line"]) for row in defined]
        sources = [file_id, *ids]
    else:
        sym_id = symbol_entity_id(key)
        defined = await store.graph_edges("defines", "out", [sym_id], as_of)
        ids = [sym_id]
        definitions = [_link(key, _path_of(row["at_key"]), row["line"]) for row in defined]
        sources = ids
    callers = [
        _link(row["other_key"], row["path"], row["line"])
        for row in await store.graph_edges(CALLS.table, "out", ids, as_of, limit * 4)
    ]
    callers += await _guessed_callers(
        store, project_id, [key] if kind == "symbol" else [d["key"] for d in definitions], as_of
    )
    callers = [c for c in callers if kind == "symbol" or _path_of(c["key"]) != path]
    callees = [
        _link(row["other_key"], row["path"], row["line"])
        for row in await store.graph_edges(CALLS.table, "in", sources, as_of, limit * 4)
    ] + await _guessed_callees(store, project_id, sources, as_of)
    if kind == "file":
        callees = [c for c in callees if _path_of(c["key"]) != path]
    importers = [
        _link(row["other_key"], row["path"], row["line"])
        for row in await store.graph_edges(IMPORTS.table, "out", [file_id], as_of, limit * 4)
    ]
    imports = [
        _link(row["other_key"], row["path"], row["line"])
        for row in await store.graph_edges(IMPORTS.table, "in", [file_id], as_of, limit * 4)
    ]
    bases = [
        _link(row["other_key"], row["path"], row["line"])
        for row in await store.graph_edges(INHERITS.table, "in", ids, as_of, limit * 4)
    ]
    subclasses = [
        _link(row["other_key"], row["path"], row["line"])
        for row in await store.graph_edges(INHERITS.table, "out", ids, as_of, limit * 4)
    ]
    changes_with = await co_changed(store, [file_id], limit)
    neighbours = sorted({_path_of(x["key"]) for x in callers + importers} | {path})
    keys = [f"{project_id}:{p}" for p in neighbours]
    return {
        "target": {"kind": kind, "key": key, "project": project_id, "path": path},
        "as_of": as_of.isoformat() if as_of else None,
        "definitions": _sorted(definitions, limit),
        "callers": _sorted(callers, limit),
        "callees": _sorted(callees, limit),
        "importers": _sorted(importers, limit),
        "imports": _sorted(imports, limit),
        "bases": _sorted(bases, limit),
        "subclasses": _sorted(subclasses, limit),
        "changes_with": changes_with,
        "sessions": await _sessions(store, keys, limit),
    }


async def impact(
    store: Store,
    paths: list[str],
    cwd: str,
    depth: int = 2,
    as_of: datetime | None = None,
    limit: int = LIMIT,
) -> dict[str, Any]:
    """What depends on these files: files that import them or call their symbols, and those
    that depend on those, up to `depth` steps; which of them are tests; and the errors that
    sessions met after editing these files before."""
    depth = max(1, min(depth, MAX_DEPTH))
    projects = [(p["id"], p["root"]) for p in await store.projects()]
    start: dict[str, str] = {}  # file key -> project
    for given in paths:
        found = canonical_file(given, cwd, projects)
        if found is None or not found.project_id:
            raise InvalidRequest(f"{given!r} is in no watched project")
        start[found.key] = found.project_id
    reached: dict[str, dict[str, Any]] = {}
    frontier = sorted(start)
    for step in range(1, depth + 1):
        file_ids = [file_entity_id(*split_file_key(k)) for k in frontier]
        defined = await store.graph_edges("defines", "in", file_ids, as_of, limit=20000)
        symbol_ids = [row["other"] for row in defined]
        found: dict[str, tuple[str, str]] = {}
        for row in await store.graph_edges(IMPORTS.table, "out", file_ids, as_of, limit=5000):
            found.setdefault(
                row["other_key"].split("#", 1)[0], ("imports", _path_of(row["at_key"]))
            )
        for row in await store.graph_edges(CALLS.table, "out", symbol_ids, as_of, limit=5000):
            found.setdefault(row["other_key"].split("#", 1)[0], ("calls", _path_of(row["at_key"])))
        frontier = []
        for key, (how, what) in sorted(found.items()):
            if key in start or key in reached:
                continue
            rel = split_file_key(key)[1]
            reached[key] = {
                "path": rel,
                "depth": step,
                "via": how,
                "of": what,
                "test": is_test(rel),
            }
            frontier.append(key)
        if not frontier:
            break
    dependents = sorted(reached.values(), key=lambda d: (d["depth"], d["path"]))
    return {
        "paths": sorted(split_file_key(k)[1] for k in start),
        "depth": depth,
        "dependents": [d for d in dependents if not d["test"]][:limit],
        "tests": [d for d in dependents if d["test"]][:limit],
        "failures": await _failures_after_edits(store, sorted(start), limit),
    }


async def _failures_after_edits(
    store: Store, file_keys: list[str], limit: int
) -> list[dict[str, Any]]:
    """Errors a session met after it modified one of these files (in that session, later)."""
    out = []
    for key in file_keys:
        project_id, rel = split_file_key(key)
        edits: dict[str, int] = {}
        for action in await store.file_actions(file_entity_id(project_id, rel)):
            if action["verb"] == MODIFIES.name and action.get("session"):
                session = key_of(action["session"])
                edits[session] = min(edits.get(session, action["seq"]), action["seq"])
        for session, seq in sorted(edits.items()):
            for error in await store.session_errors(session):
                if error["seq"] > seq:
                    out.append(
                        {
                            "path": rel,
                            "session": session,
                            "error": error.get("error") or error["signature"],
                            "tool": error.get("tool"),
                            "at": plain(error.get("event_time")),
                        }
                    )
    return sorted(out, key=lambda f: (f["at"] or "", f["path"]), reverse=True)[:limit]


# --- the query jobs (memoryd/jobs.py RELATED and IMPACT) ----------------------------------------


async def related_job(
    ctx: JobContext,
    target: str,
    cwd: str,
    project: str | None,
    as_of: str | None,
    limit: int,
) -> dict[str, Any]:
    when = datetime.fromisoformat(as_of) if as_of else None
    return await related(ctx["store"], target, cwd, project, when, max(1, min(limit, 500)))


async def impact_job(
    ctx: JobContext, paths: list[str], cwd: str, depth: int, as_of: str | None, limit: int
) -> dict[str, Any]:
    if not paths:
        raise InvalidRequest("no paths given")
    when = datetime.fromisoformat(as_of) if as_of else None
    return await impact(ctx["store"], paths, cwd, depth, when, max(1, min(limit, 500)))
