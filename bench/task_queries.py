"""Which files does a search find for task-style queries? memoryd against two baselines.

    .venv/bin/python -m bench.task_queries REPO [REPO...] [--name OWNER/NAME...] [--work DIR]

REPO: a git repository with real history (a working tree or a bare git dir). Per repo:

Task queries (the rule, fixed before any result was seen): the newest 100 non-merge commits
of HEAD that change 1 to 3 source files. A source file is a `.py` file outside tests, docs and
examples (no directory named test(s), doc(s), example(s), testing; not test_*.py, *_test.py
or conftest.py); changes to other files do not count either way. Query: the commit's subject,
a trailing pull-request number "(#123)" removed. Relevant: its changed source files. The
tree searched is the one at the first parent of the oldest of those commits, extracted once,
so no query's own change (nor its changelog line) is in it; a relevant file absent from that
tree is dropped, and a query left with none is dropped and counted.

Docstring queries (a regression guard): the first line (5 words or more) of the docstrings of
functions and classes in that tree's source files, a line found in two files dropped; 100 of
them drawn with a fixed seed. Relevant: the file the docstring is in.

Ranked files, all over the same files (what memoryd's walk indexes in that tree):
- memoryd: `memoryd.searchindex.search.search`, the daemon's search (default kind `code`), on a
  data dir filled by the daemon's own index job (private Redis, worker, embedded SurrealDB, the
  model); files in the order of their first chunk among the top SEARCH_LIMIT chunks.
- bm25-file: tantivy BM25 over whole files (English stemming), the query's words OR-ed.
- vec-window: 40-line windows (no overlap) embedded by the same model; a file scores the
  cosine of its best window.
Each baseline runs twice: over all those files (`all`), and over only those memoryd's `code`
kind holds (`code`: no prose, changelogs or readmes), as memoryd's default search does.

R@k: the share of a query's relevant files among the top k files, averaged over queries.
Target (task queries): memoryd ahead of the best baseline by >= 0.05 at R@5 and at R@10.
Docstring queries: memoryd no worse than the best baseline.

--work DIR keeps the trees, data dirs and window vectors for another run (the search indexes
are rebuilt from the database at each run, so a ranking change is measured); without it,
everything is made in a temp dir and removed.

--first-pass adds the row `memoryd-first`: the same search with every chunk holding only its
first-pass vector (memoryd/static_embedding.py; the search indexes rebuilt as if the full
model had reached no chunk yet), the query embedded the same way. Target: within
FIRST_PASS_MARGIN R@5 of the memoryd row (what a search finds before the full model's vectors).

--no-windows leaves out the vec-window baseline (it embeds every file again with the model:
on a loaded machine as long as the index itself), for a run that only compares memoryd's rows.

--without-redaction indexes with secret redaction turned off, in this process only and into a
data dir of its own: run once with it and once without to see what redaction costs retrieval
(hashes, lockfiles and base64 fixtures look like secrets to a detector).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import random
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import blake3
import numpy as np
import tantivy

from bench.incremental import load
from memoryd import projects, queue
from memoryd.config import load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.results import SearchRequest
from memoryd.scan import read_source, walk
from memoryd.searchindex import chunk_kind
from memoryd.searchindex.search import search
from workers import indexing
from workers.stages.chunking import language_for_path

COMMITS = 100
MAX_SOURCE_FILES = 3
DOCSTRINGS = 100
DOCSTRING_MIN_WORDS = 5
WINDOW_LINES = 40
SEARCH_LIMIT = 60
KS = (5, 10)
MARGIN = 0.05
FIRST_PASS_MARGIN = 0.03
BOOTSTRAP = 2000
NOT_SOURCE_DIRS = frozenset({"test", "tests", "testing", "doc", "docs", "example", "examples"})
_PR_NUMBER = re.compile(r"\s*\(#\d+\)\s*$")
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    relevant: frozenset[str]


def is_source(path: str) -> bool:
    parts = path.split("/")
    base = parts[-1]
    return (
        base.endswith(".py")
        and not any(p in NOT_SOURCE_DIRS for p in parts[:-1])
        and not base.startswith("test_")
        and not base.endswith("_test.py")
        and base != "conftest.py"
    )


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True
    ).stdout


def repo_name(git_dir: Path, given: str | None) -> str:
    if given:
        return given
    try:
        url = git(git_dir, "config", "--get", "remote.origin.url").strip()
    except subprocess.CalledProcessError:
        url = ""
    if url:
        return "/".join(url.removesuffix(".git").replace(":", "/").split("/")[-2:])
    return git_dir.resolve().name


def task_commits(git_dir: Path) -> list[tuple[str, str, list[str]]]:
    """(sha, subject, changed source files) of the newest COMMITS qualifying commits."""
    log = git(git_dir, "log", "--no-merges", "--format=@@%H %s", "--name-only", "HEAD")
    found: list[tuple[str, str, list[str]]] = []
    for entry in log.split("@@")[1:]:
        head, *files = entry.strip("\n").split("\n")
        sha, _, subject = head.partition(" ")
        sources = sorted({f for f in files if f and is_source(f)})
        if 1 <= len(sources) <= MAX_SOURCE_FILES:
            found.append((sha, subject, sources))
            if len(found) == COMMITS:
                break
    return found


def extract(git_dir: Path, sha: str, tree: Path) -> None:
    """The tree at `sha`, as a git working tree of its own (memoryd indexes git trees)."""
    if (tree / ".git").is_dir():
        return
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", sha], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)


def tree_files(tree: Path) -> dict[str, str]:
    """path -> text of every file memoryd's walk lists and reads as text."""
    files = {}
    for rel in walk(tree):
        text = read_source((tree / rel).read_bytes()).text
        if text is not None:
            files[rel] = text
    return files


def docstring_queries(files: dict[str, str]) -> list[Query]:
    seen: dict[str, set[str]] = {}
    for path, text in sorted(files.items()):
        if not is_source(path):
            continue
        try:
            module = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                doc = ast.get_docstring(node)
                line = doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""
                if len(line.split()) >= DOCSTRING_MIN_WORDS:
                    seen.setdefault(line, set()).add(path)
    unique = sorted((line, paths.pop()) for line, paths in seen.items() if len(paths) == 1)
    drawn = random.Random(0).sample(unique, min(DOCSTRINGS, len(unique)))
    return [Query(line, frozenset({path})) for line, path in drawn]


def recall(ranked: Sequence[str], relevant: frozenset[str], k: int) -> float:
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


class FileBM25:
    """Whole files in tantivy, BM25 with English stemming."""

    def __init__(self, files: dict[str, str]) -> None:
        b = tantivy.SchemaBuilder()
        b.add_text_field("path", stored=True, tokenizer_name="raw")
        b.add_text_field("body", tokenizer_name="en_stem")
        self.index = tantivy.Index(b.build())
        writer = self.index.writer(64_000_000, 1)
        for path, text in files.items():
            writer.add_document(tantivy.Document(path=path, body=text))
        writer.commit()
        self.index.reload()

    def rank(self, query: str, k: int) -> list[str]:
        words = [w.lower() for w in _WORD.findall(query)]
        if not words:
            return []
        searcher = self.index.searcher()
        hits = searcher.search(self.index.parse_query(" ".join(words), ["body"]), k).hits
        return [searcher.doc(address)["path"][0] for _, address in hits]


class WindowVectors:
    """Files cut into WINDOW_LINES-line windows, each embedded; a file scores its best window."""

    def __init__(self, files: dict[str, str], embed: object, cache: Path | None) -> None:
        self.paths: list[str] = []
        texts: list[str] = []
        for path, text in files.items():
            lines = text.splitlines()
            for lo in range(0, len(lines), WINDOW_LINES):
                window = "\n".join(lines[lo : lo + WINDOW_LINES])
                if window.strip():
                    self.paths.append(path)
                    texts.append(window)
        digest = blake3.blake3("\0".join(texts).encode()).hexdigest()[:16]
        stored = cache / f"windows-{digest}.npy" if cache else None
        if stored is not None and stored.exists():
            self.matrix = np.load(stored)
        else:
            self.matrix = np.asarray(embed(texts), np.float32)  # type: ignore[operator]
            if stored is not None:
                np.save(stored, self.matrix)
        self.matrix /= np.linalg.norm(self.matrix, axis=1, keepdims=True)

    def rank(self, vector: Sequence[float], k: int) -> list[str]:
        scores = self.matrix @ np.asarray(vector, np.float32)
        return unique(self.paths[i] for i in np.argsort(-scores, kind="stable"))[:k]


async def memoryd_index(data_dir: Path, tree: Path) -> tuple[Runtime, float]:
    """A runtime that indexed `tree` with the daemon's own job; the search indexes are
    rebuilt from the database first (a kept data dir is measured with today's ranking)."""
    rt = Runtime(load_settings(data_dir=data_dir))
    await rt.start_queue(exclusive=True)
    started = time.perf_counter()
    await rt.serve()
    assert rt.redis is not None and rt.search is not None
    await rt.search.rebuild()
    jobs = await projects.sync(rt.redis, projects.resolve(tree), rt.settings.index_batch_files)
    for job, _ in jobs:
        # Until the vectors, which an embed job attaches after the chunks, are stored too.
        await queue.embedded_later(rt.redis, await queue.wait_for(job, timeout=3600), 3600)
    return rt, time.perf_counter() - started


async def first_pass_hits(rt: Runtime, texts: Sequence[str]) -> list[list[str]]:
    """Files ranked by memoryd for each query with first-pass vectors only: the indexes
    rebuilt while the sync takes no vector of the model as its own, then rebuilt as they were."""
    assert rt.store is not None and rt.embedder is not None and rt.search is not None
    model, rt.search.model = rt.search.model, "(none: first pass only)"
    try:
        await rt.search.rebuild()
        return [
            unique(
                h.path
                for h in (
                    await search(
                        rt.store,
                        rt.embedder,
                        rt.search.index,
                        SearchRequest(text, limit=SEARCH_LIMIT),
                    )
                ).hits
                if h.path
            )
            for text in texts
        ]
    finally:
        rt.search.model = model
        await rt.search.rebuild()


async def evaluate(
    git_dir: Path,
    name: str | None,
    work: Path,
    data: str = "data",
    first: bool = False,
    windows: bool = True,
) -> dict[str, np.ndarray]:
    git_dir = Path(git(git_dir, "rev-parse", "--absolute-git-dir").strip())
    label = repo_name(git_dir, name)
    head = git(git_dir, "rev-parse", "HEAD").strip()
    commits = task_commits(git_dir)
    oldest = commits[-1][0]
    base = git(git_dir, "rev-parse", f"{oldest}^").strip()
    place = work / label.replace("/", "+")
    tree = place / "tree"
    extract(git_dir, base, tree)
    files = tree_files(tree)
    tasks = []
    for _, subject, sources in commits:
        relevant = frozenset(f for f in sources if f in files)
        if relevant:
            tasks.append(Query(_PR_NUMBER.sub("", subject), relevant))
    docstrings = docstring_queries(files)
    print(
        f"\n== {label}: HEAD {head[:12]}; {len(commits)} commits "
        f"({commits[0][0][:12]} back to {oldest[:12]}), tree at {base[:12]}: {len(files)} files"
    )
    print(
        f"task queries: {len(tasks)} ({len(commits) - len(tasks)} dropped: no changed source "
        f"file in the tree); docstring queries: {len(docstrings)}"
    )

    rt, seconds = await memoryd_index(place / data, tree)
    try:
        assert rt.store is not None and rt.embedder is not None and rt.search is not None
        print(
            f"memoryd: tree indexed (a kept data dir: reconciled) in {seconds:.0f} s, "
            f"{len(rt.search.index)} rows"
        )
        bm25 = FileBM25(files)
        near_windows = WindowVectors(files, rt.embedder.embed, place) if windows else None
        code = {p for p in files if chunk_kind(p, language_for_path(p)) == "code"}
        # Per method, each query's recall at each k.
        results: dict[str, np.ndarray] = {}
        for kind, queries in (("task", tasks), ("docstring", docstrings)):
            texts = [q.text for q in queries]
            vectors = rt.embedder.embed(texts) if near_windows else [[]] * len(texts)
            rows: dict[str, list[list[float]]] = {}
            for q, vector in zip(queries, vectors, strict=True):
                request = SearchRequest(q.text, limit=SEARCH_LIMIT)
                hits = (await search(rt.store, rt.embedder, rt.search.index, request)).hits
                lexical = bm25.rank(q.text, len(files))
                ranked = {
                    "memoryd": unique(h.path for h in hits if h.path),
                    "bm25-file all": lexical,
                    "bm25-file code": [p for p in lexical if p in code],
                }
                if near_windows is not None:
                    near = near_windows.rank(vector, len(files))
                    ranked["vec-window all"] = near
                    ranked["vec-window code"] = [p for p in near if p in code]
                for method, files_ranked in ranked.items():
                    rows.setdefault(f"{kind} {method}", []).append(
                        [recall(files_ranked, q.relevant, k) for k in KS]
                    )
            if first:
                for q, files_ranked in zip(
                    queries, await first_pass_hits(rt, [q.text for q in queries]), strict=True
                ):
                    rows.setdefault(f"{kind} memoryd-first", []).append(
                        [recall(files_ranked, q.relevant, k) for k in KS]
                    )
            results.update((method, np.asarray(r)) for method, r in rows.items())
        report(label, results)
        return results
    finally:
        await rt.close()


def report(label: str, results: dict[str, np.ndarray]) -> None:
    """Mean recalls, then per kind of query and k the margin over the best baseline with a
    95% interval (paired bootstrap over the queries: how much the margin owes to which
    queries were drawn)."""
    print(f"load average {load()}")
    print(f"{'':26}" + "".join(f"{f'R@{k}':>8}" for k in KS))
    for method, recalls in results.items():
        print(f"{method:26}" + "".join(f"{m:8.3f}" for m in recalls.mean(axis=0)))
    rng = np.random.default_rng(0)
    for kind, margin in (("task", MARGIN), ("docstring", 0.0)):
        ours = results[f"{kind} memoryd"]
        samples = rng.integers(0, len(ours), (BOOTSTRAP, len(ours)))
        for i, k in enumerate(KS):
            best = max(
                (r for m, r in results.items() if m.startswith(f"{kind} ") and "memoryd" not in m),
                key=lambda r: r[:, i].mean(),
            )
            diff = ours[:, i] - best[:, i]
            lo, hi = np.percentile(diff[samples].mean(axis=1), [2.5, 97.5])
            verdict = "met" if diff.mean() >= margin - 1e-9 else "NOT met"
            print(
                f"{label} {kind} R@{k}: memoryd {ours[:, i].mean():.3f} - best baseline "
                f"{best[:, i].mean():.3f} = {diff.mean():+.3f} [95% {lo:+.3f}, {hi:+.3f}] "
                f"(target >= {margin:+.2f}) {verdict}"
            )
            if f"{kind} memoryd-first" in results:
                first = results[f"{kind} memoryd-first"][:, i].mean()
                gap = first - ours[:, i].mean()
                verdict = "met" if gap >= -FIRST_PASS_MARGIN - 1e-9 else "NOT met"
                print(
                    f"{label} {kind} R@{k}: first pass {first:.3f} - memoryd "
                    f"{ours[:, i].mean():.3f} = {gap:+.3f} (target >= "
                    f"{-FIRST_PASS_MARGIN:+.2f}) {verdict}"
                )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("repos", nargs="+", type=Path)
    parser.add_argument("--name", action="append", help="a name to print per repo, in order")
    parser.add_argument("--work", type=Path, help="keep trees, data dirs and vectors here")
    parser.add_argument(
        "--without-redaction", action="store_true", help="index with redaction off (see above)"
    )
    parser.add_argument(
        "--first-pass", action="store_true", help="add the first pass's row (see above)"
    )
    parser.add_argument("--no-windows", action="store_true", help="no vec-window (see above)")
    args = parser.parse_args()
    data = "data"
    if args.without_redaction:
        indexing.redact = lambda text, _memory: text  # the one call site: plan_file
        data = "data-without-redaction"
        print("redaction OFF: for comparison only")
    names = args.name or []
    work = args.work or Path(tempfile.mkdtemp(prefix="mdtq-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for i, repo in enumerate(args.repos):
            name = names[i] if i < len(names) else None
            await evaluate(repo, name, work, data, args.first_pass, not args.no_windows)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
