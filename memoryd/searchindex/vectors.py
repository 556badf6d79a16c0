"""An ANN index: usearch HNSW over integer labels, persisted as a checkpoint plus a journal.

usearch saves a whole index at once (about 90 MB at 100k 384-d f16 vectors), too much for
every job's commit. So a commit appends its changes to a journal (label + vector, or a
removal, or a reset to a new dimension) and the checkpoint is rewritten only when the journal
has grown past a fraction of it. Replaying the journal is idempotent, so a crash between the
checkpoint's rename and the journal's truncation loses nothing. The caller says how many
journal bytes are committed (its stamp); bytes past that are a write that never committed.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from threading import Lock, Thread

import numpy as np
import onnxruntime  # noqa: F401  # before usearch: in the other order, loading onnxruntime segfaults
from usearch.index import Index, ScalarKind

from .disk import disk_faults

log = logging.getLogger(__name__)

_SET, _REMOVE, _RESET = 1, 2, 3
# op, label, n: a set is followed by its n float32; a reset's n is the new dimension.
_HEAD = struct.Struct("<BQI")
# The files of an index named N: N.usearch (the checkpoint) and N.journal.
CHECKPOINT_SUFFIX = ".usearch"
JOURNAL_SUFFIX = ".journal"
# Rewrite the checkpoint when the journal exceeds this and a quarter of the checkpoint.
MIN_CHECKPOINT_BYTES = 32 << 20
# The first label of the placeholders `erase` writes over freed slots: above every row's.
_PLACEHOLDER = 1 << 63
# Half precision: half the memory and disk of f32 (bench/search.py measures both).
DTYPE = "f16"
# HNSW graph degree and search beam. On the first-pass vectors of 100k real code chunks with
# 40% retired (bench/ann_recall.py), recall@10 against an exact scan, valid now / as_of: a beam
# of 64 (usearch's default) 0.77 / 0.80, 512 0.944 / 0.940, 1024 0.960 / 0.954 (~1.3 ms more
# CPU a search), 2048 0.973 / 0.973. A graph degree of 32 did not help (0.934 at 512). The beam
# is a search-time setting: saved indexes take it when loaded, without a rebuild.
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 1024
# Rows an exact scan reads from the index at a time (1 MiB of float32 at 256 dims). On the
# 56k rows of a path glob at 1M rows, CPU per scan: 1,024 at a time 164-186 ms, 4,096 353-403
# ms, 16,384 243-251 ms, all at once 241-250 ms (3 rounds of 20 queries, loaded machine).
EXACT_CHUNK = 1024
# Threads of an insertion: one in the daemon, whose writer leaves the other core to queries;
# a bench building a million rows in one go sets 0 (every core).
ADD_THREADS = 1
# A fresh graph replaces one in which new vectors took this share of its size in freed
# slots. usearch gives a removed key's slot to the next key added, but the links of other
# nodes to that slot stay and now lead to an unrelated vector, so a graph of re-indexed files
# loses recall with every round. On 10k first-pass vectors of numpy's source, churned by 1k
# at a time, recall@10 against an exact scan (fresh graph of the same vectors 0.99-1.0):
# slots reused 0.2x the size 0.988, 0.4x 0.972, 1x 0.970, 2x 0.932. Churned 1.6x in rounds
# of 4k: 0.962; the same removals with no slot reused 0.995; usearch's remove(compact=True),
# which cuts the links to removed slots, 0.915 (bench/search.py measures 100k and 1M).
RENEW_SHARE = 0.25
# Vectors a renewal reads from the worn graph at a time (under the lock searches take); a
# stop waits for at most one chunk's adds.
RENEW_CHUNK = 4096


def _new(dim: int, dtype: str | ScalarKind) -> Index:
    return Index(
        ndim=dim,
        metric="cos",
        dtype=dtype,
        connectivity=CONNECTIVITY,
        expansion_add=EXPANSION_ADD,
        expansion_search=EXPANSION_SEARCH,
    )


class _Renewal:
    """A fresh graph built in a thread of its own from the vectors a worn one held at the
    start (its labels then), and the labels writes touched since, which are brought over into
    it: by its thread while they are many, then by the swap."""

    def __init__(self, worn: Index, build: Callable[[_Renewal], None]) -> None:
        self.labels = np.asarray(worn.keys[:], np.uint64)
        self.fresh = _new(worn.ndim, worn.dtype)
        self.touched: set[int] = set()
        self.erased = False  # the swap overwrites the slots it frees
        self.stopped = False
        self.built = False
        self.started = time.perf_counter()
        self.thread = Thread(target=build, args=(self,), name="renew-ann", daemon=True)
        # The fresh graph's slots freed and not taken yet, and taken again (Vectors.wear).
        self.free = self.reused = 0

    def bring_over(self, touched: set[int], held: np.ndarray, vectors: np.ndarray) -> None:
        """The writes since the build read these labels: each out of the fresh graph, and
        those the worn graph holds (`held`) set again with their `vectors`. Only one thread
        at a time uses the fresh graph until it takes the worn one's place: no lock."""
        keys = np.fromiter(touched, np.uint64, len(touched))
        gone = keys[np.asarray(self.fresh.contains(keys), bool).reshape(-1)] if len(keys) else keys
        if len(gone):
            self.fresh.remove(gone)
        if len(held):
            self.fresh.add(held, vectors, threads=ADD_THREADS)
        taken = min(len(held), self.free + len(gone))
        self.free += len(gone) - taken
        self.reused += taken


class Vectors:
    """One writer, many readers: every use of the usearch index holds `_lock` (its removals
    are not safe against concurrent searches). It counts the slots that removals freed and
    that adds took again since the graph was built (`wear`), for `renew`."""

    def __init__(self, directory: Path, name: str, dtype: str = DTYPE) -> None:
        self._checkpoint = directory / (name + CHECKPOINT_SUFFIX)
        self._journal = directory / (name + JOURNAL_SUFFIX)
        # For new indexes: a checkpoint keeps the type it was saved with.
        self._dtype = dtype
        self._lock = Lock()
        self._index: Index | None = None
        self._pending = bytearray()
        # Slots freed and not taken yet; slots taken again since the graph was built.
        self._free = 0
        self._reused = 0
        self._renewal: _Renewal | None = None

    @property
    def dim(self) -> int | None:
        return self._index.ndim if self._index is not None else None

    def __len__(self) -> int:
        with self._lock:
            return 0 if self._index is None else self._index.size

    @property
    def wear(self) -> tuple[int, int]:
        """Slots freed and not taken yet, and slots taken again since the graph was built
        (the caller keeps them with the journal's committed length)."""
        return self._free, self._reused

    def open(self, committed: int, wear: Sequence[int] = (0, 0)) -> None:
        """Load the checkpoint and replay the first `committed` bytes of the journal;
        `wear` is what `wear` said when those bytes were committed."""
        if self._checkpoint.exists():
            self._index = Index.restore(str(self._checkpoint))
            if self._index is not None:
                self._index.expansion_search = EXPANSION_SEARCH
        journal = self._journal
        data = journal.read_bytes()[:committed] if journal.exists() else b""
        self._replay(data)
        with open(journal, "ab") as f:
            f.truncate(len(data))
        self._free, self._reused = wear

    def _replay(self, data: bytes) -> None:
        pos, sets = 0, {}
        while pos + _HEAD.size <= len(data):
            op, label, n = _HEAD.unpack_from(data, pos)
            pos += _HEAD.size
            # Consecutive sets are applied in one batch (far faster than one at a time).
            if op == _SET:
                sets[label] = np.frombuffer(data, np.float32, n, pos)
                pos += 4 * n
                continue
            self._apply_sets(sets)
            sets = {}
            if op == _REMOVE:
                self._remove([label])
            elif op == _RESET:
                self._index = _new(n, self._dtype) if n else None
                self._free = self._reused = 0
        self._apply_sets(sets)

    def _apply_sets(self, sets: dict[int, np.ndarray]) -> None:
        if sets:
            self._set(np.fromiter(sets, np.uint64, len(sets)), np.stack(list(sets.values())))

    def _set(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        self._remove(labels)
        self._add(labels, vectors)

    def _add(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        """Add labels the index does not hold; each takes a freed slot while there is one."""
        assert self._index is not None
        self._index.add(labels, vectors, threads=ADD_THREADS)
        taken = min(len(labels), self._free)
        self._free -= taken
        self._reused += taken
        if self._renewal is not None:
            self._renewal.touched.update(labels.tolist())

    def _remove(self, labels: Sequence[int] | np.ndarray) -> np.ndarray:
        """Remove those of `labels` the index holds; returns them."""
        if self._index is None or self._index.size == 0 or not len(labels):
            return np.empty(0, np.uint64)
        keys = np.asarray(labels, np.uint64)
        present = keys[np.asarray(self._index.contains(keys), bool).reshape(-1)]
        if len(present):
            self._index.remove(present)
            self._free += len(present)
            if self._renewal is not None:
                self._renewal.touched.update(present.tolist())
        return present

    def _overwrite(self, n: int) -> None:
        """Placeholders, under labels no row has (row labels are 63-bit), take `n` freed
        slots and are removed in turn: usearch keeps a removed vector in its slot (and in
        every save) until an add takes the slot again."""
        assert self._index is not None
        fill = np.arange(n, dtype=np.uint64) + np.uint64(_PLACEHOLDER)
        self._add(fill, np.ones((n, self._index.ndim), np.float32))
        self._remove(fill)

    # -- writes (the writer thread) ------------------------------------------------------

    def reset(self, dim: int | None) -> None:
        """Drop every vector; the next vectors have `dim` components (None: no index)."""
        self.stop_renewal()
        with self._lock:
            self._index = _new(dim, self._dtype) if dim else None
            self._free = self._reused = 0
        self._pending += _HEAD.pack(_RESET, 0, dim or 0)

    def set(self, labels: Sequence[int], vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, np.float32)
        if self._index is None or vectors.shape[1] != self._index.ndim:
            raise ValueError(f"vectors of {vectors.shape[1]} dims in an index of {self.dim}")
        with self._lock:
            self._set(np.asarray(labels, np.uint64), vectors)
        for label, vector in zip(labels, vectors, strict=True):
            self._pending += _HEAD.pack(_SET, label, len(vector)) + vector.tobytes()

    def remove(self, labels: Sequence[int]) -> None:
        # Only labels held are journalled: a replay reaches the same state at this point.
        with self._lock:
            present = self._remove(labels)
        self._journal_removals(present)

    def _journal_removals(self, labels: np.ndarray) -> None:
        for label in labels.tolist():
            self._pending += _HEAD.pack(_REMOVE, label, 0)

    def erase(self, labels: Sequence[int]) -> bool:
        """Remove, leaving no byte of the vectors in the index (`_overwrite`), nor in a
        fresh graph being built. The journal still holds the vectors as they were set: the
        caller checkpoints next. Returns whether any was held."""
        with self._lock:
            present = self._remove(labels)
            if len(present):
                self._overwrite(len(present))
                if self._renewal is not None:
                    self._renewal.erased = True
        self._journal_removals(present)
        return len(present) > 0

    def renew(self) -> bool:
        """The writer's call at each commit. A graph in which adds took freed slots past
        RENEW_SHARE of its size is rebuilt in a thread of its own (one at a time, ADD_THREADS),
        while writes go on in the worn graph and searches read it. Once built, the fresh graph
        takes the worn one's place here, with the labels written since brought over; it holds
        the same labels and vectors, so the journal replays over either alike. Returns whether
        it did (the caller checkpoints next)."""
        renewal, swapped = self._renewal, False
        if renewal is not None and not renewal.thread.is_alive():
            self._renewal = None
            if renewal.built:  # else its thread failed (threading logs why): started again
                self._swap(renewal)
                swapped = True
        index = self._index
        if self._renewal is None and index is not None and self._reused > RENEW_SHARE * index.size:
            with self._lock:
                self._renewal = _Renewal(index, self._build)
            self._renewal.thread.start()
        return swapped

    def _swap(self, renewal: _Renewal) -> None:
        # Only the writer changes the worn graph, and searches go on in it meanwhile.
        last = len(renewal.touched)
        renewal.bring_over(renewal.touched, *self.get(list(renewal.touched)))
        with self._lock:
            reused = self._reused
            self._index, self._free, self._reused = renewal.fresh, renewal.free, renewal.reused
            if renewal.erased and self._free:
                self._overwrite(self._free)
        log.info(
            "%s: a fresh ANN graph of %d vectors (adds had taken %d freed slots; %d labels "
            "written since the build read them brought over by the swap) in %.1f s",
            self._checkpoint.stem,
            renewal.fresh.size,
            reused,
            last,
            time.perf_counter() - renewal.started,
        )

    def _build(self, renewal: _Renewal) -> None:
        """The renewal's thread: the fresh graph of the vectors its labels hold now, read a
        chunk at a time (those removed since the start are left out, and the swap brings
        over every label written since). The worn graph stays the index until the swap: a
        reset or a close stops this thread before it replaces it."""
        for start in range(0, len(renewal.labels), RENEW_CHUNK):
            if renewal.stopped:
                return
            keys, vectors = self.get(renewal.labels[start : start + RENEW_CHUNK])
            if len(keys):
                renewal.fresh.add(keys, vectors, threads=ADD_THREADS)
        # The writes made meanwhile are brought over here while they are many and fewer
        # each round, so that the writer's swap has few left to bring over.
        before = float("inf")
        while not renewal.stopped:
            with self._lock:
                touched = renewal.touched
                if not RENEW_CHUNK < len(touched) < before:
                    break
                renewal.touched = set()
            renewal.bring_over(touched, *self.get(list(touched)))
            before = len(touched)
        renewal.built = True

    def wait_renewal(self) -> bool:
        """Until a renewal's build is done (the next `renew` swaps it in); returns whether
        one was under way."""
        if self._renewal is None:
            return False
        self._renewal.thread.join()
        return True

    def stop_renewal(self) -> None:
        """Abandon a renewal (a close, a reset): the worn graph and the journal stay as valid
        as ever, and the wear they keep in the stamp renews it at a later commit."""
        renewal, self._renewal = self._renewal, None
        if renewal is not None:
            renewal.stopped = True
            renewal.thread.join()

    def flush(self) -> int:
        """Append pending changes to the journal, durably; returns the committed length."""
        with open(self._journal, "ab") as f:
            if self._pending:
                f.write(self._pending)
                f.flush()
                os.fsync(f.fileno())
            length = f.tell()
        self._pending.clear()
        return length

    def due(self, journal_bytes: int) -> bool:
        checkpoint = self._checkpoint
        size = checkpoint.stat().st_size if checkpoint.exists() else 0
        return journal_bytes > max(MIN_CHECKPOINT_BYTES, size // 4)

    def checkpoint(self) -> None:
        """Save the whole index and empty the journal (callers stamp a journal length of 0)."""
        checkpoint = self._checkpoint
        with self._lock:
            if self._index is None:
                checkpoint.unlink(missing_ok=True)
            else:
                tmp = checkpoint.with_suffix(".tmp")
                with disk_faults(RuntimeError, where=f"cannot write {tmp}: "):
                    self._index.save(str(tmp))
                os.chmod(tmp, 0o600)
                os.replace(tmp, checkpoint)
        with open(self._journal, "r+b") as f:
            f.truncate(0)
            os.fsync(f.fileno())

    # -- reads ----------------------------------------------------------------------------

    def search(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Labels and cosine distances of the `k` nearest, nearest first."""
        with self._lock:
            if self._index is None or self._index.size == 0:
                return np.empty(0, np.uint64), np.empty(0, np.float32)
            found = self._index.search(vector, min(k, self._index.size), threads=1)
            return np.asarray(found.keys, np.uint64), np.asarray(found.distances, np.float32)

    def get(self, labels: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Those of `labels` the index holds, and their vectors (a row per label)."""
        keys = np.asarray(labels, np.uint64)
        with self._lock:
            if self._index is None or not len(keys):
                return np.empty(0, np.uint64), np.empty((0, self.dim or 0), np.float32)
            keys = keys[np.asarray(self._index.contains(keys), bool).reshape(-1)]
            if not len(keys):
                return keys, np.empty((0, self._index.ndim), np.float32)
            return keys, np.asarray(self._index.get(keys), np.float32).reshape(len(keys), -1)

    def exact(self, vector: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
        """The `k` nearest among `labels` by an exact scan (for filters that keep few rows of
        the index, which at 1M rows can still be 50k: a path glob). Read EXACT_CHUNK rows at a
        time, keeping the nearest `k` so far: all of them at once held 50k vectors as float32,
        and their float16 copy, ~110 MiB at the peak of the serving process."""
        found, distances = np.empty(0, np.uint64), np.empty(0, np.float32)
        norm = float(np.linalg.norm(vector))
        for start in range(0, len(labels), EXACT_CHUNK):
            keys, matrix = self.get(labels[start : start + EXACT_CHUNK])
            if not len(keys):
                continue
            norms = np.linalg.norm(matrix, axis=1) * norm
            near = 1.0 - (matrix @ vector) / np.maximum(norms, 1e-12)
            # The nearest so far first: a stable sort keeps them ahead of ties read later,
            # the order one scan of every row gave.
            found = np.concatenate([found, keys])
            distances = np.concatenate([distances, near.astype(np.float32)])
            order = np.argsort(distances, kind="stable")[:k]
            found, distances = found[order], distances[order]
        return found, distances
