"""Latency and ANN recall of the derived search indexes (memoryd.searchindex) at 10k, 100k and
1M rows, in-process.

    .venv/bin/python -m bench.search [--rows 10000 100000 1000000] [--trees DIR ...]
        [--vectors model|static|first-pass] [--first-pass FILE.npy] [--cache DIR]
        [--memory-share 0.5] [--retired-share 0.4] [--dtype f16] [--batch 1000] [--keep DIR]
        [--connectivity N] [--expansion-add N] [--expansion-search N] [--fresh]

Rows, every text distinct (bench/corpus.py): code chunks of the `--trees` (default: the installed
packages' source, code nobody here wrote) cut by the indexer's chunker, then line windows of the
same files when a size asks for more; memories (up to `--memory-share` of the rows): the
vendored real transcripts' memories, each text once (only those ingestion embeds have a
vector), so at 100k most rows are code. `--retired-share` of the code rows are history: written
first, then retired (valid_until set) as a re-indexed file's old chunks are, so their vectors
live in the retired rows' ANN index; half the rows valid now were written after that moment,
so an `as_of` search before it sees the retired rows and the older half of the rest.

Vectors (`--vectors`): `model`, the real model's vector of every row (cached by text in
`--cache`; ~37 texts/s on 2 idle cores, so for 10k rows), or `static`, each text's mean of the
real model's vectors of its tokens (bench/corpus.py; the model's output space, far cheaper: for
100k and 1M rows), or `first-pass`, the product's first-pass vectors (memoryd.static_embedding,
256 dims: what a code row holds until the full model reaches it), read for the code rows from
`--first-pass` when given (bench/ann_recall.py's `--vectors` file: the same rows in the same
order, so 1M rows are tokenised once for both benches). Queries: a distinct task-style query
per timed call (bench/fresh_queries.py), its vector computed by the real model inside the
timing, as a user's new query pays it (with `static` or `first-pass` vectors, that kind of
vector of the same query is what is searched).

Prints the build rate (upsert + commit in batches of `--batch`: 1,000 as index jobs do; a
larger batch builds 1M rows sooner, as a rebuild from the database does; the build inserts
vectors on every core, where the daemon uses one); then, from a
process of its own that opens the built index from disk and loads the query model as the daemon
does, the time to reopen, p50/p95 of hybrid, BM25 and k-NN (limit 10) next to the targets, and
that serving process's peak memory (VmHWM; the bench process's own peak counts its rows and
vectors); then recall@10 of memoryd's k-NN against an exact scan of the rows that pass the same
filters (valid now; `as_of` over the retired rows too), on the same RECALL_QUERIES queries for
every filter, with the exact top 10's rows it missed by the ANN index that holds them (rows valid
now, retired rows), and the load average. Build 1M rows
outside the repo: `--cache` and TMPDIR on a disk with a few GB free, and `--keep DIR` to keep
each size's index there and reuse it in later runs (same rows and settings: the caller's
care), so a 1M index is built once. The rows are written in the order of their times (see
`build`); `--fresh` writes the same rows at once, each in its final state, so that no slot of
the ANN index is ever freed: the reference a build in time order is measured against.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import pickle
import random
import resource
import shutil
import statistics
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import blake3
import numpy as np

from bench.corpus import code_docs, memory_docs, model_vectors, static_vectors
from bench.fresh_queries import fresh_queries, take
from memoryd.config import DEFAULT_MODEL
from memoryd.embedding import Embedder
from memoryd.searchindex import Doc, Filters, SearchIndex
from memoryd.searchindex import vectors as ann
from memoryd.static_embedding import load as first_pass

T0 = 1_700_000_000_000_000  # microseconds
RETIRED_AT = T0 + 86_400_000_000
AS_OF = RETIRED_AT - 1
TARGETS = {"hybrid": (20.0, 50.0)}  # at 100k rows: p50, p95 in ms
RECALL_TARGET = 0.95
# The same queries for every filter (a filter's recall is compared with another's on the same
# queries). With 50, and other queries for each filter, one 100k index's recall@10 valid now
# ranged 0.944-0.978 over six blocks of 50 queries (0.964 over the 300).
RECALL_QUERIES = 300
# The daemon's peak memory at 1M rows (issue 34).
SERVING_PEAK_TARGET_MIB = 1536
# Timed calls per search and filter case (each with a query of its own).
SAMPLES = 60
# Written in an index's directory when its build finished (`--keep` reuses only those).
BUILT = "built-by-bench.txt"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


class Queries:
    """Distinct queries, each vector computed when asked: by the real model (what a user's
    query costs), and the static one too when the rows' vectors are static."""

    def __init__(
        self, embedder: Embedder, static: Callable[[list[str]], np.ndarray] | None
    ) -> None:
        self.embedder, self.static, self.texts = embedder, static, fresh_queries()

    def next(self) -> tuple[str, np.ndarray]:
        text = next(self.texts)
        vector = np.asarray(self.embedder.embed_query(text), np.float32)
        return text, vector if self.static is None else self.static([text])[0]

    def first(self, n: int) -> np.ndarray:
        """The vectors of the first `n` queries as they are searched (untimed: for recall)."""
        texts = take(n)
        if self.static is not None:
            return self.static(texts)
        return np.asarray([self.embedder.embed_query(text) for text in texts], np.float32)


def build(
    n: int,
    docs: list[Doc],
    vectors: np.ndarray,
    directory: Path,
    args: argparse.Namespace,
) -> None:
    """The rows written in the order of their times, as the daemon meets them: those written
    before RETIRED_AT, then the history retired, then the rows written after it. So the rows
    written last take the slots the retired rows left in the ANN index of rows valid now, as
    a re-indexed file's new chunks take its old ones' (written before the retiring, they
    left that index holding a freed slot for every retired row: 396k at 1M rows), and the
    index renews a graph once reused slots pass a share of it (their renewals are logged).
    `--fresh`: every row at once in its final state, no slot freed (the reference)."""
    ix, batch = SearchIndex(directory, args.dtype), args.batch
    before = [i for i in range(n) if args.fresh or docs[i].valid_from < RETIRED_AT]
    after = [i for i in range(n) if not args.fresh and docs[i].valid_from >= RETIRED_AT]
    retired = [docs[i].id for i in before if not args.fresh and docs[i].valid_until is not None]
    generation = 0

    def write(rows: list[int]) -> None:
        nonlocal generation
        for lo in range(0, len(rows), batch):
            written = [
                replace(
                    docs[i],
                    valid_until=docs[i].valid_until if args.fresh else None,
                    vector=vectors[i] if docs[i].vector else None,
                )
                for i in rows[lo : lo + batch]
            ]
            ix.upsert(written, DEFAULT_MODEL)
            generation += 1
            ix.commit(generation)

    start, cpu = time.perf_counter(), time.process_time()
    write(before)
    took, took_cpu = time.perf_counter() - start, time.process_time() - cpu
    start = time.perf_counter()
    for lo in range(0, len(retired), batch):
        ix.retire("code_chunk", retired[lo : lo + batch], RETIRED_AT)
        generation += 1
        ix.commit(generation)
    retire = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    write(after)
    took, took_cpu = took + time.perf_counter() - start, took_cpu + time.process_time() - cpu
    # A renewal still under way when the writes end is waited for (a close would abandon
    # it): the searches below meet the graph the daemon has once it is done.
    start = time.perf_counter()
    ix.settle()
    settle = time.perf_counter() - start
    ix.close()
    size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    # Retired by `retire`, or (`--fresh`) written so.
    history = sum(docs[i].valid_until is not None for i in before)
    said = (
        f"build {n / took:,.0f} rows/s ({took:.0f} s, {took_cpu:.0f} CPU s of this process; "
        f"upsert+commit per {batch:,}; {len(before):,} rows, {history:,} of them retired, "
        f"then {len(after):,}); retire {len(retired) / max(retire, 1e-9):,.0f} rows/s; "
        f"renewals waited for after the writes {settle:.1f} s; "
        f"on disk {size / 2**20:.0f} MiB; load {load()}"
    )
    print(said, flush=True)
    (directory / BUILT).write_text(said + "\n")


def passing(docs: list[Doc], filters: Filters) -> np.ndarray:
    """Indexes of the rows with a vector that `filters` keep (kinds and validity only)."""
    keep = []
    for i, d in enumerate(docs):
        if d.kind not in filters.kinds or not d.vector:
            continue
        if filters.as_of is None:
            valid = d.valid_until is None
        else:
            valid = d.valid_from <= filters.as_of and (
                d.valid_until is None or d.valid_until > filters.as_of
            )
        if valid:
            keep.append(i)
    return np.asarray(keep, np.int64)


def exact_top(
    queries: np.ndarray, matrix: np.ndarray, labels: np.ndarray, k: int = 10
) -> list[set[int]]:
    """The `labels` of each query's `k` nearest rows of `matrix` by an exact scan."""
    # The vectors are unit rows (or zero), so the dot product orders as cosine distance does.
    # argpartition, not a full sort: at 1M rows a sort per query costs minutes.
    found, k = [], min(k, len(matrix))  # a filter may pass fewer rows than k
    for lo in range(0, len(queries), 50):
        scores = queries[lo : lo + 50] @ matrix.T
        nearest = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        found += [set(labels[row].tolist()) for row in nearest]
    return found


def recall(
    ix: SearchIndex,
    docs: list[Doc],
    vectors: np.ndarray,
    filters: Filters,
    queries: np.ndarray,
) -> tuple[float, int, tuple[int, int]]:
    """Mean recall@10 of memoryd's k-NN against an exact scan of the rows that pass; the
    rows of the exact top 10 it missed, of rows valid now and of retired rows (each kind in
    an ANN index of its own: which index lost them)."""
    rows = passing(docs, filters)
    found, missed = 0, [0, 0]
    for vector, exact in zip(queries, exact_top(queries, vectors[rows], rows), strict=True):
        got = {h.id for h in ix.knn(vector, DEFAULT_MODEL, filters, 10)}
        for i in exact:
            if docs[i].id in got:
                found += 1
            else:
                missed[docs[i].valid_until is not None] += 1
    return found / (10 * len(queries)), len(rows), (missed[0], missed[1])


def serving_peak_mib() -> float:
    """This process's peak resident memory (VmHWM), as the kernel counts it for a daemon."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return peak_mib()  # no /proc: getrusage's figure is the same peak


def query_vectors(kind: str, cache: Path) -> Callable[[list[str]], np.ndarray] | None:
    """How a query is embedded for rows of `--vectors` `kind` (None: the real model's)."""
    if kind == "static":
        return lambda texts: static_vectors(texts, cache)
    if kind == "first-pass":
        return first_pass().embed
    return None


def serve(
    directory: Path,
    dtype: str,
    project: str,
    vectors: tuple[str, Path],
    hnsw: tuple[int, int, int],
) -> None:
    """The serving side, in a process of its own as in the daemon: the index opened from disk
    and the query model loaded, nothing of the bench's rows or vectors, so its peak memory is
    what serving this many rows costs. Times each search with a fresh query's vector."""
    # The HNSW settings the bench was asked for: a spawned process imports the product's.
    ann.CONNECTIVITY, ann.EXPANSION_ADD, ann.EXPANSION_SEARCH = hnsw
    embedder = Embedder(DEFAULT_MODEL, directory.parent / "models")
    queries = Queries(embedder, query_vectors(*vectors))
    start = time.perf_counter()
    ix = SearchIndex(directory, dtype)
    print(f"reopen {(time.perf_counter() - start) * 1000:.0f} ms", flush=True)
    cases = {
        "valid now, code": Filters(),
        "as_of (before retiring)": Filters(as_of=AS_OF),
        "one project": Filters(project=project),
        "path glob": Filters(path="**/test*/**"),
        "memories": Filters(kinds=("memory",)),
        "every kind": Filters(kinds=("code", "docs", "memory", "goal")),
    }
    for label, filters in cases.items():
        names = ("hybrid", "bm25", "knn")
        times: dict[str, list[float]] = {name: [] for name in (*names, "of it the vector")}
        for sample in range(SAMPLES + 5):  # the first 5 warm up
            for name in names:
                started = time.perf_counter()
                text, vector = queries.next()
                embedded = time.perf_counter()
                if name == "hybrid":
                    ix.hybrid(text, vector, DEFAULT_MODEL, filters, 10)
                elif name == "knn":
                    ix.knn(vector, DEFAULT_MODEL, filters, 10)
                else:
                    started = embedded  # BM25 asks for no vector
                    ix.bm25(text, filters, 10)
                if sample >= 5:
                    times[name].append((time.perf_counter() - started) * 1000)
                    if name != "bm25":
                        times["of it the vector"].append((embedded - started) * 1000)
        parts = []
        for name, samples in times.items():
            p50, p95 = percentiles(samples)
            target = ""
            if name in TARGETS and len(ix) >= 100_000:
                t50, t95 = TARGETS[name]
                target = f" (target <= {t50:.0f} / {t95:.0f})"
            parts.append(f"{name} p50 {p50:.2f} / p95 {p95:.2f} ms{target}")
        print(f"  {label:26} " + "; ".join(parts), flush=True)
    ix.close()
    print(
        f"  peak memory of the serving process (VmHWM: index + query model) "
        f"{serving_peak_mib():,.0f} MiB (target <= {SERVING_PEAK_TARGET_MIB:,} MiB at 1M); "
        f"load {load()}",
        flush=True,
    )


def run(
    n: int,
    docs: list[Doc],
    vectors: np.ndarray,
    queries: Queries,
    args: argparse.Namespace,
    workdir: Path,
) -> None:
    docs = docs[:n]
    retired = sum(d.valid_until is not None for d in docs)
    memories = sum(d.table == "memory" for d in docs)
    print(
        f"\n== {n:,} rows ({retired:,} retired, {memories:,} memories), vectors {args.dtype}, "
        f"HNSW connectivity {ann.CONNECTIVITY}, expansion add {ann.EXPANSION_ADD} / search "
        f"{ann.EXPANSION_SEARCH}; load {load()}"
    )
    name = f"index-{n}-{args.vectors}-{args.dtype}" + ("-fresh" if args.fresh else "")
    kept = None if args.keep is None else args.keep / name
    directory = kept or workdir / f"index-{n}"
    if kept is not None and (kept / BUILT).exists():
        print(f"reusing the index built before in {kept}: {(kept / BUILT).read_text()}", end="")
    else:
        shutil.rmtree(directory, ignore_errors=True)  # a build cut short
        build(n, docs, vectors, directory, args)
    # Spawned, not forked: a fork would count this process's rows and vectors as its memory.
    server = multiprocessing.get_context("spawn").Process(
        target=serve,
        args=(
            directory,
            args.dtype,
            docs[0].project,
            (args.vectors, args.cache),
            (ann.CONNECTIVITY, ann.EXPANSION_ADD, ann.EXPANSION_SEARCH),
        ),
    )
    server.start()
    server.join()
    if server.exitcode != 0:
        raise SystemExit(f"the serving process failed ({server.exitcode})")
    ix = SearchIndex(directory, args.dtype)
    filters = {
        "valid now, code": Filters(),
        "as_of (before retiring)": Filters(as_of=AS_OF),
        "memories": Filters(kinds=("memory",)),
        "every kind": Filters(kinds=("code", "docs", "memory", "goal")),
    }
    same = queries.first(RECALL_QUERIES)
    for label, where in filters.items():
        got, among, (now, retired) = recall(ix, docs, vectors, where, same)
        print(
            f"  recall@10 {label:26} {got:.3f} among {among:,} rows "
            f"(target >= {RECALL_TARGET}, {RECALL_QUERIES} queries, the same for each filter); "
            f"missed {now:,} rows valid now, {retired:,} retired; load {load()}",
            flush=True,
        )
    print(f"  peak memory of this bench process {peak_mib():,.0f} MiB; load after: {load()}")
    ix.close()
    if kept is None:
        shutil.rmtree(directory, ignore_errors=True)


def cached_code_docs(trees: list[Path], count: int, cache: Path) -> list[Doc]:
    """`code_docs`, kept in `cache` (chunking 6,000 files takes minutes on a loaded machine)."""
    key = blake3.blake3(repr((sorted(map(str, trees)), count, T0)).encode()).hexdigest()[:16]
    path = cache / f"code-docs-{key}.pickle"
    if path.exists():
        docs: list[Doc] = pickle.loads(path.read_bytes())
        return docs
    docs = code_docs(trees, count, T0)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(docs))
    return docs


def dataset(args: argparse.Namespace, most: int) -> list[Doc]:
    """`most` rows, memories interleaved with code; `--retired-share` of the code retired at
    RETIRED_AT, half the rest written after it."""
    memories = [
        replace(d, vector=[1.0] if embedded else None)  # a mark: rows ingestion embeds
        for d, embedded in memory_docs(int(most * args.memory_share))
    ]
    # Cached by `most` (bench/ann_recall.py asks the same), the memories' share left out.
    code = cached_code_docs(args.trees, most, args.cache)[: most - len(memories)]
    rng = random.Random(11)
    marked = []
    for d in code:
        draw = rng.random()
        if draw < args.retired_share:
            marked.append(replace(d, valid_until=RETIRED_AT, vector=[1.0]))
        elif draw < args.retired_share + (1 - args.retired_share) / 2:
            marked.append(replace(d, valid_from=RETIRED_AT, vector=[1.0]))
        else:
            marked.append(replace(d, vector=[1.0]))
    step = len(marked) / max(len(memories), 1)
    placed = [(float(i), d) for i, d in enumerate(marked)]
    placed += [(i * step, d) for i, d in enumerate(memories)]
    return [d for _, d in sorted(placed, key=lambda pair: pair[0])]


def first_pass_vectors(docs: list[Doc], known: Path | None) -> np.ndarray:
    """The first-pass vector of each row with a vector (zeros elsewhere): the code rows' from
    `known` (the code rows' vectors in their order, as bench/ann_recall.py saves them) as far
    as it reaches, the rest embedded now."""
    vectors = np.zeros((len(docs), first_pass().dim), np.float32)
    code = [i for i, d in enumerate(docs) if d.table == "code_chunk"]
    saved = np.load(known, mmap_mode="r")[: len(code)] if known else vectors[:0]
    vectors[code[: len(saved)]] = saved
    have = set(code[: len(saved)])
    rest = [i for i, d in enumerate(docs) if d.vector and i not in have]
    vectors[rest] = first_pass().embed([docs[i].content for i in rest])
    return vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--trees",
        type=Path,
        nargs="+",
        default=[Path(sysconfig.get_paths()["purelib"])],
    )
    parser.add_argument("--vectors", choices=("model", "static", "first-pass"), default="model")
    parser.add_argument("--first-pass", type=Path, help="first-pass vectors of the code rows")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "md-bench")
    parser.add_argument("--memory-share", type=float, default=0.5)
    parser.add_argument("--retired-share", type=float, default=0.4)
    parser.add_argument("--dtype", choices=("f16", "f32"), default="f16")
    parser.add_argument("--connectivity", type=int, default=ann.CONNECTIVITY)
    parser.add_argument("--expansion-add", type=int, default=ann.EXPANSION_ADD)
    parser.add_argument("--expansion-search", type=int, default=ann.EXPANSION_SEARCH)
    parser.add_argument("--batch", type=int, default=1000, help="rows per upsert and commit")
    parser.add_argument("--keep", type=Path, help="keep each size's index here, reuse it")
    parser.add_argument(
        "--fresh", action="store_true", help="write every row at once in its final state"
    )
    args = parser.parse_args()
    # Each renewal of a graph worn by reused slots, with its time (the build's part of it).
    logging.basicConfig(format="  %(message)s")
    logging.getLogger(ann.__name__).setLevel(logging.INFO)
    # The product's HNSW settings, or others to compare (this process's indexes only).
    ann.CONNECTIVITY, ann.EXPANSION_ADD = args.connectivity, args.expansion_add
    ann.EXPANSION_SEARCH = args.expansion_search
    ann.ADD_THREADS = 0  # this process builds the indexes in one go (see the docstring)
    workdir = Path(tempfile.mkdtemp(prefix="md-search-"))
    try:
        start = time.perf_counter()
        docs = dataset(args, max(args.rows))
        texts = [d.content for d in docs if d.vector]
        print(
            f"{len(docs):,} rows of distinct texts ({sum(d.table == 'memory' for d in docs):,} "
            f"memories, {len(texts):,} with a vector) from {', '.join(map(str, args.trees))} and "
            f"the vendored transcripts in {time.perf_counter() - start:.0f} s; load {load()}"
        )
        start = time.perf_counter()
        cache = args.cache
        if args.vectors == "first-pass":
            vectors = first_pass_vectors(docs, args.first_pass)
        else:
            made = model_vectors(texts, cache) if args.vectors == "model" else None
            if made is None:
                made = static_vectors(texts, cache)
            vectors = np.zeros((len(docs), made.shape[1]), np.float32)
            vectors[[i for i, d in enumerate(docs) if d.vector]] = made
        took = time.perf_counter() - start
        print(f"{args.vectors} vectors of {len(texts):,} texts in {took:.0f} s; load {load()}")
        embedder = Embedder(DEFAULT_MODEL, workdir / "models")
        queries = Queries(embedder, query_vectors(args.vectors, cache))
        for n in sorted(args.rows):
            run(n, docs, vectors, queries, args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
