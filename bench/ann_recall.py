"""ANN recall@10 against an exact scan, on real vectors, through memoryd's vector index class.

The rows are code chunks of real trees (bench/search.py's `cached_code_docs`) embedded by the
product's first-pass model, so 100k real vectors cost a minute; `--vectors` keeps them in a
.npy file (grown to each size as it comes, smallest first). Each size is split as the product
splits it: `--retired-share` of the rows in a retired index, the rest in the valid-now index.
A valid-now search asks the valid index for k × OVERSAMPLE as memoryd's k-NN does with no
filter; an `as_of` search merges both indexes' nearest. Each search beam given is measured on
the same built indexes.

    .venv/bin/python -m bench.ann_recall --vectors CACHE/first-pass.npy --rows 10000 100000
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.fresh_queries import take
from bench.search import cached_code_docs, exact_top
from memoryd.searchindex import vectors as ann
from memoryd.searchindex.index import OVERSAMPLE
from memoryd.searchindex.vectors import EXPANSION_SEARCH, Vectors
from memoryd.static_embedding import load

K = 10
RECALL_TARGET = 0.95
SAVE_EVERY = 100_000


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def real_vectors(args: argparse.Namespace, n: int) -> np.ndarray:
    """The first `n` rows' vectors: those in `--vectors`, the rest embedded now and saved, so a
    small size is measured before a large one's vectors are made."""
    done = np.load(args.vectors) if args.vectors.exists() else np.empty((0, 0), np.float32)
    if len(done) >= n:
        return done[:n]
    docs = cached_code_docs(args.trees, max(args.rows), args.cache)
    args.vectors.parent.mkdir(parents=True, exist_ok=True)
    # Saved every SAVE_EVERY rows: 1M texts take minutes, and a stopped run keeps its part.
    for lo in range(len(done), n, SAVE_EVERY):
        made = load().embed([d.content for d in docs[lo : min(n, lo + SAVE_EVERY)]])
        done = np.concatenate([done, made]) if len(done) else made
        np.save(args.vectors, done)
        print(f"  first-pass vectors: {len(done):,}/{n:,}; load {loadavg()}", flush=True)
    return done


def run(n: int, vectors: np.ndarray, queries: np.ndarray, args: argparse.Namespace) -> None:
    rows = vectors[:n]
    n = len(rows)
    retired = np.zeros(n, bool)
    retired[random.Random(7).sample(range(n), int(n * args.retired_share))] = True
    labels = np.arange(n, dtype=np.uint64)
    with tempfile.TemporaryDirectory(prefix="md-ann-") as tmp:
        now, old = Vectors(Path(tmp), "now"), Vectors(Path(tmp), "retired")
        start = time.process_time()
        for index, mask in ((now, ~retired), (old, retired)):
            index.reset(rows.shape[1])
            index.set(labels[mask].tolist(), rows[mask])
        built = time.process_time() - start
        truth_now = exact_top(queries, rows[~retired], labels[~retired])
        truth_all = exact_top(queries, rows, labels)
        print(
            f"{n:,} rows ({int(retired.sum()):,} retired), built in {built:.0f} CPU s; "
            f"load {loadavg()}",
            flush=True,
        )
        want = int(K * OVERSAMPLE)
        for beam in args.beams:
            for index in (now, old):
                # The beam is a search-time setting of the usearch index (the product sets it
                # from EXPANSION_SEARCH when it makes or loads one).
                index._index.expansion_search = beam  # type: ignore[union-attr]
            got_now, got_all, cpu, wall = [], [], [], []
            for q in queries:
                c, w = time.process_time(), time.perf_counter()
                keys, _ = now.search(q, want)
                got_now.append(set(keys[:K].tolist()))
                both = [now.search(q, want), old.search(q, want)]
                merged = sorted(
                    (d, k)
                    for keys, dist in both
                    for k, d in zip(keys.tolist(), dist.tolist(), strict=True)
                )
                got_all.append({k for _, k in merged[:K]})
                cpu.append((time.process_time() - c) * 1000)
                wall.append((time.perf_counter() - w) * 1000)
            for label, got, truth in (
                ("valid now", got_now, truth_now),
                ("as_of", got_all, truth_all),
            ):
                recall = np.mean([len(g & t) / K for g, t in zip(got, truth, strict=True)])
                print(
                    f"  beam {beam:4}{' (product)' if beam == EXPANSION_SEARCH else '          '} "
                    f"{label:9} recall@{K} {recall:.3f} (target >= {RECALL_TARGET})",
                    flush=True,
                )
            p50, p95 = np.percentile(wall, [50, 95])
            print(
                f"  beam {beam:4} both searches per query: CPU {np.mean(cpu):.2f} ms mean, "
                f"wall p50 {p50:.2f} / p95 {p95:.2f} ms; load {loadavg()}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--vectors", type=Path, required=True, help="the .npy of real vectors")
    parser.add_argument(
        "--trees", type=Path, nargs="+", default=[Path(sysconfig.get_paths()["purelib"])]
    )
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "md-bench")
    parser.add_argument("--retired-share", type=float, default=0.4)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--beams", type=int, nargs="+", default=[64, EXPANSION_SEARCH])
    args = parser.parse_args()
    # The indexes are built in one go here: every core inserts (the daemon's writer uses one).
    # At 1M rows the insertion is the slow stage: ~650 CPU s on one thread, measured.
    ann.ADD_THREADS = 0
    queries = load().embed(take(args.queries))
    for n in sorted(args.rows):
        start = time.process_time()
        vectors = real_vectors(args, n)
        print(
            f"{len(vectors):,} real vectors of {vectors.shape[1]} dims "
            f"({time.process_time() - start:.0f} CPU s); load {loadavg()}",
            flush=True,
        )
        run(n, vectors, queries, args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory of this process {peak:,.0f} MiB; load {loadavg()}")


if __name__ == "__main__":
    main()
