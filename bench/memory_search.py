"""Memory search quality: questions whose answer is a known memory (a tool result, or a text
longer than the search text's bound), asked about its head, its middle and its tail, with the
bounded search text and with the whole text.

    .venv/bin/python -m bench.memory_search [--limit 10]

The Claude Code and Codex fixture transcripts are ingested through the real queue (private
Redis, arq worker, parsers, the offline model, embedded SurrealDB) into a fresh data dir. The
questions come from the same rows the ingest job writes (bench/fixture_rows.py): for each tool
result of `MIN_CHARS` or more, and each memory of another kind longer than the bound (head +
error lines + tail), one question per part (first fifth, middle fifth, last tenth). A question
is a run of words from one line of that part holding at least two words that no more than
`RARE` memories contain; its answer is every memory that holds all of the question's words.
Each question is asked as `search --kind memory`, and a hit is an answer among the first k.

Tool results are stored capped at 4,000 characters (workers/stages/transcripts/events.py), under the
bound, so their search text is their whole text. The database is then kept, and the search
indexes are rebuilt from it with the whole text of every memory indexed (what the bound
replaced), to compare the two on the same rows.
Numbers only. Temporary files live under /tmp and are removed.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.fixture_rows import whole_file_rows
from memoryd import queue
from memoryd.config import load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.results import SearchRequest
from memoryd.searchindex import index as search_index
from memoryd.searchindex.search import search
from memoryd.searchindex.text import (
    MEMORY_ERROR_CHARS,
    MEMORY_HEAD_CHARS,
    MEMORY_TAIL_CHARS,
    split_identifiers,
)
from memoryd.watch.transcripts import transcript_files
from tests.fixtures import CLAUDE, CODEX

KS = (1, 5, 10)
# A tool result this long has a head, a middle and a tail apart.
MIN_CHARS = 1500
# A word this few memories hold is what a question is made of: an identifier, a path, a value.
RARE = 3
# Words of a question: a run of a line, as an agent would paste it.
WORDS = 6
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
# Where in a tool result a question is asked: (name, start, end) as shares of its text.
PARTS = (("head", 0.0, 0.2), ("middle", 0.4, 0.6), ("tail", 0.9, 1.0))


@dataclass(frozen=True, slots=True)
class Question:
    group: str  # "tool results" or "other kinds over the bound"
    part: str
    text: str
    answers: frozenset[str]


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def questions(memories: Sequence[dict[str, str]]) -> list[Question]:
    """One question per part of each memory asked about (see the module's docstring)."""
    words = {m["id"]: _words(m["content"]) for m in memories}
    df = Counter(w for found in words.values() for w in found)
    bound = MEMORY_HEAD_CHARS + MEMORY_ERROR_CHARS + MEMORY_TAIL_CHARS
    asked: list[Question] = []
    for memory in memories:
        text = memory["content"]
        if memory["kind"] == "tool_result" and len(text) >= MIN_CHARS:
            group = "tool results"
        elif len(text) > bound:
            group = "other kinds over the bound"
        else:
            continue
        for part, start, end in PARTS:
            region = text[int(len(text) * start) : int(len(text) * end)]
            for line in region.splitlines()[1:-1]:  # the first and last may be cut
                run = _WORD.findall(line)[:WORDS]
                if sum(df[w.lower()] <= RARE for w in run) < 2:
                    continue
                need = {w.lower() for w in run}
                answers = frozenset(m["id"] for m in memories if need <= words[m["id"]])
                asked.append(Question(group, part, " ".join(run), answers))
                break
    return asked


def fixture_memories() -> list[dict[str, str]]:
    memories: dict[str, dict[str, str]] = {}
    for path in transcript_files([CLAUDE, CODEX]):
        found = whole_file_rows(path)
        if found is None:
            continue
        for row in found[2].tables.get("memories", []):
            key = row["id"].key
            memories[key] = {"id": key, "kind": row["kind"], "content": row["content"]}
    return list(memories.values())


async def ask(rt: Runtime, asked: list[Question], limit: int) -> dict[str, list[list[bool]]]:
    """Per part, per question: whether an answer is among the first k results, for each k."""
    assert rt.store is not None and rt.embedder is not None and rt.search is not None
    found: dict[str, list[list[bool]]] = {}
    for q in asked:
        request = SearchRequest(q.text, ("memory",), limit=limit)
        answer = await search(rt.store, rt.embedder, rt.search.index, request)
        ids = [hit.id for hit in answer.hits]
        found.setdefault(f"{q.group}, {q.part}", []).append(
            [bool(q.answers & set(ids[:k])) for k in KS]
        )
    return found


def report(label: str, found: dict[str, list[list[bool]]]) -> None:
    print(f"{label}:")
    for part, rows in found.items():
        shares = "  ".join(
            f"R@{k} {sum(r[i] for r in rows) / len(rows):.3f}" for i, k in enumerate(KS)
        )
        print(f"  {part:<36} {len(rows):3d} questions  {shares}")


async def main(limit: int) -> None:
    memories = fixture_memories()
    asked = questions(memories)
    print(
        f"fixtures: {len(memories)} memories; {len(asked)} questions, "
        f"{sum(q.group == 'tool results' for q in asked)} of them about tool results"
    )
    work = Path(tempfile.mkdtemp(prefix="md-msearch-", dir="/tmp"))
    rt = Runtime(load_settings(data_dir=work / "data"))
    try:
        await rt.start_queue(exclusive=True)
        await rt.serve(scheduled=False)
        assert rt.redis is not None and rt.search is not None and rt.store is not None
        files = transcript_files([CLAUDE, CODEX])
        for job in await queue.enqueue_ingest(rt.redis, files, fresh=True):
            await queue.wait_for(job, 1800)
        # Long transcripts go on in follow-up jobs: until every memory is stored.
        while (await rt.store.counts())["memory"] < len(memories):
            await asyncio.sleep(0.5)
        await rt.search.rebuild()
        report(
            "bounded search text (head, error lines, the middle's words once each, tail)",
            await ask(rt, asked, limit),
        )
        # The same rows, indexed whole: what the bound replaced.
        search_index.memory_text = split_identifiers
        await rt.search.rebuild()
        report("whole text indexed", await ask(rt, asked, limit))
    finally:
        await rt.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=10)
    asyncio.run(main(parser.parse_args().limit))
