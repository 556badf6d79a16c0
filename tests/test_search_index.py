"""The derived search indexes on real texts and real vectors: numpy.ma's installed source,
tests, readme and changelog, and arq's source, chunked as the indexer chunks them and embedded
by the default model."""

from __future__ import annotations

import gc
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from memoryd.config import DEFAULT_MODEL
from memoryd.embedding import TRUNCATED_DIM, TRUNCATED_MODEL, Embedder, truncate
from memoryd.searchindex import Doc, Filters, Hit, SearchIndex
from memoryd.searchindex import index as index_module
from memoryd.searchindex import vectors as ann
from memoryd.searchindex.vectors import Vectors
from tests.chunk_docs import chunk_docs
from tests.conftest import fill_disk, site_package, small_disk

MA_FILES = (
    "API_CHANGES.txt",
    "README.rst",
    "extras.py",
    "mrecords.py",
    "testutils.py",
    "tests/test_mrecords.py",
)
ARQ_FILES = ("connections.py", "cron.py", "jobs.py", "worker.py")
T0 = 1_700_000_000_000_000  # when the rows became valid (microseconds)


@dataclass(frozen=True)
class Corpus:
    docs: list[Doc]
    embedder: Embedder

    def vector(self, text: str) -> list[float]:
        return self.embedder.embed([text])[0]


def _docs(root: Path, project: str, files: tuple[str, ...]) -> list[Doc]:
    return [d for rel in files for d in chunk_docs(project, rel, (root / rel).read_text(), "", T0)]


@pytest.fixture(scope="module")
def corpus(embedder: Embedder) -> Corpus:
    docs = _docs(site_package("numpy") / "ma", "ma", MA_FILES) + _docs(
        site_package("arq"), "arq", ARQ_FILES
    )
    vectors = embedder.embed([d.content for d in docs])
    return Corpus([replace(d, vector=v) for d, v in zip(docs, vectors, strict=True)], embedder)


@pytest.fixture
def index(tmp_path: Path, corpus: Corpus) -> Iterator[SearchIndex]:
    built = SearchIndex(tmp_path / "search")
    built.upsert(corpus.docs, DEFAULT_MODEL)
    built.commit(1)
    yield built
    built.close()


def _where(hits: list[Hit]) -> list[tuple[str | None, str | None]]:
    return [(h.path, h.name) for h in hits]


def _all_searches(
    ix: SearchIndex,
    corpus: Corpus,
    filters: Filters,
    query: str = "build a masked record array from a list of arrays",
) -> dict[str, list[Hit]]:
    vector = corpus.vector(query)
    return {
        "bm25": ix.bm25(query, filters, 10),
        "knn": ix.knn(vector, DEFAULT_MODEL, filters, 10),
        "hybrid": ix.hybrid(query, vector, DEFAULT_MODEL, filters, 10),
    }


def test_every_row_is_indexed_and_docs_are_their_own_kind(
    index: SearchIndex, corpus: Corpus
) -> None:
    assert len(index) == len(corpus.docs)
    kinds = {d.path: d.kind for d in corpus.docs}
    assert {p for p, k in kinds.items() if k == "docs"} == {"API_CHANGES.txt", "README.rst"}
    # A code search never returns prose; a docs search returns nothing else.
    for name, hits in _all_searches(index, corpus, Filters(kinds=("code",))).items():
        assert hits and all(kinds[h.path] == "code" for h in hits), name
    for name, hits in _all_searches(index, corpus, Filters(kinds=("docs",))).items():
        assert hits and {h.path for h in hits} <= {"API_CHANGES.txt", "README.rst"}, name


def test_filters_by_project_language_and_path(index: SearchIndex, corpus: Corpus) -> None:
    searches = _all_searches(index, corpus, Filters(project="arq"))
    for name, hits in searches.items():
        assert len(hits) == 10 and {h.project for h in hits} == {"arq"}, name
    for name, hits in _all_searches(index, corpus, Filters(path="tests/*")).items():
        assert {h.path for h in hits} == {"tests/test_mrecords.py"}, name
    # A glob without a slash matches the file name in any directory.
    for name, hits in _all_searches(index, corpus, Filters(path="test_*.py")).items():
        assert {h.path for h in hits} == {"tests/test_mrecords.py"}, name
    for name, hits in _all_searches(index, corpus, Filters(path="**/*.py", project="ma")).items():
        assert {h.path for h in hits} <= {
            "extras.py",
            "mrecords.py",
            "testutils.py",
            "tests/test_mrecords.py",
        }, name
    docs = Filters(kinds=("docs",), language="rst")
    for name, hits in _all_searches(index, corpus, docs).items():
        assert hits and {h.path for h in hits} == {"README.rst"}, name
    nothing = Filters(project="no-such-project")
    assert all(hits == [] for hits in _all_searches(index, corpus, nothing).values())


def test_a_path_glob_keeps_exactly_the_rows_of_the_paths_it_matches(
    index: SearchIndex, corpus: Corpus
) -> None:
    """A glob's paths are looked up once per commit, not matched again in each search: every
    search keeps exactly the rows of the paths it matches, and a commit that adds or removes
    paths changes what the same glob keeps."""
    vector = corpus.vector("build a masked record array from a list of arrays")

    def kept(glob: str) -> Counter[str | None]:
        filters = Filters(kinds=("code", "docs"), path=glob)
        return Counter(h.path for h in index.knn(vector, DEFAULT_MODEL, filters, 1000))

    def rows(*paths: str) -> Counter[str | None]:
        return Counter(d.path for d in corpus.docs if d.path in paths)

    python = {d.path for d in corpus.docs if d.path and d.path.endswith(".py")}
    assert kept("tests/*") == rows("tests/test_mrecords.py")
    assert kept("**/test*") == rows("testutils.py", "tests/test_mrecords.py")
    assert kept("*.py") == rows(*python)
    assert kept("?ron.py") == rows("cron.py")
    assert kept("tests/*.rst") == Counter()
    cron = next(d for d in corpus.docs if d.path == "cron.py")
    added = [
        replace(cron, id="arq/tests/test_cron.py#1", path="tests/test_cron.py"),
        replace(cron, id="arq/c++/a+b.py#1", path="c++/a+b.py"),  # regex characters
    ]
    index.upsert(added, DEFAULT_MODEL)
    index.commit(2)
    assert kept("tests/*") == rows("tests/test_mrecords.py") + Counter({"tests/test_cron.py": 1})
    assert kept("c++/*.py") == Counter({"c++/a+b.py": 1})
    index.delete("code_chunk", [d.id for d in corpus.docs if d.path == "tests/test_mrecords.py"])
    index.commit(3)
    assert kept("tests/*") == Counter({"tests/test_cron.py": 1})
    assert kept("**/test*") == rows("testutils.py") + Counter({"tests/test_cron.py": 1})


def test_knn_filters_the_ann_candidates_as_the_exact_scan_does(
    index: SearchIndex, corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filters that keep many rows run on the ANN's candidates (oversampled); those that keep
    few, on an exact scan. Both give the filter's nearest rows."""
    vector = corpus.vector("connect to redis with retries")
    for filters in (Filters(project="arq"), Filters(path="cron.py"), Filters()):
        exact = index.knn(vector, DEFAULT_MODEL, filters, 5)
        monkeypatch.setattr(index_module, "EXACT_MAX", 3)
        approximate = index.knn(vector, DEFAULT_MODEL, filters, 5)
        monkeypatch.undo()
        assert _where(approximate) == _where(exact)
        assert [h.score for h in approximate] == pytest.approx([h.score for h in exact], abs=2e-3)


def test_a_file_named_in_the_query_ranks_first(index: SearchIndex, corpus: Corpus) -> None:
    file_rows = sum(1 for d in corpus.docs if d.path == "cron.py")
    assert file_rows >= 3
    query = "fix type annotations in cron.py"
    vector = corpus.vector(query)
    for hits in (
        index.hybrid(query, vector, DEFAULT_MODEL, Filters(), 10),
        index.bm25(query, Filters(), 10),
    ):
        paths = [h.path for h in hits]
        assert paths[:file_rows] == ["cron.py"] * file_rows
        assert "cron.py" not in paths[file_rows:]
    # Without the name, the same words find other files first.
    plain = "fix type annotations"
    hits = index.hybrid(plain, corpus.vector(plain), DEFAULT_MODEL, Filters(), 10)
    assert [h.path for h in hits][:file_rows] != ["cron.py"] * file_rows


def test_words_found_in_one_row_only_rank_it_first_though_a_test_file(
    index: SearchIndex, corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function just written in a test file, found by its made-up docstring before its
    vector is computed: its words are in no other row, and the k-NN's nearest are noise. Fused
    by rank alone, the test prior put it 28th on 2,000 files (bench/incremental.py); holding
    every word, it comes first."""
    chunk = next(d for d in corpus.docs if d.path == "tests/test_mrecords.py")
    words = "zuzonuzu gevunuve dokeduva"
    text = f'{chunk.content}\n\ndef zuzonuzu_gevunuve(entries):\n    """{words}."""\n'
    edited = replace(chunk, content=text, vector=None)
    index.upsert([edited], DEFAULT_MODEL)
    index.commit(2)
    vector = corpus.vector(words)
    common = "masked array"

    def searches() -> tuple[list[str], list[str]]:
        return (
            [h.id for h in index.hybrid(words, vector, DEFAULT_MODEL, Filters(), 10)],
            [
                h.id
                for h in index.hybrid(common, corpus.vector(common), DEFAULT_MODEL, Filters(), 10)
            ],
        )

    assert [h.id for h in index.bm25(words, Filters(), 10)] == [edited.id]
    specific, many = searches()
    assert specific[0] == edited.id
    # By rank alone it is not even among the first 10; words that many rows hold pick none
    # out: their order is the same.
    monkeypatch.setattr(index_module, "SPECIFIC_BONUS", 0.0)
    fused, many_fused = searches()
    assert edited.id not in fused
    assert many == many_fused


def test_tests_config_and_prose_rank_below_the_same_text_in_source(
    tmp_path: Path, corpus: Corpus
) -> None:
    """One real chunk under four paths: its source file, a test, a config file and a
    changelog. Same words, same vector: the priors alone order them."""
    chunk = next(d for d in corpus.docs if d.name == "fromarrays" and d.path == "mrecords.py")
    copies = {
        "pkg/records.py": ("code", "python"),
        "pkg/records.toml": ("code", "toml"),
        "tests/test_records.py": ("code", "python"),
        "CHANGES.md": ("docs", "markdown"),
    }
    ix = SearchIndex(tmp_path / "search")
    ix.upsert(
        [
            replace(chunk, id=path, path=path, kind=kind, language=language)
            for path, (kind, language) in copies.items()
        ],
        DEFAULT_MODEL,
    )
    ix.commit(1)
    both = Filters(kinds=("code", "docs"))
    query = "fromarrays masked records"
    order = list(copies)
    assert [h.path for h in ix.hybrid(query, chunk.vector, DEFAULT_MODEL, both, 4)] == order
    assert [h.path for h in ix.bm25(query, both, 4)] == order
    # Asked for docs, the changelog is found.
    assert [h.path for h in ix.bm25(query, Filters(kinds=("docs",)), 4)] == ["CHANGES.md"]
    ix.close()


def _files(hits: list[Hit]) -> list[str | None]:
    """Files in the order of their first hit (what a reader of the results sees)."""
    return list(dict.fromkeys(h.path for h in hits))


def test_a_task_query_finds_the_source_before_its_tests(index: SearchIndex, corpus: Corpus) -> None:
    """The test prior (tuned on commit subjects by bench/task_queries.py): the source files
    come before the test file of the same code (at 0.8 the test came second, before
    extras.py). A query that asks for tests still finds them among the first files (a path
    filter puts them first)."""
    query = "add a field to a masked record array"
    hits = index.hybrid(query, corpus.vector(query), DEFAULT_MODEL, Filters(), 20)
    assert _files(hits)[:3] == ["mrecords.py", "extras.py", "tests/test_mrecords.py"]
    query = "tests for masked records"
    hits = index.hybrid(query, corpus.vector(query), DEFAULT_MODEL, Filters(), 20)
    assert _files(hits) == ["mrecords.py", "testutils.py", "extras.py", "tests/test_mrecords.py"]


CRON = "when does the cron job run next"


def test_retire_keeps_rows_for_as_of_and_delete_removes_them(
    index: SearchIndex, corpus: Corpus
) -> None:
    cron = [d for d in corpus.docs if d.path == "cron.py"]
    retired_at = T0 + 5_000_000
    assert index.retire("code_chunk", [d.id for d in cron], retired_at) == len(cron)
    # Retiring again closes nothing: the rows are closed already.
    assert index.retire("code_chunk", [d.id for d in cron], retired_at + 1) == 0
    # The file's new version: one row, valid from the moment the old ones were retired.
    new = replace(cron[0], id="arq/cron.py#new", valid_from=retired_at)
    index.upsert([new], DEFAULT_MODEL)
    index.commit(2)
    # The retired rows' vectors moved to the index of retired code: its journal holds its
    # start (a 13-byte head) and a set for each (a head and 384 float32).
    past = index.directory / "vectors-code-past.journal"
    assert past.stat().st_size == 13 + len(cron) * (13 + 4 * 384)
    only_cron = Filters(path="cron.py")
    for name, hits in _all_searches(index, corpus, only_cron, CRON).items():
        assert [h.id for h in hits] == ["arq/cron.py#new"], name
    before = replace(only_cron, as_of=retired_at - 1)
    for name, hits in _all_searches(index, corpus, before, CRON).items():
        assert sorted(h.id for h in hits) == sorted(d.id for d in cron), name
        assert all(h.valid_until == retired_at for h in hits)
    at = replace(only_cron, as_of=retired_at)
    for name, hits in _all_searches(index, corpus, at, CRON).items():
        assert [h.id for h in hits] == ["arq/cron.py#new"], name
    # Before anything was valid, nothing is.
    assert all(
        not h for h in _all_searches(index, corpus, replace(at, as_of=T0 - 1), CRON).values()
    )

    index.delete("code_chunk", [d.id for d in cron])
    index.commit(3)
    assert len(index) == len(corpus.docs) + 1 - len(cron)
    for name, hits in _all_searches(index, corpus, before, CRON).items():
        assert hits == [], name
    # Its vector is gone too: the row's own vector finds other rows.
    own = index.knn(cron[0].vector or [], DEFAULT_MODEL, Filters(as_of=retired_at - 1), 3)
    assert cron[0].id not in {h.id for h in own}


def test_reopen_from_disk_equals_before_and_keeps_the_stamp(
    tmp_path: Path, index: SearchIndex, corpus: Corpus
) -> None:
    index.retire("code_chunk", [corpus.docs[0].id], T0 + 1)
    index.commit(41)
    searches = {
        f: _all_searches(index, corpus, f)
        for f in (Filters(), Filters(kinds=("docs",)), Filters(as_of=T0))
    }
    index.close()
    reopened = SearchIndex(tmp_path / "search")
    assert (reopened.fresh, reopened.generation, reopened.model, reopened.dim) == (
        False,
        41,
        DEFAULT_MODEL,
        384,
    )
    assert {f: _all_searches(reopened, corpus, f) for f in searches} == searches
    reopened.close()


def test_a_crash_keeps_what_was_committed_and_drops_the_rest(
    tmp_path: Path, corpus: Corpus
) -> None:
    """No close: the vectors come back from the journal, and writes after the last commit
    (a crash before it) are gone, stamp and all."""
    ix = SearchIndex(tmp_path / "search")
    assert ix.fresh and ix.generation is None
    ix.upsert(corpus.docs[:100], DEFAULT_MODEL)
    ix.commit(5)
    filters = Filters(project="ma")
    expected = _all_searches(ix, corpus, filters)
    ix.upsert(corpus.docs[100:], DEFAULT_MODEL)
    ix.delete("code_chunk", [corpus.docs[0].id])
    del ix
    gc.collect()
    assert not list((tmp_path / "search").glob("*.usearch"))  # only the journals

    again = SearchIndex(tmp_path / "search")
    assert (again.fresh, again.generation, len(again)) == (False, 5, 100)
    assert _all_searches(again, corpus, filters) == expected
    again.close()


def test_a_write_that_reached_the_index_in_part_stamps_no_generation(
    tmp_path: Path, index: SearchIndex
) -> None:
    """Until a rebuild (clear), no commit claims a generation, and a restart sees none."""
    index.invalidate()
    index.commit(2)
    assert index.generation is None
    index.close()
    reopened = SearchIndex(tmp_path / "search")
    assert (reopened.fresh, reopened.generation) == (False, None)
    reopened.clear()
    reopened.commit(3)
    assert reopened.generation == 3
    reopened.close()


def test_a_new_model_replaces_every_vector(index: SearchIndex, corpus: Corpus) -> None:
    """Vectors of another model (another dimension here) are never compared with the old."""
    some = corpus.docs[:20]
    cut = {d.id: truncate(np.asarray(d.vector), TRUNCATED_DIM).tolist() for d in some}
    index.set_vectors("code_chunk", cut, TRUNCATED_MODEL)
    index.commit(9)
    assert (index.model, index.dim) == (TRUNCATED_MODEL, TRUNCATED_DIM)
    query = corpus.vector("masked records")
    assert index.knn(query, DEFAULT_MODEL, Filters(kinds=("code", "docs")), 5) == []
    found = index.knn(
        truncate(np.asarray(query), TRUNCATED_DIM).tolist(),
        TRUNCATED_MODEL,
        Filters(kinds=("code", "docs")),
        50,
    )
    assert {h.id for h in found} == set(cut)
    # Hybrid runs on BM25 alone for a query vector of the old model (arq: one prior for all).
    arq = Filters(project="arq")
    bm25 = index.bm25("connection pool settings", arq, 10)
    assert len(bm25) == 10
    hybrid = index.hybrid("connection pool settings", query, DEFAULT_MODEL, arq, 10)
    assert [h.id for h in hybrid] == [h.id for h in bm25]


def test_odd_queries_do_not_fail(index: SearchIndex) -> None:
    for query in (
        '"unbalanced',
        "a:b AND (c",
        "the of and",
        "",
        "***",
        "NOT OR AND",
        "serialize_result(job_id)",
        "x-y.py",
    ):
        assert isinstance(index.bm25(query, Filters(), 5), list)
        assert isinstance(index.hybrid(query, None, None, Filters(), 5), list)
    assert index.bm25("", Filters(), 5) == []


def test_the_directory_is_private(index: SearchIndex, tmp_path: Path) -> None:
    root = tmp_path / "search"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            assert stat.S_IMODE((Path(dirpath) / name).stat().st_mode) == 0o700
        for name in filenames:
            assert stat.S_IMODE((Path(dirpath) / name).stat().st_mode) == 0o600, name


def test_the_search_indexes_load_before_the_model_without_a_crash() -> None:
    """usearch's library loaded before onnxruntime's made onnxruntime's load segfault: a bench
    or tool that imports the search layer first must still be able to load the model."""
    probe = (
        "import memoryd.searchindex, memoryd.searchindex.indexsync, onnxruntime, fastembed; "
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_forget_leaves_no_byte_of_the_rows_and_keeps_every_other(
    index: SearchIndex, corpus: Corpus, tmp_path: Path
) -> None:
    """All of the corpus went in with one commit: one segment, which a plain delete leaves
    holding the deleted rows' text, and a vector index whose removed slots keep theirs."""
    doomed = next(d for d in corpus.docs if d.path == "mrecords.py" and len(d.content) > 200)
    vector = np.asarray(doomed.vector, np.float16).tobytes()
    index.close()  # the vectors checkpointed: the f16 bytes are in a file now
    files = [p for p in (tmp_path / "search").rglob("*") if p.is_file()]
    stored = b"".join(p.read_bytes() for p in files if p.suffix == ".store")
    # The document store is compressed: a stretch of the row's own text that is there as it
    # is (and in no other row).
    others = [d.content for d in corpus.docs if d.id != doomed.id]
    text = next(
        piece.encode()
        for i in range(len(doomed.content) - 24)
        if (piece := doomed.content[i : i + 24]).encode() in stored
        and not any(piece in other for other in others)
    )

    def holding() -> set[str]:
        files = [p for p in (tmp_path / "search").rglob("*") if p.is_file()]
        return {p.name for p in files if text in p.read_bytes() or vector in p.read_bytes()}

    assert "vectors-code.usearch" in holding() and any(n.endswith(".store") for n in holding())
    reopened = SearchIndex(tmp_path / "search")
    query = "mrecords fromarrays"
    cron = Filters(path="cron.py")

    # The other rows as they were (the scores move a little: one row fewer in the statistics).
    def found() -> dict[str, list[tuple[str, object]]]:
        searches = _all_searches(reopened, corpus, cron, CRON).items()
        return {name: sorted((h.id, h.fields) for h in hits) for name, hits in searches}

    before = found()
    reopened.forget([("code_chunk", doomed.id)])
    reopened.commit(2)
    assert holding() == set()
    assert len(reopened) == len(corpus.docs) - 1
    assert doomed.id not in {h.id for h in reopened.bm25(query, Filters(), 50)}
    assert found() == before
    reopened.close()


def _nearest(corpus: Corpus, docs: list[Doc], query: list[float], k: int) -> list[str]:
    """The ids of the `k` docs nearest `query`, by brute force."""
    matrix = np.asarray([d.vector for d in docs], np.float32)
    q = np.asarray(query, np.float32)
    similarity = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    return [docs[i].id for i in np.argsort(-similarity, kind="stable")[:k]]


def test_each_kind_has_its_own_vectors_and_a_search_merges_them(
    tmp_path: Path, corpus: Corpus
) -> None:
    """Memories with a vector are few among many without (tool results are not embedded):
    a memory search finds the nearest of those few, whatever the code rows' vectors; a search
    over several kinds merges each kind's nearest; vectors set later reach the kind of their
    row (a docs chunk's, the docs index), and all of it comes back from the journals."""
    memories = [
        replace(d, table="memory", id=f"m{n}", kind="memory", path=None, language=None)
        for n, d in enumerate(corpus.docs[:60])
    ]
    with_vector = memories[::10]
    ix = SearchIndex(tmp_path / "search")
    ix.upsert(corpus.docs, DEFAULT_MODEL)
    ix.upsert([replace(m, vector=None) for m in memories])
    ix.upsert(with_vector, DEFAULT_MODEL)
    # The docs chunks lose their vectors, then get them back by id.
    prose = [d for d in corpus.docs if d.kind == "docs"]
    ix.upsert([replace(d, vector=None) for d in prose])
    ix.set_vectors("code_chunk", {d.id: list(d.vector or []) for d in prose}, DEFAULT_MODEL)
    ix.commit(1)
    query = corpus.vector("build a masked record array from a list of arrays")

    def searches(index: SearchIndex) -> dict[str, list[str]]:
        return {
            name: [h.id for h in index.knn(query, DEFAULT_MODEL, Filters(kinds=kinds), 5)]
            for name, kinds in (
                ("memory", ("memory",)),
                ("docs", ("docs",)),
                ("code+docs", ("code", "docs")),
            )
        }

    expected = {
        "memory": _nearest(corpus, with_vector, query, 5),
        "docs": _nearest(corpus, prose, query, 5),
        "code+docs": _nearest(corpus, corpus.docs, query, 5),
    }
    assert searches(ix) == expected
    assert sorted(p.name for p in (tmp_path / "search").glob("*.journal")) == sorted(
        f"vectors-{kind}{part}.journal"
        for kind, parts in (
            ("code", ("", "-past", "-first", "-first-past")),
            ("docs", ("", "-past", "-first", "-first-past")),
            ("goal", ("", "-past")),
            ("memory", ("", "-past")),
        )
        for part in parts
    )
    del ix
    gc.collect()
    assert searches(SearchIndex(tmp_path / "search")) == expected


def test_while_few_rows_have_vectors_the_knn_counts_by_their_share(
    tmp_path: Path, corpus: Corpus
) -> None:
    """A cold index writes its chunks before their vectors: with a tenth of them embedded, the
    nearest of that tenth (found by meaning, the other rows not at all) must not fill the
    results: they stay BM25's (8 or more of its top 10; 4 when the k-NN counted fully). With
    every vector in, the k-NN counts fully again (2 of BM25's top 10 stay, measured)."""
    ix = SearchIndex(tmp_path / "search")
    ix.upsert([replace(d, vector=None) for d in corpus.docs])
    ix.upsert(corpus.docs[::10], DEFAULT_MODEL)
    ix.commit(1)
    query = "build a masked record array from a list of arrays"
    vector = corpus.vector(query)
    everything = Filters(kinds=("code", "docs"))
    top = {h.id for h in ix.bm25(query, everything, 10)}

    def shared() -> int:
        return len(top & {h.id for h in ix.hybrid(query, vector, DEFAULT_MODEL, everything, 10)})

    assert shared() >= 8
    ix.upsert(corpus.docs, DEFAULT_MODEL)
    ix.commit(2)
    assert shared() <= 5
    ix.close()


def test_a_full_disk_under_either_index_is_an_os_error(tmp_path: Path, corpus: Corpus) -> None:
    """tantivy and usearch report a fault of the disk in exceptions of their own (ValueError,
    RuntimeError), which memoryd took for bugs: a traceback in the log, and a rebuild after it
    that left the job (CI: an index commit on a data dir gone read-only). They come out as the
    OSError by which the index sync logs a disk fault in one line."""
    docs = corpus.docs
    with small_disk(tmp_path / "disk", "16m") as disk:
        ix = SearchIndex(disk / "search")
        vectors = Vectors(disk, "v")
        vectors.reset(len(docs[0].vector or []))
        vectors.set(range(len(docs)), np.array([d.vector for d in docs]))
        vectors.flush()
        fill_disk(disk)
        # Without vectors (their journal is written by Python: an OSError already). tantivy's
        # writer thread meets the full disk during the upsert or at the commit, in any of the
        # wordings the next test lists.
        faults = r"No space left on device|An index writer was killed"
        with pytest.raises(OSError, match=faults):
            ix.upsert([replace(d, vector=None) for d in docs])
            ix.commit(2)
        with pytest.raises(OSError, match=r"cannot write .*/v\.tmp: Failed to serialize"):
            vectors.checkpoint()
        # With room again, the next write opens a new writer (tantivy's first was killed).
        (disk / "filler").unlink()
        ix.upsert([replace(d, vector=None) for d in docs])
        ix.commit(2)
        assert ix.generation == 2 and len(ix) == len(docs)
        vectors.checkpoint()
        ix.close()


@pytest.mark.parametrize("room", [0, 4096, 16384])
def test_tantivy_disk_faults_in_its_other_words_are_os_errors(
    tmp_path: Path, corpus: Corpus, room: int
) -> None:
    """With a few pages left, a commit fails in words other than "An IO error occurred":
    "Internal error: 'No space left on device (os error 28)'" or "Failed to open file for
    write: 'IoError { … Os { code: 28 …'". They too are the disk's fault (one log line), and
    the writer that met them is let go, so the index writes again once there is room."""
    docs = [replace(d, vector=None) for d in corpus.docs]
    with small_disk(tmp_path / "disk", "2m") as disk:
        ix = SearchIndex(disk / "search")
        ix.upsert(docs[:20])
        ix.commit(1)
        fill_disk(disk)
        filler = disk / "filler"
        os.truncate(filler, max(0, filler.stat().st_size - room))
        faults = 0
        for generation, doc in enumerate(docs[20:26], start=2):
            try:
                ix.upsert([doc])
                ix.commit(generation)
            except OSError:
                faults += 1
        assert faults > 0  # the disk was full for some of them at least
        filler.unlink()
        ix.upsert(docs)
        ix.commit(100)
        assert ix.generation == 100 and len(ix) == len(docs)
        ix.close()


PRODUCT_BEAM = ann.EXPANSION_SEARCH


@pytest.fixture(scope="module")
def numpy_blocks() -> list[str]:
    """Real texts, all distinct in meaning: five-line blocks of numpy's installed source."""
    lines = [
        line
        for path in sorted(site_package("numpy").rglob("*.py"))
        for line in path.read_text(errors="replace").splitlines()
        if line.strip()
    ]
    return ["\n".join(lines[i : i + 5]) for i in range(0, len(lines), 5)]


@pytest.fixture(scope="module")
def numpy_blocks_vectors(numpy_blocks: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The first 10,000 blocks and 60 task-style queries, in the first-pass model's vectors
    (the vectors every chunk has first)."""
    from bench.fresh_queries import take
    from memoryd.static_embedding import load

    assert len(numpy_blocks) >= 10_000
    return load().embed(numpy_blocks[:10_000]), load().embed(take(60))


@pytest.mark.parametrize("beam", [PRODUCT_BEAM, 64])
def test_the_ann_finds_the_exact_top_10_of_real_vectors_where_a_narrow_beam_misses(
    tmp_path: Path,
    beam: int,
    monkeypatch: pytest.MonkeyPatch,
    numpy_blocks_vectors: tuple[np.ndarray, np.ndarray],
) -> None:
    """Asked for 10 × OVERSAMPLE as memoryd's k-NN asks with no filter, the product's search
    beam finds the exact top 10 of the queries at recall >= 0.95, and usearch's default beam
    of 64 does not (what the beam is for; bench/ann_recall.py measures 100k)."""
    monkeypatch.setattr(ann, "EXPANSION_SEARCH", beam)
    rows, queries = numpy_blocks_vectors
    index = ann.Vectors(tmp_path, "v")
    index.open(0)
    index.reset(rows.shape[1])
    index.set(np.arange(len(rows), dtype=np.uint64), rows)
    want = int(10 * index_module.OVERSAMPLE)
    found = 0
    for query in queries:
        labels, _ = index.search(query, want)
        exact = np.argsort(-(rows @ query), kind="stable")[:10]
        found += len(set(labels[:10].tolist()) & set(exact.tolist()))
    recall = found / (10 * len(queries))
    assert (recall >= 0.95) is (beam == PRODUCT_BEAM), recall


def test_the_exact_scan_reads_in_chunks_and_finds_the_top_10_of_one_full_scan(
    tmp_path: Path, numpy_blocks_vectors: tuple[np.ndarray, np.ndarray]
) -> None:
    """An exact scan over more labels than one chunk (a path glob at 1M rows keeps 50k) gives
    the nearest rows and distances of a scan of every held row at once; labels the index does
    not hold (removed, or never set) are passed over."""
    rows, queries = numpy_blocks_vectors
    assert len(rows) > 2 * ann.EXACT_CHUNK
    index = ann.Vectors(tmp_path, "v")
    index.open(0)
    index.reset(rows.shape[1])
    index.set(np.arange(len(rows), dtype=np.uint64), rows)
    removed = np.arange(0, len(rows), 7, dtype=np.uint64)
    index.remove(removed.tolist())
    never = np.arange(len(rows), len(rows) + 500, dtype=np.uint64)
    asked = np.concatenate([np.arange(len(rows), dtype=np.uint64), never])
    held, matrix = index.get(asked)
    assert len(held) == len(rows) - len(removed)
    for query in queries[:20]:
        labels, distances = index.exact(query, asked, 10)
        cosines = (matrix @ query) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
        order = np.argsort(1.0 - cosines, kind="stable")[:10]
        assert labels.tolist() == held[order].tolist()
        assert distances.tolist() == pytest.approx((1.0 - cosines[order]).tolist(), abs=1e-6)
        assert not set(labels.tolist()) & set(removed.tolist())


# Re-indexing as a daemon meets it: CHURN_FIRST rows written, then CHURN_ROUNDS times a
# CHURN_SHARE of the rows valid now retired and as many new rows written, in index jobs of
# CHURN_BATCH rows (each committed).
CHURN_FIRST, CHURN_SHARE, CHURN_ROUNDS, CHURN_BATCH = 2_000, 0.4, 4, 1_000
# How far below a fresh build of the same rows a churned index's recall@10 may be.
CHURN_MARGIN = 0.01


@dataclass(frozen=True)
class Churn:
    docs: list[Doc]  # every row, in the order written; retired ones with their valid_until
    retired: list[tuple[int, list[str]]]  # each round's time and rows retired, then new rows
    queries: np.ndarray
    model: str
    fresh: float  # recall@10 of the same rows written at once, each in its final state

    def recall(self, ix: SearchIndex) -> float:
        """Mean recall@10 of the index's k-NN against an exact scan of the rows valid now."""
        valid = [d for d in self.docs if d.valid_until is None]
        matrix = np.asarray([d.vector for d in valid], np.float32)
        found = 0
        for query in self.queries:
            exact = {valid[i].id for i in np.argsort(-(matrix @ query), kind="stable")[:10]}
            got = {h.id for h in ix.knn(query, self.model, Filters(), 10)}
            found += len(exact & got)
        return found / (10 * len(self.queries))


def _write(ix: SearchIndex, docs: list[Doc], model: str) -> None:
    for start in range(0, len(docs), CHURN_BATCH):
        ix.upsert(docs[start : start + CHURN_BATCH], model)
        ix.commit()


@pytest.fixture(scope="module")
def churn(
    tmp_path_factory: pytest.TempPathFactory,
    numpy_blocks: list[str],
    numpy_blocks_vectors: tuple[np.ndarray, np.ndarray],
) -> Churn:
    from memoryd.static_embedding import load

    rows, queries = numpy_blocks_vectors
    new = int(CHURN_FIRST * CHURN_SHARE)
    total = CHURN_FIRST + CHURN_ROUNDS * new
    assert total <= len(rows)
    docs = [
        Doc(
            "code_chunk",
            f"numpy#{i}",
            "code",
            numpy_blocks[i],
            project="numpy",
            path=f"blocks/{i // 100}.py",
            valid_from=T0 + i,
            vector=rows[i].tolist(),
        )
        for i in range(total)
    ]
    rng, valid, retired = np.random.default_rng(34), list(range(CHURN_FIRST)), []
    for round_ in range(CHURN_ROUNDS):
        gone = set(rng.choice(valid, new, replace=False).tolist())
        at = T0 + total + round_
        retired.append((at, [docs[i].id for i in sorted(gone)]))
        docs = [replace(d, valid_until=at) if i in gone else d for i, d in enumerate(docs)]
        written = CHURN_FIRST + round_ * new
        valid = [i for i in valid if i not in gone] + list(range(written, written + new))
    churn = Churn(docs, retired, queries, load().model, 0.0)
    fresh = SearchIndex(tmp_path_factory.mktemp("fresh"))
    _write(fresh, docs, churn.model)
    assert fresh.vectors_held()["code"] == CHURN_FIRST
    return replace(churn, fresh=churn.recall(fresh))


class HeldThread(threading.Thread):
    """A renewal's thread held before its first step until someone joins it (a test's
    `settle`, a close): the writes a test makes meanwhile all come during the renewal."""

    started: ClassVar[list[HeldThread]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = threading.Event()
        HeldThread.started.append(self)

    def run(self) -> None:
        self.go.wait()
        super().run()

    def join(self, timeout: float | None = None) -> None:
        self.go.set()
        super().join(timeout)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[HeldThread]:
    """The renewals' threads this test started, each held (HeldThread)."""
    monkeypatch.setattr(ann, "Thread", HeldThread)
    monkeypatch.setattr(HeldThread, "started", [])
    return HeldThread.started


def _churn_round(ix: SearchIndex, churn: Churn, round_: int) -> None:
    """Round `round_` of the churn: its rows retired, then as many new rows written."""
    at, ids = churn.retired[round_]
    for start in range(0, len(ids), CHURN_BATCH):
        ix.retire("code_chunk", ids[start : start + CHURN_BATCH], at)
        ix.commit()
    written = CHURN_FIRST + round_ * len(ids)
    new = [replace(d, valid_until=None) for d in churn.docs[written : written + len(ids)]]
    _write(ix, new, churn.model)


def _found_by_their_vectors(ix: SearchIndex, valid: list[Doc], model: str) -> None:
    """Each of these rows is found with its vector by an exact scan of its file's rows in
    the ANN index of rows valid now (as some texts repeat, a row may tie with its twins)."""
    twins: dict[bytes, set[str]] = {}
    for d in valid:
        twins.setdefault(np.asarray(d.vector, np.float32).tobytes(), set()).add(d.id)
    for d in valid:
        [top] = ix.knn(d.vector, model, Filters(path=d.path), 1)
        assert top.id in twins[np.asarray(d.vector, np.float32).tobytes()]
        assert top.score == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("renew", [True, False])
def test_an_index_churned_by_reindexing_keeps_the_recall_of_a_fresh_build(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    churn: Churn,
    held: list[HeldThread],
    renew: bool,
) -> None:
    """usearch gives a removed row's slot to the next row added, while the other nodes keep
    their links to it, now leading to an unrelated vector: rounds of retiring and writing
    rows (files re-indexed) cost the valid-now index its recall. With its graph renewed once
    reused slots pass RENEW_SHARE of its size, memoryd's k-NN over the churned index finds
    the exact top 10 within CHURN_MARGIN of a fresh build of the same rows; never renewed, it
    falls further behind (real first-pass vectors, a fixed schedule: the same figures every
    run). The renewal runs beside the writer: the rounds after the first, and rows whose
    vectors change, are all written while it is held before its first step; the fresh graph
    that replaces the worn one holds exactly the rows valid now, each with its vector."""
    if not renew:
        monkeypatch.setattr(ann, "RENEW_SHARE", float("inf"))
    # Small enough that the renewal's thread brings over the first rounds' writes itself.
    monkeypatch.setattr(ann, "RENEW_CHUNK", 1000)
    ix = SearchIndex(tmp_path / "churned")
    _write(ix, [replace(d, valid_until=None) for d in churn.docs[:CHURN_FIRST]], churn.model)
    _churn_round(ix, churn, 0)
    # The first round's new rows took freed slots past RENEW_SHARE: a renewal started.
    assert len(held) == renew and all(t.is_alive() for t in held)
    _churn_round(ix, churn, 1)
    _churn_round(ix, churn, 2)
    assert len(held) == renew  # one at a time
    for thread in held:
        # Built over the rows valid now (those retired meanwhile left out), then the
        # rounds' writes brought over by the thread (more than RENEW_CHUNK of them).
        thread.join()
    # After the build, before the swap: 100 pairs of rows valid throughout swap their
    # vectors (the set of vectors valid now, so the exact top 10 of each query, stays that
    # of the fresh build), and the last round retires rows the build read. Its first commit
    # swaps the fresh graph in, bringing over these rows: only these (200 + 800).
    gone = {i for _, ids in churn.retired for i in ids}
    kept = [i for i, d in enumerate(churn.docs[:CHURN_FIRST]) if d.id not in gone][:200]
    docs = list(churn.docs)
    for a, b in zip(kept[:100], kept[100:], strict=True):
        docs[a], docs[b] = (
            replace(docs[a], vector=docs[b].vector),
            replace(docs[b], vector=docs[a].vector),
        )
    ix.upsert([docs[i] for i in kept], churn.model)
    caplog.set_level(logging.INFO, ann.__name__)
    _churn_round(ix, churn, 3)
    swaps = [r.args for r in caplog.records if r.args and r.args[0] == "vectors-code"]
    assert [(size, swapped) for _, size, _, swapped, _ in swaps] == [(1200, 1000)] * renew
    # The rows brought over took freed slots past RENEW_SHARE of the fresh graph (1,200 rows
    # once the round's retirement is in): a second renewal started at that commit, and the
    # round's new rows were written while it was held.
    assert len(held) == 2 * renew and all(t.is_alive() for t in held[1:])
    ix.settle()
    assert len(held) == 2 * renew and not any(t.is_alive() for t in held)
    churn = replace(churn, docs=docs)
    assert len(churn.docs) == len(ix)
    counts = ix.vectors_held()
    assert counts["code"] == CHURN_FIRST and counts["code-past"] == len(docs) - CHURN_FIRST
    # Every row valid now is found with its vector (the swapped ones with their new one) by
    # an exact scan of its file's rows in the ANN index of rows valid now (as some texts
    # repeat, a row may tie with its twins): with the count above, that index's labels are
    # exactly the rows valid now. The rows retired during the renewals are not among them.
    valid = [d for d in docs if d.valid_until is None]
    assert len(valid) == CHURN_FIRST
    _found_by_their_vectors(ix, valid, churn.model)
    recall = churn.recall(ix)
    assert (recall >= churn.fresh - CHURN_MARGIN) is renew, (recall, churn.fresh)
    # The stamp keeps, per ANN index, its slots freed and not taken yet and those taken
    # again since its graph was built: renewed, none (each round's new rows, 40% of the
    # index, took slots past RENEW_SHARE at once); never renewed, every round's (none lost
    # at a reopen).
    # The renewed graph was checkpointed: reopened from disk, the index finds what it found.
    ix.close()
    reopened = SearchIndex(tmp_path / "churned")
    reopened.commit()
    stamp = json.loads((tmp_path / "churned" / index_module.STAMP).read_text())
    # (Never renewed: the slots of each round and of the 200 rows whose vectors changed.)
    reused = 0 if renew else CHURN_ROUNDS * int(CHURN_FIRST * CHURN_SHARE) + len(kept)
    assert stamp["wear"]["code"] == [0, reused]
    assert churn.recall(reopened) == recall


def test_a_close_during_a_renewal_abandons_it_and_the_next_start_renews_again(
    tmp_path: Path, churn: Churn, held: list[HeldThread]
) -> None:
    """A stop while a worn graph is being renewed abandons the renewal: the worn graph and
    its journal are checkpointed as they are, with every row, and the wear kept in the stamp
    has the first commit after the reopen renew the graph again."""
    ix = SearchIndex(tmp_path / "churned")
    _write(ix, [replace(d, valid_until=None) for d in churn.docs[:CHURN_FIRST]], churn.model)
    _churn_round(ix, churn, 0)
    _churn_round(ix, churn, 1)  # during the renewal
    [renewal] = held
    assert renewal.is_alive()
    ix.close()
    assert not renewal.is_alive()
    reopened = SearchIndex(tmp_path / "churned")
    rows = int(CHURN_FIRST * CHURN_SHARE)
    assert len(reopened) == CHURN_FIRST + 2 * rows
    assert reopened.vectors_held() == {
        **dict.fromkeys(reopened.vectors_held(), 0),
        "code": CHURN_FIRST,
        "code-past": 2 * rows,
    }
    valid = [replace(d, valid_until=None) for d in churn.docs[: CHURN_FIRST + 2 * rows]]
    retired = {i for _, ids in churn.retired[:2] for i in ids}
    assert reopened.vector_of("code_chunk", [d.id for d in valid]) == dict.fromkeys(
        (d.id for d in valid), "full"
    )
    reopened.commit()
    assert len(held) == 2 and held[1].is_alive()
    reopened.settle()
    _found_by_their_vectors(reopened, [d for d in valid if d.id not in retired], churn.model)
    stamp = json.loads((tmp_path / "churned" / index_module.STAMP).read_text())
    assert stamp["wear"]["code"] == [0, 0]
    reopened.close()


def test_a_row_forgotten_during_a_renewal_leaves_no_byte_in_the_fresh_graph(
    tmp_path: Path, churn: Churn, held: list[HeldThread]
) -> None:
    """A renewal's build copies the vectors of the worn graph: a row forgotten after its
    vector was copied is taken out of the fresh graph too, its slot written over, before the
    swap's checkpoint saves that graph."""
    ix = SearchIndex(tmp_path / "churned")
    _write(ix, [replace(d, valid_until=None) for d in churn.docs[:CHURN_FIRST]], churn.model)
    _churn_round(ix, churn, 0)
    [renewal] = held
    renewal.join()  # it copied every row valid now
    _, retired = churn.retired[0]
    doomed = next(d for d in churn.docs if d.id not in retired)
    # Its vector as the graphs hold it, and as the journal does.
    forms = [np.asarray(doomed.vector, dtype).tobytes() for dtype in (np.float16, np.float32)]

    def holding() -> set[str]:
        files = [p for p in (tmp_path / "churned").rglob("*") if p.is_file()]
        return {p.name for p in files for form in forms if form in p.read_bytes()}

    assert holding() == {"vectors-code.journal"}
    ix.forget([("code_chunk", doomed.id)])
    ix.commit()  # swaps the fresh graph in and checkpoints it
    assert holding() == set()
    assert len(held) == 1 and ix.vectors_held()["code"] == CHURN_FIRST - 1
    ix.close()
    assert holding() == set()
