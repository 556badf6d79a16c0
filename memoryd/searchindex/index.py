"""The derived search indexes in one directory: tantivy (BM25) and usearch (ANN), with a stamp.

The vectors are kept in two ANN indexes per search kind, one of rows valid now and one of rows
retired (kept for `as_of`): a kind filter then costs nothing, the rows of a kind with few
vectors (most memories have none) are not sought among the many of another, and a search of
what is valid now never wades through the history of every edited file.

Rows that always get a vector (code chunks) have, until the full model's reaches them, a
first-pass vector (memoryd.static_embedding, given as `first_pass`), computed here from the
row's text as it is written. Those live in ANN indexes of their own (`first_part`): the two
models' vectors are never compared. A search embeds the query both ways and fuses the two
k-NN rankings, each weighted by the share of rows it covers; a row's full vector replaces its
first-pass one within one write, so no row is ever without one.

SurrealDB is the system of record; this directory can be rebuilt from it at any time. The
stamp (`stamp.json`) holds the generation of the records the indexes reflect, the embedding
model and dimension of the vectors, and how much of the vector journal is committed. It is
written last in `commit`, so a stamp that differs from the database's generation means a crash
came between the two writes, and the caller rebuilds.

One writer (the worker process, its calls serialised by `_write`), readers in any thread of
the same process. Searches see what was committed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import blake3
import numpy as np

from memoryd.vocabulary import SEARCH_KINDS, SEARCH_KINDS_BY_NAME

from .lexical import Filters, Lexical, Ranked, Row, Where, row_key
from .text import code_text, memory_text, named_files, query_terms
from .vectors import CHECKPOINT_SUFFIX, DTYPE, JOURNAL_SUFFIX, Vectors

# An index of another format is rebuilt from the database at the next open. 4: a long
# memory's search text holds the words of its middle. 5: first-pass vectors.
FORMAT = 5
STAMP = "stamp.json"
LEXICAL_DIR = "lexical"
RRF_K = 60
# A row of a file the query names gets this on top of its fused score: it ranks first.
NAMED_FILE_BONUS = 1.0
# The few rows that hold every word of the query (at most SPECIFIC_ROWS of them) come next: a
# name or phrase found nowhere else outranks the k-NN's nearest, which such words barely move.
SPECIFIC_ROWS = 3
SPECIFIC_BONUS = 0.5
# Filters that keep at most this many rows are answered by an exact scan of their vectors
# (fetching a vector from usearch costs about what one more ANN candidate does).
EXACT_MAX = 256
# ANN candidates per result wanted, over the share of rows that pass the filters.
OVERSAMPLE = 1.5
# Candidates per ranking in a hybrid search, per result asked for (at least MIN_CANDIDATES).
CANDIDATES_PER_RESULT = 4
MIN_CANDIDATES = 40
# The search kinds of each table (a code chunk is code or docs).
KINDS_OF_TABLE: dict[str, tuple[str, ...]] = {}
for _kind in SEARCH_KINDS:
    KINDS_OF_TABLE[_kind.table] = (*KINDS_OF_TABLE.get(_kind.table, ()), _kind.name)


def part(kind: str, now: bool) -> str:
    """The ANN index of a kind's rows valid now, or of those retired."""
    return kind if now else f"{kind}-past"


PARTS = tuple(part(kind.name, now) for kind in SEARCH_KINDS for now in (True, False))
# Kinds whose every row gets a vector (a memory only when its kind is embedded): while some
# still wait for theirs (a cold index embeds after it writes), each k-NN counts in a hybrid
# search by the share that has one, so a few hundred vectors do not fill half the results.
# Their rows get a first-pass vector until the full model's.
ALWAYS_EMBEDDED = KINDS_OF_TABLE["code_chunk"]


def first_part(kind: str, now: bool) -> str:
    """The ANN index of first-pass vectors of a kind's rows valid now, or retired."""
    return f"{kind}-first" if now else f"{kind}-first-past"


FIRST_PARTS = tuple(first_part(kind, now) for kind in ALWAYS_EMBEDDED for now in (True, False))
# The ANN indexes that hold rows of each table.
PARTS_OF_TABLE = {
    table: tuple(
        name(kind, now)
        for kind in kinds
        for now in (True, False)
        for name in ((part, first_part) if kind in ALWAYS_EMBEDDED else (part,))
    )
    for table, kinds in KINDS_OF_TABLE.items()
}


class FirstPass(Protocol):
    """A first-pass embedder (memoryd.static_embedding.StaticEmbedder)."""

    model: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def micros(at: datetime) -> int:
    """A time as the index stores it: integer microseconds since the epoch."""
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def label_of(table: str, id_: str) -> int:
    """The ANN label of a row: 63 bits of a hash of its key, so a rebuild gives every row the
    same label and no map needs to be kept (a collision is ~1e-7 likely at 1M rows)."""
    digest = blake3.blake3(row_key(table, id_).encode()).digest(8)
    return int.from_bytes(digest, "little") >> 1


@dataclass(frozen=True, slots=True)
class Doc:
    """A row to index. `content` is the row's whole text (the index bounds it); times are
    microseconds (see `micros`); `fields` are returned with its hits as they are."""

    table: str
    id: str
    kind: str
    content: str
    project: str | None = None
    path: str | None = None
    language: str | None = None
    name: str | None = None
    parent_name: str | None = None
    valid_from: int = 0
    valid_until: int | None = None
    vector: Sequence[float] | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def row(self) -> Row:
        if self.kind not in SEARCH_KINDS_BY_NAME:
            raise ValueError(f"unknown search kind {self.kind!r}")
        text = memory_text(self.content) if self.kind == "memory" else code_text(self.content)
        return Row(
            table=self.table,
            id=self.id,
            kind=self.kind,
            text=text,
            label=label_of(self.table, self.id),
            project=self.project,
            path=self.path,
            language=self.language,
            name=self.name,
            parent_name=self.parent_name,
            valid_from=self.valid_from,
            valid_until=self.valid_until,
            fields=self.fields,
        )


@dataclass(frozen=True, slots=True)
class Hit:
    table: str
    id: str
    kind: str
    score: float
    project: str | None
    path: str | None
    language: str | None
    name: str | None
    parent_name: str | None
    valid_from: int
    valid_until: int | None
    fields: dict[str, Any]
    # How near the row is to the query, comparable across queries and kinds (see `hybrid`).
    relevance: float = 0.0


def _hit(row: Row, score: float, relevance: float = 0.0) -> Hit:
    return Hit(
        row.table,
        row.id,
        row.kind,
        score,
        row.project,
        row.path,
        row.language,
        row.name,
        row.parent_name,
        row.valid_from,
        row.valid_until,
        row.fields,
        relevance,
    )


class _ByPart(dict[str, tuple[list[int], list[Sequence[float]]]]):
    """Labels, and their vectors where there are any, grouped by ANN index (`part`)."""

    def add(self, name: str, label: int, vector: Sequence[float] | None = None) -> None:
        labels, vectors = self.setdefault(name, ([], []))
        labels.append(label)
        if vector is not None:
            vectors.append(vector)


def _private(path: Path) -> None:
    """Everything in the directory 0600 (tantivy creates its files with the process umask)."""
    for entry in os.scandir(path):
        # tantivy's merge threads remove their temporary files meanwhile: one gone is no
        # failure (it failed the commit, and a rebuild of the whole index followed).
        with contextlib.suppress(FileNotFoundError):
            if entry.is_dir(follow_symlinks=False):
                _private(Path(entry.path))
            elif entry.stat(follow_symlinks=False).st_mode & 0o077:
                os.chmod(entry.path, 0o600)


class SearchIndex:
    def __init__(
        self, directory: Path, dtype: str = DTYPE, first_pass: FirstPass | None = None
    ) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        self.directory = directory
        self._write = threading.Lock()
        self._first = first_pass
        stamp = self._read_stamp()
        # Opened with no stamp (or one of another format, or of first-pass vectors of another
        # model): the indexes were unknown and start empty; the caller rebuilds them.
        self.fresh = stamp is None
        stamp = stamp or {}
        self._generation: int | None = stamp.get("generation")
        self._model: str | None = stamp.get("model")
        self._dim: int | None = stamp.get("dim")
        # Per ANN index: how many bytes of its vector journal are committed.
        self._journal: dict[str, int] = stamp.get("journal", {})
        # Set when a write reached the indexes in part: no generation is stamped until a clear.
        self._stale = False
        # ANN indexes whose vectors `forget` erased: the next commit checkpoints them (their
        # journal holds the vectors).
        self._erased: set[str] = set()
        # Per kind of ALWAYS_EMBEDDED: the share of its rows valid now that have a vector of
        # the full model, and of the first pass, as of the last commit.
        self._coverage: dict[str, float] = {}
        self._first_coverage: dict[str, float] = {}
        if self.fresh:
            # Whatever is there (a crash before the first stamp, an older format) goes.
            shutil.rmtree(directory / LEXICAL_DIR, ignore_errors=True)
            for suffix in (CHECKPOINT_SUFFIX, JOURNAL_SUFFIX):
                for old in directory.glob("*" + suffix):
                    old.unlink()
        self._lexical = Lexical(directory / LEXICAL_DIR)
        self._vectors = {
            name: Vectors(directory, f"vectors-{name}", dtype) for name in PARTS + FIRST_PARTS
        }
        self._pending: dict[str, Row] = {}
        if self.fresh:
            self._commit_locked()
        else:
            # Its slots freed and reused as of the stamp (Vectors.wear).
            wear = stamp.get("wear", {})
            for name, vectors in self._vectors.items():
                vectors.open(self._journal.get(name, 0), wear.get(name, (0, 0)))
            self._measure_coverage()

    # -- the stamp --------------------------------------------------------------------------

    def _read_stamp(self) -> dict[str, Any] | None:
        try:
            stamp = json.loads((self.directory / STAMP).read_text())
        except (FileNotFoundError, ValueError):
            return None
        if stamp.get("first_model") != self._first_model:
            return None
        return stamp if stamp.get("format") == FORMAT else None

    @property
    def _first_model(self) -> str | None:
        return None if self._first is None else self._first.model

    @property
    def generation(self) -> int | None:
        """The generation of the records the committed indexes reflect (None: never set)."""
        return self._generation

    @property
    def model(self) -> str | None:
        return self._model

    @property
    def dim(self) -> int | None:
        return self._dim

    def __len__(self) -> int:
        return self._lexical.count()

    def vectors_held(self) -> dict[str, int]:
        """Vectors per ANN index (`part`, `first_part`): how far each pass has come."""
        return {name: len(vectors) for name, vectors in self._vectors.items()}

    def vector_of(self, table: str, ids: Sequence[str]) -> dict[str, str]:
        """Which vector each of these rows has: "full" or "first" (rows with none left out)."""
        labels = {label_of(table, i): i for i in ids}
        held: dict[str, str] = {}
        for which, names in (("first", FIRST_PARTS), ("full", PARTS)):
            for name in names:
                found, _ = self._vectors[name].get(list(labels))
                held.update((labels[label], which) for label in found.tolist())
        return held

    # -- writes -----------------------------------------------------------------------------

    def upsert(self, docs: Iterable[Doc], model: str | None = None) -> None:
        """Add or replace rows. A doc's vector is of `model`; a doc without one has none (its
        row is found by BM25 only until `set_vectors`)."""
        with self._write:
            rows, vectors, dropped = [], _ByPart(), _ByPart()
            first: list[tuple[str, int, str]] = []
            for doc in docs:
                row = doc.row()
                rows.append(row)
                now = row.valid_until is None
                firsts = row.kind in ALWAYS_EMBEDDED
                # Out of the other indexes of its kind, where it may have been till now.
                dropped.add(part(row.kind, not now), row.label)
                if firsts:
                    dropped.add(first_part(row.kind, not now), row.label)
                if doc.vector is None:
                    dropped.add(part(row.kind, now), row.label)
                    if firsts and self._first is not None:
                        first.append((first_part(row.kind, now), row.label, doc.content))
                    elif firsts:
                        dropped.add(first_part(row.kind, now), row.label)
                else:
                    vectors.add(part(row.kind, now), row.label, doc.vector)
                    if firsts:
                        dropped.add(first_part(row.kind, now), row.label)
            self._lexical.put(rows)
            self._pending.update((row.key, row) for row in rows)
            for name, (labels, _) in dropped.items():
                self._vectors[name].remove(labels)
            if vectors:
                self._set_vectors(vectors, model)
            if first:
                assert self._first is not None
                matrix = self._first.embed([text for _, _, text in first])
                by_part = _ByPart()
                for (name, label, _), vector in zip(first, matrix, strict=True):
                    by_part.add(name, label, vector)
                self._set_first(by_part)

    def retire(self, table: str, ids: Sequence[str], at: int) -> int:
        """Close the validity of rows valid now (they stay for `as_of`); returns how many."""
        with self._write:
            keys = [row_key(table, i) for i in ids]
            rows = self._lexical.rows([k for k in keys if k not in self._pending])
            rows.update((k, self._pending[k]) for k in keys if k in self._pending)
            closed = [replace(r, valid_until=at) for r in rows.values() if r.valid_until is None]
            self._lexical.put(closed)
            self._pending.update((row.key, row) for row in closed)
            # Their vectors move to the indexes of retired rows.
            moved, moved_first = _ByPart(), _ByPart()
            for kind in {row.kind for row in closed}:
                retiring = [row.label for row in closed if row.kind == kind]
                pairs = [(part, moved)]
                if kind in ALWAYS_EMBEDDED:
                    pairs.append((first_part, moved_first))
                for name, into in pairs:
                    now = self._vectors[name(kind, True)]
                    labels, matrix = now.get(retiring)
                    now.remove(labels)
                    for label, vector in zip(labels.tolist(), matrix, strict=True):
                        into.add(name(kind, False), label, vector)
            if moved:
                self._set_vectors(moved, self._model)
            self._set_first(moved_first)
            return len(closed)

    def delete(self, table: str, ids: Sequence[str]) -> None:
        """Remove rows from both indexes (prune)."""
        with self._write:
            keys = [row_key(table, i) for i in ids]
            self._lexical.delete(keys)
            for key in keys:
                self._pending.pop(key, None)
            labels = [label_of(table, i) for i in ids]
            for name in PARTS_OF_TABLE[table]:
                self._vectors[name].remove(labels)

    def forget(self, rows: Sequence[tuple[str, str]]) -> None:
        """Remove rows (table, id) from both indexes so that, once committed, no byte of
        them stays in the index files: their text (Lexical.purge: all in one call) nor their
        vectors (Vectors.erase; the commit checkpoints, emptying the journal)."""
        with self._write:
            keys = [row_key(table, i) for table, i in rows]
            self._lexical.purge(keys, self._pending)
            for key in keys:
                self._pending.pop(key, None)
            for table, names in PARTS_OF_TABLE.items():
                labels = [label_of(t, i) for t, i in rows if t == table]
                for name in names:
                    if labels and self._vectors[name].erase(labels):
                        self._erased.add(name)

    def set_vectors(self, table: str, vectors: dict[str, Sequence[float]], model: str) -> None:
        """Vectors of `model` for rows; a model other than the index's drops every vector of
        the old one first (two models are never compared)."""
        with self._write:
            keys = {row_key(table, i): i for i in vectors}
            rows = self._lexical.rows([k for k in keys if k not in self._pending])
            rows.update((k, self._pending[k]) for k in keys if k in self._pending)
            by_part, superseded = _ByPart(), _ByPart()
            # Rows the index does not hold get no vector: no search could find them.
            for key, row in rows.items():
                now = row.valid_until is None
                by_part.add(part(row.kind, now), row.label, vectors[keys[key]])
                if row.kind in ALWAYS_EMBEDDED:
                    superseded.add(first_part(row.kind, now), row.label)
            self._set_vectors(by_part, model)
            # Only once the full vectors are in: a search meanwhile finds the row by either.
            for name, (labels, _) in superseded.items():
                self._vectors[name].remove(labels)

    def _set_vectors(self, vectors: _ByPart, model: str | None) -> None:
        if model is None:
            raise ValueError("vectors need the name of their model")
        for name, (labels, rows) in vectors.items():
            matrix = np.asarray(rows, np.float32)
            dim = matrix.shape[1]
            if model != self._model or dim != self._dim:
                for every in PARTS:
                    self._vectors[every].reset(dim)
                self._model, self._dim = model, dim
            elif self._vectors[name].dim != dim:
                self._vectors[name].reset(dim)  # its first vectors
            self._vectors[name].set(labels, matrix)

    def _set_first(self, vectors: _ByPart) -> None:
        for name, (labels, rows) in vectors.items():
            if not labels:
                continue
            matrix = np.asarray(rows, np.float32)
            if self._vectors[name].dim != matrix.shape[1]:
                self._vectors[name].reset(matrix.shape[1])
            self._vectors[name].set(labels, matrix)

    def clear(self) -> None:
        """Empty both indexes (a rebuild follows); the stamp changes at the next commit."""
        with self._write:
            self._lexical.clear()
            self._pending.clear()
            for vectors in self._vectors.values():
                vectors.reset(None)
            self._model = self._dim = None
            self._generation = None
            self._stale = False

    def commit(self, generation: int | None = None) -> None:
        """Make the writes durable and visible, then stamp them with `generation`."""
        with self._write:
            if generation is not None and not self._stale:
                self._generation = generation
            self._commit_locked()

    def _measure_coverage(self) -> None:
        for kind in ALWAYS_EMBEDDED:
            rows = self._lexical.count(self._lexical.filter_query(Filters(kinds=(kind,))))
            self._coverage[kind] = len(self._vectors[part(kind, True)]) / rows if rows else 1.0
            first = len(self._vectors[first_part(kind, True)])
            self._first_coverage[kind] = first / rows if rows else 0.0

    def invalidate(self) -> None:
        """Stamp the indexes as reflecting no generation (a write reached them in part), so
        the next start rebuilds them; commits stamp none until `clear`."""
        with self._write:
            self._stale = True
            self._generation = None
            self._write_stamp()

    def _commit_locked(self) -> None:
        journal = {name: vectors.flush() for name, vectors in self._vectors.items()}
        self._lexical.commit()
        self._pending.clear()
        self._measure_coverage()
        for name, vectors in self._vectors.items():
            # A graph worn by reused slots is rebuilt in the background (Vectors.renew), and
            # checkpointed once swapped in, so that a restart loads the fresh one.
            renewed = vectors.renew()
            if renewed or name in self._erased or vectors.due(journal[name]):
                vectors.checkpoint()
                journal[name] = 0
        self._erased.clear()
        self._journal = journal
        self._write_stamp()

    def _write_stamp(self) -> None:
        stamp = {
            "format": FORMAT,
            "generation": self._generation,
            "model": self._model,
            "dim": self._dim,
            "journal": self._journal,
            "wear": {name: list(vectors.wear) for name, vectors in self._vectors.items()},
            "first_model": self._first_model,
        }
        tmp = self.directory / (STAMP + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(stamp, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / STAMP)
        _private(self.directory)

    def settle(self) -> None:
        """Commit until no ANN graph is worn or being renewed, waiting for each renewal's
        build (a commit swaps it in, checkpoints it, and starts another if the writes it
        brought over wore it again): for a bench or a test that measures renewed graphs."""
        self.commit()
        while [vectors.wait_renewal() for vectors in self._vectors.values()].count(True):
            self.commit()

    def close(self) -> None:
        """Checkpoint the vectors (a quick start next time) and let tantivy's merges finish.
        A renewal under way is abandoned: the wear kept in the stamp starts it again."""
        with self._write:
            for vectors in self._vectors.values():
                vectors.stop_renewal()
                vectors.flush()
            self._lexical.commit()
            for vectors in self._vectors.values():
                vectors.checkpoint()
            self._journal = dict.fromkeys(self._vectors, 0)
            self._write_stamp()
            self._lexical.close()

    # -- search -----------------------------------------------------------------------------

    def bm25(self, query: str, filters: Filters, k: int) -> list[Hit]:
        where = self._lexical.filter_query(filters)
        found = self._lexical.bm25(query_terms(query), named_files(query), where, k)
        return self._hits([(label, score) for label, score, _ in found])

    def knn(self, vector: Sequence[float], model: str, filters: Filters, k: int) -> list[Hit]:
        """The nearest rows by cosine similarity; none when the index holds vectors of another
        model."""
        if model != self._model:
            return []
        found = self._near(np.asarray(vector, np.float32), filters, k)
        return self._hits([(label, 1.0 - distance) for label, distance, _ in found])

    def hybrid(
        self,
        query: str,
        vector: Sequence[float] | None,
        model: str | None,
        filters: Filters,
        limit: int,
    ) -> list[Hit]:
        """BM25 and k-NN fused by reciprocal rank, each row's fused score times its prior;
        rows of a file the query names come first, then the few rows that hold every word.
        The k-NN takes part only when the index holds vectors of `model` (BM25 alone while a
        re-embedding is under way), weighted by the share of the rows it searches that have
        their vector (`ALWAYS_EMBEDDED`); so does the k-NN of first-pass vectors, over the
        rows that have no full vector yet, with the query embedded by the first pass.

        The order comes from the fused ranks, which say nothing across queries (the first
        hit of any query scores about the same). Each hit's `relevance` does: the cosine
        similarity of the row's vector and the query's (clipped at 0), 1.0 for a row of a
        file the query names, 0.0 for a row with no vector of `model` (found by words alone);
        a row with a first-pass vector only has the first pass's cosine."""
        where = self._lexical.filter_query(filters)
        candidates = max(limit * CANDIDATES_PER_RESULT, MIN_CANDIDATES)
        text, files, terms = query, named_files(query), query_terms(query)
        rankings = [(1.0, self._lexical.bm25(terms, files, where, candidates))]
        query = None if vector is None else np.asarray(vector, np.float32)
        if query is not None and model == self._model:
            weight = min((self._coverage.get(k, 1.0) for k in filters.kinds), default=1.0)
            near = self._near(query, filters, candidates)
            rankings.append((min(weight, 1.0), near))
        first = self._first_query(text, filters)
        if first is not None:
            weight, first_query = first
            rankings.append((weight, self._near(first_query, filters, candidates, first_part)))
        fused: dict[int, float] = {}
        priors: dict[int, float] = {}
        for weight, ranking in rankings:
            for rank, (label, _, prior) in enumerate(ranking, 1):
                fused[label] = fused.get(label, 0.0) + weight / (RRF_K + rank)
                priors[label] = prior
        named = self._lexical.named(files, list(fused))
        specific = self._lexical.holding_all(terms, where, SPECIFIC_ROWS)
        scored = sorted(
            (
                (
                    score * priors[label]
                    + (NAMED_FILE_BONUS if label in named else 0.0)
                    + (SPECIFIC_BONUS if label in specific else 0.0),
                    label,
                )
                for label, score in fused.items()
            ),
            key=lambda pair: (-pair[0], pair[1]),
        )[:limit]
        near = self._cosines(query, model, filters, [label for _, label in scored])
        if first is not None:
            unseen = [label for _, label in scored if label not in near]
            near |= self._first_cosines(first[1], filters, unseen)
        relevance = {label: 1.0 if label in named else near.get(label, 0.0) for _, label in scored}
        return self._hits([(label, score) for score, label in scored], relevance)

    def _cosines(
        self, query: np.ndarray | None, model: str | None, filters: Filters, labels: list[int]
    ) -> dict[int, float]:
        """Cosine similarity (at least 0) of the query and each row of `labels` that has a
        vector of `model`."""
        if query is None or model != self._model or self._dim != len(query):
            return {}
        found: dict[int, float] = {}
        for kind in filters.kinds:
            for now in (True, False) if filters.as_of is not None else (True,):
                keys, matrix = self._vectors[part(kind, now)].get(labels)
                norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
                cosines = (matrix @ query) / np.maximum(norms, 1e-12)
                found.update(zip(keys.tolist(), np.maximum(cosines, 0.0).tolist(), strict=True))
        return found

    def _first_query(self, query: str, filters: Filters) -> tuple[float, np.ndarray] | None:
        """The weight of the first-pass k-NN (the least share of rows it covers among the
        kinds searched) and the query's first-pass vector; None when it has no part."""
        kinds = [kind for kind in filters.kinds if kind in ALWAYS_EMBEDDED]
        if self._first is None or not kinds:
            return None
        weight = min(self._first_coverage.get(kind, 0.0) for kind in kinds)
        if weight <= 0.0:
            return None
        return min(weight, 1.0), self._first.embed([query])[0]

    def _first_cosines(
        self, query: np.ndarray, filters: Filters, labels: list[int]
    ) -> dict[int, float]:
        """Cosine similarity (at least 0) of the query's first-pass vector and each row of
        `labels` that has a first-pass vector."""
        found: dict[int, float] = {}
        for kind in filters.kinds:
            if kind not in ALWAYS_EMBEDDED:
                continue
            for now in (True, False) if filters.as_of is not None else (True,):
                keys, matrix = self._vectors[first_part(kind, now)].get(labels)
                if len(keys):
                    cosines = matrix @ query / np.maximum(np.linalg.norm(matrix, axis=1), 1e-12)
                    found.update(zip(keys.tolist(), np.maximum(cosines, 0.0).tolist(), strict=True))
        return found

    def _near(
        self, vector: np.ndarray, filters: Filters, k: int, name: Callable[[str, bool], str] = part
    ) -> list[Ranked]:
        """(label, cosine distance, prior) of the `k` nearest rows that pass `filters`: the
        nearest of each kind's index, merged (and of its retired rows' for `as_of`). `name`
        says which ANN indexes: the full model's (`part`) or the first pass's (`first_part`)."""
        found: list[Ranked] = []
        for kind in filters.kinds:
            if name is first_part and kind not in ALWAYS_EMBEDDED:
                continue
            where = self._lexical.filter_query(replace(filters, kinds=(kind,)))
            for now in (True, False) if filters.as_of is not None else (True,):
                vectors = self._vectors[name(kind, now)]
                if vectors.dim == len(vector):
                    found += self._near_in(vectors, vector, where, k)
        return sorted(found, key=lambda ranked: ranked[1])[:k]

    def _near_in(self, vectors: Vectors, vector: np.ndarray, where: Where, k: int) -> list[Ranked]:
        """The ANN's nearest in `vectors`, oversampled by the share of rows expected to pass,
        or an exact scan of the passing rows when they are fewer than the ANN would fetch."""
        total = len(vectors)
        if total == 0:
            return []
        expected = where.share * total
        want = min(total, int(k * OVERSAMPLE / max(where.share, 1e-9)))
        while True:
            if expected <= max(EXACT_MAX, want):
                return self._exact(vectors, vector, where, k)
            labels, distances = vectors.search(vector, want)
            kept = self._lexical.keep(where, labels.tolist())
            found = [
                (label, float(d), kept[label])
                for label, d in zip(labels.tolist(), distances, strict=True)
                if label in kept
            ]
            if len(found) >= k or want >= total:
                return found[:k]
            # Fewer pass than estimated (shares multiplied as if independent): go by the
            # share that passed among these.
            share = len(kept) / max(len(labels), 1)
            expected = share * total
            want = min(total, max(want * 2, int(k * OVERSAMPLE / max(share, 1 / total))))

    def _exact(self, vectors: Vectors, vector: np.ndarray, where: Where, k: int) -> list[Ranked]:
        priors = self._lexical.passing(where, self._lexical.count(where))
        labels = np.fromiter(priors, np.uint64, len(priors))
        found, distances = vectors.exact(vector, labels, k)
        return [
            (label, float(d), priors[label])
            for label, d in zip(found.tolist(), distances, strict=True)
        ]

    def _hits(
        self, ranked: list[tuple[int, float]], relevance: dict[int, float] | None = None
    ) -> list[Hit]:
        rows = self._lexical.rows_by_label([label for label, _ in ranked])
        return [
            _hit(rows[label], round(score, 6), round((relevance or {}).get(label, 0.0), 4))
            for label, score in ranked
            if label in rows
        ]
