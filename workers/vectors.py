"""The `embed_chunks` job, indexing's second phase: vectors for the chunks written without one
(workers/indexing.py says why there are two phases)."""

from __future__ import annotations

import contextlib
import logging
import time

from memoryd import jobs
from memoryd.embedding import embed_off_loop
from workers.context import JobContext
from workers.locks import held

log = logging.getLogger(__name__)

# A line at least this often while an embedding job runs: the first ones after a cold index
# take minutes on a loaded machine (the model's pace), and said nothing until they ended.
EMBED_PROGRESS_SECONDS = 30.0


def _embedding(ctx: JobContext) -> contextlib.AbstractAsyncContextManager[object]:
    redis = ctx.get("redis")
    return contextlib.nullcontext() if redis is None else held(redis, jobs.EMBED_CHUNKS.name)


async def embed_chunks(ctx: JobContext, keys: list[str] | None = None) -> dict[str, int]:
    """Vectors for chunks written without one: these `keys` (what an index job left), or every
    chunk that owes one (what a crash left). Content already embedded with the model is reused,
    each distinct text is embedded once, and each part's vectors are stored and searchable
    before the next part is embedded."""
    store, embedder, settings = ctx["store"], ctx["embedder"], ctx["settings"]
    model = embedder.model
    if keys is None:
        keys = await store.owed_chunk_keys(model)
    done = {"chunks": 0, "embedded": 0}
    part = settings.index_write_chunks
    if len(keys) > part:
        # The model's batches run at low priority (BATCH_NICE): on a busy machine this takes
        # long, and the lines say so while it does.
        log.info(
            "embed_chunks: %d chunks to give vectors, %d at a time (at low priority: other "
            "work on this machine goes first)",
            len(keys),
            part,
        )
    said = time.monotonic()
    for start in range(0, len(keys), part):
        if time.monotonic() - said >= EMBED_PROGRESS_SECONDS:
            log.info(
                "embed_chunks: %d of %d chunks given vectors so far (%d texts embedded)",
                done["chunks"],
                len(keys),
                done["embedded"],
            )
            said = time.monotonic()
        # One part at a time across jobs and workers, each asking again what is still owed:
        # the start-up catch-up and a rerun of a job a crash cut short name the same chunks as
        # the jobs still queued, and each text is embedded once all the same.
        async with _embedding(ctx):
            rows = await store.owed_chunks(keys[start : start + part], model)
            if not rows:
                continue
            known = await store.vectors_by_hash((row["content_hash"] for row in rows), model)
            missing: dict[str, str] = {}
            for row in rows:
                if row["content_hash"] not in known:
                    missing.setdefault(row["content_hash"], row["content"])
            if missing:
                vectors = await embed_off_loop(embedder, list(missing.values()))
                known.update(zip(missing.keys(), vectors, strict=True))
                # A line per part the model worked on: a job killed before its last line has
                # still done this work, and bench/kill_trials.py counts it from these.
                log.info("embed_chunks: %d texts embedded for %d chunks", len(missing), len(rows))
            await ctx["search"].set_vectors(
                "code_chunk", {row["key"]: known[row["content_hash"]] for row in rows}, model
            )
        done["chunks"] += len(rows)
        done["embedded"] += len(missing)
    if keys:
        log.info(
            "embed_chunks: %d chunks given vectors (%d texts embedded) of %d asked",
            done["chunks"],
            done["embedded"],
            len(keys),
        )
    return done
