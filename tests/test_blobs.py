"""Long memory texts stored compressed and once: two sessions with the same tool outputs
share their blobs, every read gives the whole text, and a blob goes with the last memory
that names it (a forgotten session leaves no text of its own behind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd import queue
from memoryd.daemon.runtime import Runtime
from memoryd.store.blobs import BODY_CHARS, HEAD_CHARS
from memoryd.views import session
from tests.fixtures import SMALL

pytestmark = pytest.mark.e2e


async def test_a_text_two_sessions_share_is_one_blob_until_both_are_forgotten(
    stack: Runtime, tmp_path: Path
) -> None:
    assert stack.redis is not None and stack.store is not None and stack.search is not None
    store = stack.store
    again = tmp_path / "sessions" / "5f0c2d9e-0000-4000-8000-000000000002.jsonl"
    again.parent.mkdir()
    again.write_text(SMALL.read_text().replace(SMALL.stem, again.stem))
    for job in await queue.enqueue_ingest(stack.redis, [str(SMALL), str(again)]):
        await queue.wait_for(job, 300)

    rows = await store.dump()
    bodied = [r for r in rows["memory"] if r.get("body")]
    blobs = {r["id"] for r in rows["blob"]}
    assert blobs and len(bodied) == 2 * len(blobs)  # each text once for both sessions
    assert {r["body"] for r in bodied} == blobs
    assert all(len(r["content"]) == HEAD_CHARS for r in bodied)
    whole = await store.memories_by_key([r["id"].id for r in bodied])
    assert all(len(r["content"]) >= BODY_CHARS for r in whole)
    assert {r["content"][:HEAD_CHARS] for r in whole} == {r["content"] for r in bodied}
    replay = await session(store, again.stem)
    shown = {e["id"]: e["text"] for e in replay["events"]}
    for row in whole:
        if row["session"].id == again.stem:
            assert shown[row["id"].id].removesuffix("…") in row["content"]

    refs, _ = await store.session_scope(SMALL.stem)
    await stack.search.forget(refs)
    assert {r["id"] for r in (await store.dump())["blob"]} == blobs  # the other session's

    refs, _ = await store.session_scope(again.stem)
    await stack.search.forget(refs)
    assert (await store.dump())["blob"] == []
