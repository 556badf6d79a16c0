"""The `remember` job: a memory an agent writes on purpose (a decision, a note, a todo).

Where it lives: one "agent notes" session per project (`agent-notes:<project id>`, agent
`memoryd`; `agent-notes:unscoped` for notes made outside every watched repository). An MCP
server is not told which agent session calls it, and a note is meant to outlive that session:
the project is what a later session asks about, so `recent_activity`, `timeline` and `session`
find every note of a project in one place, in the order they were written.
"""

from __future__ import annotations

import asyncio
import os
import re
from datetime import UTC, datetime
from typing import Any

from memoryd import agent_shared as agent
from memoryd import vocabulary
from memoryd.anchors import make_anchors
from memoryd.embedding import embed_off_loop
from memoryd.errors import InvalidRequest
from memoryd.ids import entity_id, stable_id
from memoryd.store import Ref
from memoryd.store.recall import NOTES_AGENT
from memoryd.vocabulary import MENTIONS, SYMBOL
from workers.context import JobContext
from workers.ingest import EMBED_CHARS, entity_row
from workers.stages.entities import Entity, canonical_file

# Characters a note may hold: a decision with its reasons, not a document.
MAX_NOTE_CHARS = 8000
# Words in a note that may name a file: trimmed of the quotes and punctuation prose puts
# around a path (`src/a.py`, "a.py", (a.py), a.py.).
_WORD = re.compile(r"[^\s`'\"()\[\]<>,;]+")


def notes_session_id(project_id: str | None) -> str:
    return f"agent-notes:{project_id or 'unscoped'}"


def named_files(
    text: str, files: list[str], cwd: str, projects: list[tuple[str, str]]
) -> list[Entity]:
    """The file and symbol entities a note names: every path in `files` (absolute, or
    relative to `cwd`; `path#Parent.name` names a symbol the indexer keeps of that file), and
    each word of the text that is the path of an existing file."""
    found: dict[str, Entity] = {}
    for given in files:
        path, _, symbol = given.partition("#")
        entity = canonical_file(path, cwd, projects)
        if entity is not None and symbol:
            entity = Entity(SYMBOL, f"{entity.key}#{symbol}", given, symbol, entity.project_id)
        if entity is not None:
            found.setdefault(entity.key, entity)
    for match in _WORD.finditer(text):
        word = match.group().rstrip(".:!?")
        if "/" not in word and "." not in word:
            continue
        path = os.path.join(cwd, os.path.expanduser(word))
        if os.path.isfile(path):
            entity = canonical_file(word, cwd, projects)
            if entity is not None:
                found.setdefault(entity.key, entity)
    return sorted(found.values(), key=lambda e: e.key)


async def remember(
    ctx: JobContext, text: str, kind: str, files: list[str], cwd: str, project_id: str | None
) -> dict[str, Any]:
    """Write an agent's note: embedded, pinned (a recorded decision must not be pruned away),
    linked by MENTIONS to the files it names. The same note in the same project is one
    memory: remembering it again refreshes it."""
    if kind not in vocabulary.AGENT_MEMORY_KINDS:
        raise InvalidRequest(
            f"unknown kind {kind!r}; choose from {', '.join(vocabulary.AGENT_MEMORY_KINDS)}"
        )
    text = text.strip()
    if not text:
        raise InvalidRequest("an empty note remembers nothing")
    if len(text) > MAX_NOTE_CHARS:
        raise InvalidRequest(f"a note holds at most {MAX_NOTE_CHARS} characters")
    embedder = ctx["embedder"]
    projects = [(p["id"], p["root"]) for p in await ctx["store"].projects()]
    entities = await asyncio.to_thread(named_files, text, files, cwd, projects)
    [vector] = await embed_off_loop(embedder, [text[:EMBED_CHARS]])
    # Anchors: the code it names as the indexer holds it now (files outside every project are
    # not indexed: nothing to check them against).
    targets = [(e.kind, e.key) for e in entities if e.project_id]
    chunks = await ctx["store"].anchor_chunks([(kind, key, None) for kind, key in targets])
    missing = [
        key
        for (kind, key), rows in zip(targets, chunks, strict=True)
        if kind == SYMBOL and not [r for r in rows if "content" in r]
    ]
    if missing:
        raise InvalidRequest(f"no indexed symbol {', '.join(missing)} (path#Parent.name)")
    at = datetime.now(UTC)
    session_id = notes_session_id(project_id)
    memory_id = stable_id("remember", session_id, kind, text)
    session = Ref("session", session_id)
    memory = Ref("memory", memory_id)
    project = Ref("project", project_id) if project_id else None
    seq = await ctx["search"].write_note(
        {
            "id": session,
            "data": {"agent": NOTES_AGENT, "project": project, "cwd": cwd, "started_at": at},
        },
        {
            "id": memory,
            "session": session,
            "kind": kind,
            "content": text,
            "tool": "remember",
            "event_time": at,
            "ingestion_time": at,
            "valid_from": at,
            "seq": 0,
            "pinned": True,
            "importance": 1.0,
            "access_count": 0,
            "media": [],
            "embedding": vector,
            "embedding_model": embedder.model,
            "anchors": make_anchors(targets, chunks, at),
        },
        [entity_row(e, at) for e in entities],
        [
            {
                "id": Ref(MENTIONS.table, MENTIONS.row_id(memory_id, e.kind, e.key)),
                "in": memory,
                "out": Ref("entity", entity_id(e.kind, e.key)),
                "session": session,
                "tool": "remember",
                "event_time": at,
            }
            for e in entities
        ],
    )
    return {
        "id": agent.qualified("memory", memory_id),
        "session": session_id,
        "seq": seq,
        "kind": kind,
        "pinned": True,
        "files": [e.key for e in entities],
    }
