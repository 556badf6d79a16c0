"""Cold-index a real source tree and compare with the model's own throughput on the same chunks.

    .venv/bin/python -m bench.index_throughput [--files 300]

The tree is built from installed packages' source (code nobody here wrote), copied to a temp dir
and `git init`-ed. The whole pipeline runs as the daemon runs it: private Redis, arq worker,
tree-sitter chunking, the offline model, embedded SurrealDB. Then the same chunk texts are
embedded by the model alone, in batches of the configured size (`embed_batch_size`; on 2 cores
one at a time is the model's fastest): that is the physical limit the pipeline is measured
against.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from memoryd import projects, queue
from memoryd.config import load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.scan import read_source, walk
from workers.indexing import plan_file

PACKAGES = (
    "rich",
    "click",
    "httpx",
    "watchdog",
    "pydantic_settings",
    "arq",
    "typer",
    "anyio",
    "pathspec",
    "redis",
    "surrealdb",
    "fastembed",
    "pydantic",
    "mcp",
    "aiohttp",
    "huggingface_hub",
    "starlette",
    "jsonschema",
    "cryptography",
    "_pytest",
)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def build_tree(target: Path, files: int) -> int:
    """Copy .py files of installed packages until `files` are in place; returns the count."""
    copied = 0
    for name in PACKAGES:
        if importlib.util.find_spec(name) is None:
            continue  # a package memoryd no longer installs: the tree is a little smaller
        package = Path(importlib.import_module(name).__file__ or "").parent
        for source in sorted(package.rglob("*.py")):
            if "__pycache__" in source.parts:
                continue
            dest = target / name / source.relative_to(package)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
            copied += 1
            if copied >= files:
                break
        if copied >= files:
            break
    subprocess.run(["git", "init", "-q", str(target)], check=True)
    return copied


async def cold_index(data_dir: Path, root: Path) -> tuple[float, dict[str, int], Runtime]:
    rt = Runtime(load_settings(data_dir=data_dir))
    await rt.start_queue(exclusive=True)
    await rt.serve()
    assert rt.redis is not None
    started = time.perf_counter()
    jobs = await projects.sync(rt.redis, projects.resolve(root), rt.settings.index_batch_files)
    totals = {"files": 0, "indexed": 0, "chunks": 0, "embedded": 0}
    reports = []
    for job, _ in jobs:
        report = await queue.wait_for(job, timeout=3600)
        reports.append(report)
        for key in totals:
            totals[key] += report[key]
    # The chunks are searchable by words now; their vectors come from the jobs each queued.
    lexical = time.perf_counter() - started
    print(f"chunks written and searchable by words after {lexical:.1f} s (load {load()})")
    for report in reports:
        totals["embedded"] += await queue.embedded_later(rt.redis, report, timeout=3600)
    return time.perf_counter() - started, totals, rt


def chunk_texts(root: Path, max_chars: int) -> list[str]:
    """The same unique chunk texts the pipeline embedded (the chunker is pure)."""
    texts: dict[str, None] = {}
    for rel in walk(root):
        content = read_source((root / rel).read_bytes())
        if content.text is None:
            continue
        for chunk in plan_file("bench", rel, content.text, content.hash, max_chars).chunks:
            texts.setdefault(chunk["content"])
    return list(texts)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=300)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mdb-", dir="/tmp"))
    try:
        root = work / "tree"
        count = build_tree(root, args.files)
        seconds, totals, rt = await cold_index(work / "data", root)
        try:
            texts = chunk_texts(root, rt.settings.chunk_max_chars)
            assert rt.embedder is not None
            print(f"model alone starts, load {load()}")
            started = time.perf_counter()
            rt.embedder.embed(texts)
            model_seconds = time.perf_counter() - started
        finally:
            await rt.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    pipeline_rate = totals["embedded"] / seconds
    model_rate = len(texts) / model_seconds
    print(f"tree: {count} source files from installed packages ({', '.join(PACKAGES[:4])}, ...)")
    print(f"load average at the end: {load()} (2 cores; other work slows all of this)")
    print(
        f"cold index: {totals['files']} files, {totals['chunks']} chunks "
        f"({totals['embedded']} embedded) in {seconds:.1f} s"
    )
    print(f"  files/s  {totals['files'] / seconds:8.1f}")
    print(f"  chunks/s {totals['chunks'] / seconds:8.1f}")
    print(
        f"model alone (batch {rt.settings.embed_batch_size}): {len(texts)} texts in "
        f"{model_seconds:.1f} s "
        f"= {model_rate:.1f} texts/s"
    )
    print(f"ratio pipeline/model (embedded texts/s): {pipeline_rate / model_rate:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
