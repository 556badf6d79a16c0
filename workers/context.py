"""What a job receives as its context: arq's own keys plus what the serving process shares."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from arq import ArqRedis

    from memoryd.channel import Answer
    from memoryd.config import Settings
    from memoryd.embedding import Embedder
    from memoryd.searchindex.indexsync import IndexSync
    from memoryd.store import Store
    from workers.counts import Counted
    from workers.stages.reader import Reader


class JobContext(TypedDict, total=False):
    """``store``, ``embedder``, ``search`` (the search indexes and their one writer),
    ``reader`` (a process that reads and cuts files), ``settings``, ``status_counts`` and
    ``queries`` (the query functions by name, for work that
    asks several: the hooks) are set by the runtime that serves the queues
    (memoryd/daemon/runtime.py); ``redis``, ``job_id``, ``job_try`` and ``enqueue_time`` by arq for
    each run."""

    store: Store
    embedder: Embedder
    search: IndexSync
    reader: Reader
    settings: Settings
    status_counts: Counted
    queries: Answer
    redis: ArqRedis
    job_id: str
    job_try: int
    enqueue_time: datetime
