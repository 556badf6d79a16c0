"""Latency of the derived search indexes (memoryd.searchindex) at 10k, 100k and 1M rows,
in-process.

    .venv/bin/python -m bench.search [--rows 10000 100000 1000000] [--memory-share 0.5]
        [--seeds 512] [--dtype f16]

Rows: code chunks and memories. Code: the installed packages' source, readmes and changelogs
(code nobody here wrote), cut by the indexer's own chunker, spread over four projects. When the
packages run out, the files are replayed as older versions: the replayed rows are retired
(valid_until set), as a project's history is, so valid-now searches filter them out and `as_of`
searches see them. Memories (`--memory-share` of the rows): the vendored real transcripts'
memories, made by the ingest stages and mapped to index rows as the daemon maps them, replayed
under new ids; only those ingestion embeds (prompts, messages, goals: not tool results) have a
vector, as in a real index.

Vectors: `--seeds` chunk texts are embedded by the real model; every row's vector is derived
from two of them by mixing and a small perturbation (embedding 100k texts would take an hour on
2 cores). Queries are task-style sentences embedded by the real model.

Prints the build rate (upsert + commit in batches of 1,000, as index jobs do), the time to
reopen from disk, and p50/p95 of hybrid, BM25 and k-NN (limit 10) next to the targets, with the
load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from bench.fixture_rows import whole_file_rows
from memoryd.config import DEFAULT_MODEL
from memoryd.embedding import Embedder
from memoryd.indexsync import doc_of
from memoryd.searchindex import Doc, Filters, SearchIndex
from tests.chunk_docs import chunk_docs
from tests.fixtures import TRANSCRIPTS

PROJECTS = ("alpha", "beta", "gamma", "delta")
SUFFIXES = (".py", ".pyi", ".md", ".rst", ".txt")
BATCH = 1000
T0 = 1_700_000_000_000_000  # microseconds
RETIRED_AT = T0 + 86_400_000_000
QUERIES = (
    "retry the connection when the server closes it",
    "parse a configuration file and merge environment variables",
    "fix type annotations in responses.py",
    "how are http headers encoded",
    "raise an error when the path does not exist",
    "serialize a dataclass to json",
    "read the lock file before installing packages",
    "cache the result of an expensive function",
    "compare two version strings",
    "convert a numpy array to a list of floats",
    "timeout while waiting for the subprocess",
    "where is the default logging handler configured",
    "validate the schema of the user settings",
    "iterate over the lines of a large file lazily",
    "normalize unicode text before comparing",
    "spawn worker threads and join them on shutdown",
    "compute the checksum of a downloaded wheel",
    "render a table in the terminal with colors",
    "handle keyboard interrupt gracefully",
    "tokenize the input into words",
    "fix the broken import in utils.py",
    "add a command line option for verbose output",
    "deprecation warning for an old keyword argument",
    "decode base64 encoded bytes",
    "merge two sorted lists",
    "async context manager that closes the session",
    "what changed in the latest release",
    "test that the parser rejects invalid input",
    "find the maximum of a masked array",
    "build the wheel metadata from pyproject",
)
TARGETS = {"hybrid": (20.0, 50.0)}  # at 100k rows: p50, p95 in ms


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def source_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["purelib"])
    return [
        p
        for p in sorted(root.rglob("*"))
        if p.suffix in SUFFIXES and "__pycache__" not in p.parts and p.is_file()
    ]


def rows(files: list[Path], root: Path, count: int) -> Iterator[Doc]:
    """`count` documents: each pass over the files is one more version of every project; all
    rows a later pass replays are retired by the caller."""
    made = 0
    for version in range(1_000):
        for n, path in enumerate(files):
            try:
                text = path.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            rel = path.relative_to(root).as_posix()
            project = PROJECTS[n % len(PROJECTS)]
            for doc in chunk_docs(project, rel, text, f":v{version}", T0 + version):
                yield doc
                made += 1
                if made >= count:
                    return


def memory_rows(count: int) -> Iterator[tuple[Doc, bool]]:
    """`count` memory rows, each with whether ingestion embeds it: the transcripts' memories,
    replayed under new ids."""
    memories = []
    for path in sorted(TRANSCRIPTS.rglob("*.json*")):
        found = whole_file_rows(str(path))
        if found is None:
            continue
        rows = found[2]
        embedded = {id(row) for row, _ in rows.embed}
        memories += [(row, id(row) in embedded) for row in rows.tables.get("memories", [])]
    made = 0
    for version in range(1_000_000):
        for row, embedded in memories:
            key = f"{row['id'].key}:v{version}"
            yield doc_of("memory", {**row, "key": key, "embedding": None}, DEFAULT_MODEL), embedded
            made += 1
            if made >= count:
                return


def derived_vectors(seeds: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors near the model's: a mix of two seed vectors plus a little noise."""
    a = seeds[rng.integers(0, len(seeds), count)]
    b = seeds[rng.integers(0, len(seeds), count)]
    w = rng.uniform(0.6, 1.0, (count, 1)).astype(np.float32)
    mixed = w * a + (1 - w) * b + rng.normal(0, 0.02, a.shape).astype(np.float32)
    return mixed / np.linalg.norm(mixed, axis=1, keepdims=True)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def run(
    n: int,
    docs: list[Doc],
    vectors: np.ndarray,
    queries: list[tuple[str, list[float]]],
    dtype: str,
    workdir: Path,
    retired: list[str],
    unembedded: set[str],
) -> None:
    directory = workdir / f"index-{n}"
    ix = SearchIndex(directory, dtype)
    start = time.perf_counter()
    for lo in range(0, n, BATCH):
        batch = [
            Doc(**{**_fields(d), "vector": None if d.id in unembedded else vectors[lo + i]})
            for i, d in enumerate(docs[lo : lo + BATCH])
        ]
        ix.upsert(batch, DEFAULT_MODEL)
        ix.commit(lo)
    build = time.perf_counter() - start
    start = time.perf_counter()
    for lo in range(0, len(retired), BATCH):
        ix.retire("code_chunk", retired[lo : lo + BATCH], RETIRED_AT)
        ix.commit(n + lo)
    retire = time.perf_counter() - start
    ix.close()
    start = time.perf_counter()
    ix = SearchIndex(directory, dtype)
    reopen = time.perf_counter() - start
    size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    print(f"\n== {n:,} rows ({len(retired):,} retired), vectors {dtype}, load {load()}")
    print(
        f"build {n / build:,.0f} rows/s (upsert+commit per {BATCH}); "
        f"retire {len(retired) / max(retire, 1e-9):,.0f} rows/s; reopen {reopen * 1000:.0f} ms; "
        f"on disk {size / 2**20:.0f} MiB"
    )
    cases = {
        "valid now, code": Filters(),
        "one project": Filters(project="beta"),
        "path glob": Filters(path="**/tests/**"),
        "as_of (before retiring)": Filters(as_of=RETIRED_AT - 1),
        "memories": Filters(kinds=("memory",)),
        "every kind": Filters(kinds=("code", "docs", "memory", "goal")),
    }
    for label, filters in cases.items():
        # A warm-up pass, then every query three times.
        for text, vector in queries:
            ix.hybrid(text, vector, DEFAULT_MODEL, filters, 10)
        times: dict[str, list[float]] = {"hybrid": [], "bm25": [], "knn": []}
        for text, vector in queries:
            for name, search in (
                ("hybrid", lambda: ix.hybrid(text, vector, DEFAULT_MODEL, filters, 10)),  # noqa: B023
                ("bm25", lambda: ix.bm25(text, filters, 10)),  # noqa: B023
                ("knn", lambda: ix.knn(vector, DEFAULT_MODEL, filters, 10)),  # noqa: B023
            ):
                times[name] += timed(search, 3)
        parts = []
        for name, samples in times.items():
            p50, p95 = percentiles(samples)
            target = ""
            if name in TARGETS and n >= 100_000:
                t50, t95 = TARGETS[name]
                target = f" (target <= {t50:.0f} / {t95:.0f})"
            parts.append(f"{name} p50 {p50:.2f} / p95 {p95:.2f} ms{target}")
        print(f"  {label:26} " + "; ".join(parts))
    print(f"  load average after: {load()}")
    ix.close()


def _fields(doc: Doc) -> dict[str, object]:
    return {name: getattr(doc, name) for name in Doc.__dataclass_fields__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--memory-share", type=float, default=0.5)
    parser.add_argument("--seeds", type=int, default=512)
    parser.add_argument("--dtype", choices=("f16", "f32"), default="f16")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="md-search-"))
    try:
        rng = np.random.default_rng(7)
        files = source_files()
        root = Path(sysconfig.get_paths()["purelib"])
        most = max(args.rows)
        start = time.perf_counter()
        memories = int(most * args.memory_share)
        code = list(rows(files, root, most - memories))
        mem = list(memory_rows(memories))
        unembedded = {doc.id for doc, embedded in mem if not embedded}
        # Interleaved, so that every size holds both in the same shares.
        step = len(code) / max(len(mem), 1)
        placed = [(float(i), d) for i, d in enumerate(code)]
        placed += [(i * step, d) for i, (d, _) in enumerate(mem)]
        docs = [d for _, d in sorted(placed, key=lambda pair: pair[0])]
        print(
            f"{len(code):,} code rows chunked from {len(files):,} installed package files and "
            f"{len(mem):,} memories ({len(mem) - len(unembedded):,} with a vector) from the "
            f"vendored transcripts in {time.perf_counter() - start:.0f} s; load {load()}"
        )
        embedder = Embedder(DEFAULT_MODEL, workdir / "models")
        picks = rng.choice(len(docs), min(args.seeds, len(docs)), replace=False)
        start = time.perf_counter()
        seeds = np.asarray(embedder.embed([docs[i].content for i in picks]), np.float32)
        print(
            f"{len(seeds)} seed vectors from the model in {time.perf_counter() - start:.0f} s; "
            "every row's vector is derived from two seeds (mixed, perturbed)"
        )
        vectors = derived_vectors(seeds, len(docs), rng)
        queries = list(zip(QUERIES, embedder.embed(list(QUERIES)), strict=True))
        for n in sorted(args.rows):
            # A chunk replayed by a later version is history: retire it (a replayed memory is
            # another session's).
            chunks = [d for d in docs[:n] if d.table == "code_chunk"]
            newest: dict[str, str] = {}
            for d in chunks:
                newest[d.id.rsplit(":v", 1)[0]] = d.id
            latest = set(newest.values())
            retired = [d.id for d in chunks if d.id not in latest]
            run(n, docs, vectors, queries, args.dtype, workdir, retired, unembedded)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
