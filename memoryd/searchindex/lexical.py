"""The lexical index: tantivy, BM25 over a bounded search text, symbol names and path words.

It also holds each row's filter fields (kind, project, path, language, validity) and its ANN
label, so the vector search filters its candidates here, and everything needed to write the
document again when its validity changes (tantivy has no in-place update).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Container, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tantivy

from .disk import tantivy_io
from .kinds import PRIORS, file_name, role
from .text import split_identifiers

# A ranked row: (label, score, prior).
Ranked = tuple[int, float, float]
# valid_until of a row that is valid now (an open interval).
OPEN = 2**63 - 1
_TOKENIZER = "memoryd_code"
# Field boosts: a word of a symbol's name or of the path says more than one in the body.
BOOSTS = {"text": 1.0, "symbols": 3.0, "path_text": 2.0}
# A named file's rows are put first; within the lexical ranking this boost does the same.
NAMED_FILE_BOOST = 50.0
# tantivy multiplies a score by log2(2 + weight): weight = 2**(prior / min prior) - 2 >= 0.
_MIN_PRIOR = min(PRIORS.values())
# Path globs whose matching paths are kept between commits (a search asks for its filters
# several times: BM25, each k-NN, the count of what passes).
_GLOBS_KEPT = 32


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(48))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    for raw in ("key", "table", "id", "kind", "project", "path", "language", "file_name"):
        b.add_text_field(raw, stored=True, tokenizer_name="raw", index_option="basic")
    for name in ("name", "parent_name"):
        b.add_text_field(name, stored=True, tokenizer_name="raw", index_option="basic")
    b.add_text_field("text", stored=True, tokenizer_name=_TOKENIZER, index_option="freq")
    b.add_text_field("symbols", tokenizer_name=_TOKENIZER, index_option="freq")
    b.add_text_field("path_text", tokenizer_name=_TOKENIZER, index_option="freq")
    b.add_unsigned_field("label", stored=True, indexed=True, fast=True)
    for time in ("valid_from", "valid_until"):
        b.add_integer_field(time, stored=True, indexed=True, fast=True)
    b.add_float_field("weight", stored=True, fast=True)
    b.add_bytes_field("fields", stored=True)
    return b.build()


@dataclass(frozen=True, slots=True)
class Row:
    """One row as the lexical index holds it. `text` is already the bounded search text;
    times are integer microseconds since the epoch (valid_until None: valid now)."""

    table: str
    id: str
    kind: str
    text: str
    label: int
    project: str | None = None
    path: str | None = None
    language: str | None = None
    name: str | None = None
    parent_name: str | None = None
    valid_from: int = 0
    valid_until: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.table}:{self.id}"


def row_key(table: str, id_: str) -> str:
    return f"{table}:{id_}"


def _document(row: Row) -> tantivy.Document:
    doc = tantivy.Document()
    for name in ("table", "id", "kind", "project", "path", "language", "name", "parent_name"):
        value = getattr(row, name)
        if value is not None:
            doc.add_text(name, value)
    doc.add_text("key", row.key)
    doc.add_text("text", row.text)
    symbols = " ".join(n for n in (row.name, row.parent_name) if n)
    if symbols:
        doc.add_text("symbols", split_identifiers(symbols))
    if row.path is not None:
        doc.add_text("file_name", file_name(row.path))
        doc.add_text("path_text", split_identifiers(row.path))
    doc.add_unsigned("label", row.label)
    doc.add_integer("valid_from", row.valid_from)
    doc.add_integer("valid_until", OPEN if row.valid_until is None else row.valid_until)
    prior = PRIORS[role(row.kind, row.path, row.language)]
    doc.add_float("weight", 2 ** (prior / _MIN_PRIOR) - 2)
    doc.add_bytes("fields", json.dumps(row.fields, separators=(",", ":")).encode())
    return doc


def _row(stored: dict[str, list[Any]]) -> Row:
    def one(name: str) -> Any:
        values = stored.get(name)
        return values[0] if values else None

    until = one("valid_until")
    return Row(
        table=one("table"),
        id=one("id"),
        kind=one("kind"),
        text=one("text"),
        label=one("label"),
        project=one("project"),
        path=one("path"),
        language=one("language"),
        name=one("name"),
        parent_name=one("parent_name"),
        valid_from=one("valid_from"),
        valid_until=None if until == OPEN else until,
        fields=json.loads(one("fields")),
    )


@dataclass(frozen=True, slots=True)
class Where:
    """Filters as the index runs them, with an estimate of the share of the rows of their
    kinds that pass (the product of each other term's share: exact for one term, a guess for
    several)."""

    query: tantivy.Query
    share: float


@dataclass(frozen=True, slots=True)
class Filters:
    """Which rows a search sees. `kinds`: search kinds; `path`: a glob over the path within
    its project (`*` stays within a directory, `**` crosses them; a glob without `/` matches
    the file name in any directory); `as_of`: rows valid at that time (microseconds), else
    rows valid now."""

    kinds: tuple[str, ...] = ("code",)
    project: str | None = None
    path: str | None = None
    language: str | None = None
    as_of: int | None = None


def glob_regex(glob: str) -> str:
    """A path glob as a regex that must match a whole path (tantivy's regex is anchored)."""
    out = [] if "/" in glob else ["(.*/)?"]
    i = 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        out.append("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c))
        i += 1
    return "".join(out)


def glob_prefix(glob: str) -> str:
    """What every path a glob matches begins with: its text before the first wildcard (none
    for a glob without `/`, which matches a file name in any directory)."""
    return re.split(r"[*?]", glob, maxsplit=1)[0] if "/" in glob else ""


class Lexical:
    """The tantivy index in `directory`: one writer (the caller serialises writes), searchers
    for any thread. Searches see what was committed."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(mode=0o700, exist_ok=True)
        self.schema = _schema()
        self._index = tantivy.Index(self.schema, path=str(directory))
        self._index.register_tokenizer(_TOKENIZER, _analyzer())
        self._writer: tantivy.IndexWriter | None = None
        # Commits so far: a glob's paths (`_glob_query`) hold until the next.
        self._commits = 0
        self._globs: dict[str, tuple[int, tantivy.Query]] = {}

    @contextmanager
    def _writing(self) -> Iterator[tantivy.IndexWriter]:
        """The writer, with tantivy's disk faults as OSError. A writer that met one is let go:
        tantivy kills a writer whose thread hit an I/O error, and a dead writer fails every
        later call, so the next write opens a new one (once the disk has room again)."""
        try:
            with tantivy_io():
                if self._writer is None:
                    # One indexing thread: the machine's cores belong to the model and the database.
                    self._writer = self._index.writer(64_000_000, 1)
                yield self._writer
        except OSError:
            with suppress(OSError):  # the fault raised is the first one
                self._let_go()
            raise

    def _let_go(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            with tantivy_io():  # it waits for the merges under way, which may meet the fault
                writer.wait_merging_threads()

    # -- writes ---------------------------------------------------------------------------

    def put(self, rows: Iterable[Row]) -> None:
        with self._writing() as writer:
            for row in rows:
                writer.delete_documents_by_term("key", row.key)
                writer.add_document(_document(row))

    def delete(self, keys: Iterable[str]) -> None:
        with self._writing() as writer:
            for key in keys:
                writer.delete_documents_by_term("key", key)

    def purge(self, keys: Sequence[str], rewritten: Container[str]) -> None:
        """Delete rows leaving no byte of them behind. A deleted document stays in its
        segment's files until a merge, which tantivy decides alone; but a segment whose every
        document is deleted is dropped at the next commit. So the other rows of the segments
        holding `keys` are written again (into a new segment), but for those in `rewritten`
        (written since the last commit: their old copy is deleted already)."""
        if not keys:
            return
        searcher = self._index.searcher()
        doomed = tantivy.Query.term_set_query(self.schema, "key", list(keys))
        held = searcher.search(doomed, len(keys), count=False).hits
        segments = {address.segment_ord for _, address in held}
        survivors = []
        if segments and searcher.num_docs:
            everything = searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False)
            gone = set(keys)
            for _, address in everything.hits:
                if address.segment_ord in segments:
                    row = _row(searcher.doc(address).to_dict())
                    if row.key not in gone and row.key not in rewritten:
                        survivors.append(row)
        self.delete(keys)
        self.put(survivors)

    def clear(self) -> None:
        with self._writing() as writer:
            writer.delete_all_documents()

    def commit(self) -> None:
        if self._writer is not None:
            with self._writing() as writer:
                writer.commit()
            self._index.reload()
            # After the reload: a search that read the count before it took a searcher of
            # that commit or an older one, and what it keeps is never looked up again.
            self._commits += 1

    def close(self) -> None:
        self._let_go()

    # -- reads ----------------------------------------------------------------------------

    def rows(self, keys: Sequence[str]) -> dict[str, Row]:
        """Committed rows by key."""
        if not keys:
            return {}
        searcher = self._index.searcher()
        query = tantivy.Query.term_set_query(self.schema, "key", list(keys))
        hits = searcher.search(query, len(keys), count=False).hits
        found = (_row(searcher.doc(address).to_dict()) for _, address in hits)
        return {row.key: row for row in found}

    def rows_by_label(self, labels: Sequence[int]) -> dict[int, Row]:
        if not labels:
            return {}
        searcher = self._index.searcher()
        query = tantivy.Query.term_set_query(self.schema, "label", list(labels))
        hits = searcher.search(query, len(labels), count=False).hits
        found = (_row(searcher.doc(address).to_dict()) for _, address in hits)
        return {row.label: row for row in found}

    def all_rows(self) -> list[Row]:
        searcher = self._index.searcher()
        n = searcher.num_docs
        if not n:
            return []
        hits = searcher.search(tantivy.Query.all_query(), n, count=False).hits
        return [_row(searcher.doc(address).to_dict()) for _, address in hits]

    def filter_query(self, filters: Filters) -> Where:
        """The filters as a query, built from term queries where it can be: a term's postings
        are read lazily, skipping to the documents the selective side of an intersection
        asks for, where a term set or a range costs a pass over every matching document."""
        s, searcher = self.schema, self._index.searcher()
        total = max(searcher.num_docs, 1)

        def df(name: str, value: Any) -> float:
            return min(1.0, searcher.doc_freq(name, value) / total)

        kinds = [tantivy.Query.term_query(s, "kind", kind) for kind in filters.kinds]
        parts = [kinds[0] if len(kinds) == 1 else self._any(*kinds)]
        share = 1.0
        for name in ("project", "language"):
            value = getattr(filters, name)
            if value is not None:
                parts.append(tantivy.Query.term_query(s, name, value))
                share *= df(name, value)
        if filters.path is not None:
            parts.append(self._glob_query(filters.path))
        at = filters.as_of
        if at is None:
            # No share: the vectors of rows valid now have an ANN index of their own.
            parts.append(tantivy.Query.term_query(s, "valid_until", OPEN))
        else:
            integer = tantivy.FieldType.Integer
            parts.append(tantivy.Query.range_query(s, "valid_until", integer, at, None, False))
            parts.append(tantivy.Query.range_query(s, "valid_from", integer, None, at))
        # Filters select, they do not score: a kind's term would otherwise add its own BM25.
        query = tantivy.Query.const_score_query(self._all(*parts), 0.0)
        if filters.path is not None:
            # No term frequency tells how many paths a glob matches: count them (the k-NN
            # would otherwise learn it in rounds, each running the glob again).
            of_kinds = sum(searcher.doc_freq("kind", kind) for kind in filters.kinds)
            share = (searcher.search(query, 1, count=True).count or 0) / max(of_kinds, 1)
        return Where(query, share)

    def _glob_query(self, glob: str) -> tantivy.Query:
        """The rows of the paths a glob matches, as a set of path terms: the paths found once
        per commit (a walk of the path terms under the glob's literal prefix, each matched
        here), where a regex query compiled its automaton (~5 ms) and ran it over every path
        term again in each of the searches one request makes."""
        commits = self._commits
        kept = self._globs.get(glob)
        if kept is not None and kept[0] == commits:
            return kept[1]
        pattern = re.compile(glob_regex(glob))
        found = self._index.searcher().terms_with_prefix("path", glob_prefix(glob))
        paths = [path for path, _ in found if pattern.fullmatch(path)]
        query = (
            tantivy.Query.term_set_query(self.schema, "path", paths)
            if paths
            else tantivy.Query.empty_query()
        )
        if len(self._globs) >= _GLOBS_KEPT:
            self._globs.clear()
        self._globs[glob] = (commits, query)
        return query

    def bm25(
        self, terms: Sequence[str], files: Sequence[str], where: tantivy.Query, k: int
    ) -> list[Ranked]:
        """The best `k` rows by BM25 times prior; rows of a named file first."""
        should = []
        if terms:
            should.append(
                self._index.parse_query(" ".join(terms), list(BOOSTS), field_boosts=BOOSTS)
            )
        if files:
            should.append(tantivy.Query.boost_query(self._named(files), NAMED_FILE_BOOST))
        if not should:
            return []
        return self._scored(self._all(where.query, self._any(*should)), k, weight=True)

    def holding_all(self, terms: Sequence[str], where: Where, at_most: int) -> set[int]:
        """The rows that pass `where` and hold every one of `terms`, when no more than
        `at_most` do (otherwise none: together the words pick out nothing in particular)."""
        if not terms:
            return set()
        every = self._index.parse_query(" ".join(terms), list(BOOSTS), conjunction_by_default=True)
        found = self._passing(self._all(where.query, every), at_most + 1)
        return set(found) if len(found) <= at_most else set()

    def passing(self, where: Where, k: int) -> dict[int, float]:
        """Up to `k` rows that pass `where`: label -> prior."""
        return self._passing(where.query, k)

    def _passing(self, query: tantivy.Query, k: int) -> dict[int, float]:
        return {label: prior for label, _, prior in self._scored(query, k, weight=False)}

    def count(self, where: Where | None = None) -> int:
        """Rows (that pass `where`)."""
        searcher = self._index.searcher()
        if where is None:
            return searcher.num_docs
        return searcher.search(where.query, 1, count=True).count or 0

    def keep(self, where: Where, labels: Sequence[int]) -> dict[int, float]:
        """The rows among `labels` that pass `where`: label -> prior."""
        if not labels:
            return {}
        among = tantivy.Query.term_set_query(self.schema, "label", list(labels))
        return self._passing(self._all(where.query, among), len(labels))

    def named(self, files: Sequence[str], labels: Sequence[int]) -> set[int]:
        """The rows among `labels` of the files named `files` (base names, lowercase)."""
        if not files or not labels:
            return set()
        among = tantivy.Query.term_set_query(self.schema, "label", list(labels))
        return set(self._passing(self._all(self._named(files), among), len(labels)))

    def _named(self, files: Sequence[str]) -> tantivy.Query:
        return tantivy.Query.term_set_query(self.schema, "file_name", list(files))

    @staticmethod
    def _all(*queries: tantivy.Query) -> tantivy.Query:
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in queries])

    @staticmethod
    def _any(*queries: tantivy.Query) -> tantivy.Query:
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in queries])

    def _scored(self, query: tantivy.Query, k: int, *, weight: bool) -> list[Ranked]:
        searcher = self._index.searcher()
        result = searcher.search(
            query, max(k, 1), count=False, weight_by_field="weight" if weight else None
        )
        addresses = [address for _, address in result.hits]
        labels = searcher.fast_field_values("label", addresses)
        weights = searcher.fast_field_values("weight", addresses)
        return [
            (label, score, math.log2(2 + w) * _MIN_PRIOR)
            for label, w, (score, _) in zip(labels, weights, result.hits, strict=True)
        ]
