"""From `memoryd run` to searchable: a real repository as the daemon's project, on a fresh data dir.

    .venv/bin/python -m bench.searchable --repo PATH [--targets 20] [--max-seconds 1800]

Starts `memoryd run --data-dir <fresh temp dir> --repo PATH` and prints the time from that
start until:
- the daemon is up (private Redis, database, model loaded);
- a keyword search and a symbol search return their target from the repo. --targets source
  files (not tests) are sampled over the whole tree (seeded); for each, the longest symbol name
  it defines that no other file mentions is the symbol query, and the three longest words of
  that definition that at most three files hold are the keyword query (searched the way
  `memoryd search` does, through the daemon's queue, top 10, the target's path must be among
  them; a target still missing is searched every `TARGET_ROUNDS` seconds, so its time is late
  by less than that). The first target found, the median, and the last;
- the lexical index holds every file (the sync's progress is `ready`), and what share of the
  files was in it at 60 s;
- every chunk has a vector by meaning: a chunk's first-pass vector (memoryd/static_embedding.py)
  is written with its words, in the same index write, so this is when the lexical index holds
  every file (tests/test_first_pass.py checks that it holds);
- the semantic index is complete (no chunk waits for its full-model vector), or --max-seconds
  passed.
Then the model alone embeds the same distinct chunk texts (all of them when the semantic index
completed, else --model-sample of them, for its rate) in this process: the pipeline's texts per
second from the daemon's start to the complete semantic index, over the model's, is the ratio.
The first pass alone embeds the same texts: its texts per second over the model's is its cost
ratio per chunk (target >= 10).
The load average is printed next to every figure: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.incremental import Daemon, connect_when_up, load
from bench.index_throughput import chunk_texts
from memoryd import jobs, queue, static_embedding
from memoryd.config import load_settings
from memoryd.embedding import Embedder
from memoryd.results import SearchRequest
from memoryd.scan import read_source, walk
from memoryd.searchindex.kinds import role
from workers.indexing import plan_file
from workers.stages.chunking import language_for_path

SYMBOL_TYPES = ("class", "method", "function")
SOURCE_SUFFIXES = (".java", ".scala", ".py", ".go", ".ts", ".rs", ".c", ".cc", ".js")
WORD = re.compile(r"[A-Za-z]{6,}")
POLL_SECONDS = 1.0
PROGRESS_SECONDS = 5.0
# Each target still missing is searched every TARGET_ROUNDS polls, a share of them per poll:
# 40 searches a second (every target, each way) took a third of a core from the daemon it
# measures. Its time found is late by less than TARGET_ROUNDS polls.
TARGET_ROUNDS = 5
# Texts per first-pass call (an index write's chunks come in parts of about this size).
FIRST_PASS_BATCH = 500


@dataclass
class Target:
    path: str
    symbol: str
    words: str
    symbol_at: float | None = None
    keyword_at: float | None = None


def sample_targets(root: Path, count: int, max_chars: int) -> list[Target]:
    """`count` files spread over the tree, each with a symbol query (the longest name it
    defines that no other file mentions) and a keyword query (the three longest words of that
    definition found in at most three files): queries with one right answer."""
    texts: dict[str, str] = {}
    for rel in walk(root):
        # Source, not tests: search ranks tests below the source they exercise, by design.
        if rel.endswith(SOURCE_SUFFIXES) and role("code", rel, language_for_path(rel)) == "source":
            content = read_source((root / rel).read_bytes())
            if content.text is not None:
                texts[rel] = content.text
    files_of: Counter[str] = Counter()
    for text in texts.values():
        files_of.update(set(WORD.findall(text)))
    paths = sorted(texts)
    random.Random(7).shuffle(paths)
    targets: list[Target] = []
    for rel in paths:
        content = read_source((root / rel).read_bytes())
        chunks = plan_file("bench", rel, texts[rel], content.hash, max_chars).chunks
        named = [
            c
            for c in chunks
            if c["chunk_type"] in SYMBOL_TYPES and c["name"] and files_of[c["name"]] == 1
        ]
        if not named:
            continue
        chunk = max(named, key=lambda c: (len(c["name"]), c["start_line"]))
        rare = {w for w in WORD.findall(chunk["content"]) if files_of[w] <= 3} - {chunk["name"]}
        if len(rare) < 3:
            continue
        targets.append(Target(rel, chunk["name"], " ".join(sorted(rare, key=len)[-3:])))
        if len(targets) == count:
            break
    return targets


async def found(redis: Any, query: str, path: str, symbol: str | None) -> bool:
    hits = (await queue.call(redis, jobs.SEARCH, SearchRequest(query, limit=10).wire()))["hits"]
    return any(
        h["path"] == path and (symbol is None or (h["name"] or "").split(".")[-1] == symbol)
        for h in hits
    )


def spread(values: list[float | None]) -> str:
    got = sorted(v for v in values if v is not None)
    if not got:
        return "none found"
    missing = len(values) - len(got)
    last = f"last {got[-1]:.1f} s" if not missing else f"{missing} not found"
    return f"first {got[0]:.1f} s, median {statistics.median(got):.1f} s, {last}"


async def watch(daemon: Daemon, targets: list[Target], max_seconds: float) -> dict[str, Any]:
    redis = await connect_when_up(daemon)
    start = daemon.started
    marks: dict[str, Any] = {"up": time.perf_counter() - start, "up_load": load()}
    print(f"daemon up after {marks['up']:.1f} s (load {marks['up_load']})", flush=True)
    last_progress, poll = 0.0, 0
    try:
        while True:
            now = time.perf_counter() - start
            for t in targets[poll % TARGET_ROUNDS :: TARGET_ROUNDS]:
                if t.symbol_at is None and await found(redis, t.symbol, t.path, t.symbol):
                    t.symbol_at = time.perf_counter() - start
                if t.keyword_at is None and await found(redis, t.words, t.path, None):
                    t.keyword_at = time.perf_counter() - start
            # The index's progress at every poll (its marks are to the second), printed less.
            now = time.perf_counter() - start
            [project] = await queue.call(redis, jobs.INDEX_PROGRESS)
            index = project["index"] or {}
            state = index.get("state")
            if "minute" not in marks and now >= 60:
                marks["minute"] = (index.get("files_done", 0), index.get("files_total", 0))
                marks["minute_chunks"] = index.get("chunks", 0)
                marks["minute_owed"] = project["vectors_owed"]
                marks["minute_load"] = load()
            if state == "ready" and "lexical" not in marks:
                marks["lexical"] = now
                marks["lexical_load"] = load()
                marks["chunks"] = index["chunks"]
                marks["files"] = index["files_total"]
            marks["owed"] = project["vectors_owed"]
            marks["chunks_now"] = index.get("chunks", 0)
            if now - last_progress >= PROGRESS_SECONDS:
                last_progress = now
                print(
                    f"  {now:6.0f} s: {state} {index.get('files_done')}/{index.get('files_total')}"
                    f" files, {index.get('chunks')} chunks, {project['vectors_owed']} waiting for"
                    f" vectors; targets found {sum(t.symbol_at is not None for t in targets)}"
                    f" by symbol, {sum(t.keyword_at is not None for t in targets)} by words;"
                    f" load {load()}",
                    flush=True,
                )
            if state == "ready" and project["vectors_owed"] == 0:
                marks["semantic"] = now
                marks["semantic_load"] = load()
                return marks
            if now > max_seconds:
                return marks
            await asyncio.sleep(POLL_SECONDS)
            poll += 1
    finally:
        await redis.aclose()


def model_alone(texts: list[str], data_dir: Path) -> float:
    """Texts per second of the configured model alone, batched as the daemon batches."""
    settings = load_settings(data_dir=data_dir)
    embedder = Embedder(settings.model, data_dir / "models", settings.embed_batch_size)
    started = time.perf_counter()
    embedder.embed(texts)
    return len(texts) / (time.perf_counter() - started)


def first_pass_alone(texts: list[str]) -> float:
    """Texts per second of the first pass alone (memoryd/static_embedding.py), one thread."""
    embedder = static_embedding.load()
    started = time.perf_counter()
    for start in range(0, len(texts), FIRST_PASS_BATCH):
        embedder.embed(texts[start : start + FIRST_PASS_BATCH])
    return len(texts) / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=1800)
    parser.add_argument("--model-sample", type=int, default=2000)
    args = parser.parse_args()
    root = args.repo.resolve()
    work = Path(tempfile.mkdtemp(prefix="mds-", dir="/tmp"))
    try:
        data_dir = work / "data"
        max_chars = load_settings(data_dir=data_dir).chunk_max_chars
        targets = sample_targets(root, args.targets, max_chars)
        print(f"repo: {root}, {sum(1 for _ in walk(root))} files; load {load()}", flush=True)
        daemon = Daemon(data_dir, root, work / "daemon.log")
        try:
            marks = await watch(daemon, targets, args.max_seconds)
        finally:
            daemon.stop()
        print(
            f"symbol search, {len(targets)} targets over the tree: "
            f"{spread([t.symbol_at for t in targets])}"
        )
        print(f"keyword search, same targets: {spread([t.keyword_at for t in targets])}")
        if "minute" in marks:
            done, total = marks["minute"]
            print(
                f"at 60 s: {done}/{total} files in the lexical index, {marks['minute_chunks']} "
                f"chunks, {marks['minute_owed']} of them waiting for vectors "
                f"(load {marks['minute_load']})"
            )
        if "lexical" in marks:
            print(
                f"lexical index complete: {marks['files']} files, {marks['chunks']} chunks after "
                f"{marks['lexical']:.1f} s (target ≤ 60 s; load {marks['lexical_load']})"
            )
            print(
                f"every chunk has a vector (first pass, written with its words) after "
                f"{marks['lexical']:.1f} s (target ≤ 600 s; load {marks['lexical_load']})"
            )
        texts = chunk_texts(root, max_chars)
        if "semantic" in marks:
            pipeline = len(texts) / marks["semantic"]
            print(
                f"semantic index complete after {marks['semantic']:.1f} s (load "
                f"{marks['semantic_load']}): {len(texts)} distinct texts, {pipeline:.1f} texts/s "
                "from the daemon's start"
            )
            sample = texts
        else:
            print(
                f"semantic index not complete after {args.max_seconds:.0f} s: "
                f"{marks.get('owed')} of {marks.get('chunks_now')} chunks still wait for vectors"
            )
            pipeline = None
            sample = random.Random(3).sample(texts, min(args.model_sample, len(texts)))
        print(f"model alone starts on {len(sample)} texts, load {load()}", flush=True)
        rate = model_alone(sample, work / "model")
        print(f"model alone: {rate:.1f} texts/s (load {load()})")
        first = first_pass_alone(sample)
        print(
            f"first pass alone: {first:.1f} texts/s (load {load()}): {first / rate:.1f}x "
            "the model's per chunk (target >= 10x)"
        )
        if pipeline is not None:
            print(f"ratio pipeline/model (distinct texts/s): {pipeline / rate:.2f} (target ≥ 0.9)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
