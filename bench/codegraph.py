"""The code graph on real repositories: what it costs, how fast it answers, how right it is.

    .venv/bin/python -m bench.codegraph REPO [REPO...] [--sample 100] [--work DIR]
        [--only accuracy|cochange|pure-cost] [--show] [--typescript NODE_MODULES]

REPO: a git working tree with history (a repository fetched for the bench; nothing of it is
kept here). Per repo:

(a) Cost. The tree is indexed cold by the daemon's own index jobs (in-process Runtime: private
    Redis, worker, embedded SurrealDB, the model), graph included: T seconds. The graph's share
    of that is measured apart on the same files: its pure stage (parse, extract, resolve:
    `file_graph_of`) and its writes (`write_graph`, the same statements the index job runs),
    as `graph / (T - graph)` (target <= 25% extra). Bytes (measured last, as it deletes the
    graph): the database copied into fresh files, then again after the graph's rows are
    deleted (its symbol and module entities stay); the difference over the second (target
    <= 25% extra).
(b) Latency: `related` on up to 200 symbols and 100 files, `impact` on 100 files (depth 2),
    each through the query queue as a client asks; p50 and p95 (target p95 <= 50 ms).
(c) Incremental: one file edited (a function added that calls another of the file), its
    index job's own time, and the graph's part of it (target <= 100 ms of work).
(d) Reference accuracy (Python; pure, `--only accuracy` runs it without a cold index):
    `--sample` functions and methods (every `def` but dunders, nested functions excluded)
    drawn with a fixed seed from the source before the graph is looked at; their call sites
    by jedi's `get_references` (a reference followed by `(`, not the definition, inside the
    repo) against memoryd's callers from the pure stage's rows (every line of each CALLS
    edge, and with the guesses by name that have one candidate); precision and recall of
    (file, line) pairs, summed over the sample (targets: precision >= 0.9, recall >= 0.8).
    `--show` lists the misses and the extras. With `--typescript NODE_MODULES` (npm's
    `typescript` 5, whose language service bench/ts_references.cjs asks), the same for the
    repository's TypeScript functions and methods against `findReferences`.
(a') `--only pure-cost`, no daemon: the graph's pure stage (extract + resolve on the parse the
    chunker shares, as the index job runs it) against chunking's (parse + chunker) on the same
    files, in CPU seconds with the load average (target <= 25%), and the slowest file's graph
    (an edit's extraction; target <= 100 ms), for trees too large to index cold on a shared
    machine.
(e) Co-change: the newest 100 non-merge commits changing 2 or 3 source files are the test;
    CHANGES_WITH is counted (the daemon's own `pairs`) from the commits before the oldest of
    them, within the default window. Given each changed file, is another file of the commit in
    its top 5? hit@5 against 5 random source files and 5 random files of its own directory
    (seed fixed), over the files at the test commits' parent that exist at HEAD.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tree_sitter import Tree

from memoryd import heap, jobs, projects, queue
from memoryd.config import Settings, load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.database.compact import DB_DIR, compact_files, size
from memoryd.database.migrate import CODE_GRAPH_TABLES
from workers.cochange import commits_of, is_source, pairs
from workers.stages.chunking import chunk_text, language_for_path, parse
from workers.stages.codegraph import DiskTree, GraphRows, file_graph_of
from workers.stages.codegraph.extract import GRAPH_LANGUAGES, extract
from workers.stages.codegraph.resolve import guess, resolve

SEED = 35


def _ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


async def _index(rt: Runtime, root: Path) -> dict[str, int]:
    assert rt.redis is not None
    totals: dict[str, int] = {"files": 0, "chunks": 0}
    for job, _ in await projects.sync(
        rt.redis, projects.resolve(root), rt.settings.index_batch_files
    ):
        report = await queue.wait_for(job, timeout=7200)
        totals["files"] += report["files"]
        totals["chunks"] += report["chunks"]
        await queue.embedded_later(rt.redis, report, timeout=7200)
    return totals


async def cost(rt: Runtime, root: Path, project_id: str) -> list[str]:
    assert rt.store is not None
    started = time.perf_counter()
    totals = await _index(rt, root)
    whole = time.perf_counter() - started
    paths = await rt.store.indexed_paths(project_id)
    started = time.perf_counter()
    graph = await asyncio.to_thread(file_graph_of, project_id, root, paths)
    pure = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, len(graph), 200):
        await rt.store.write_graph(project_id, graph[start : start + 200])
    writes = time.perf_counter() - started
    part = pure + writes
    edges = sum(len(g.edges) for g in graph)
    refs = sum(len(g.refs) for g in graph)
    lines = [
        f"(a) cold index: {totals['files']} files, {totals['chunks']} chunks in {whole:.1f} s; "
        f"graph: {edges} edges, {refs} references by name: {pure:.2f} s extracting + "
        f"{writes:.2f} s writing = {part / max(whole - part, 1e-9):.1%} extra (target <= 25%)"
    ]
    return lines


async def graph_bytes(rt: Runtime, root: Path, project_id: str) -> list[str]:
    """The database's bytes with and without the graph's rows (run last: it deletes them)."""
    assert rt.store is not None
    await compact_files(rt.store)
    await rt.store.reopen()
    with_graph = size(rt.settings.data_dir / DB_DIR)
    tables = (*CODE_GRAPH_TABLES, "changes_with")
    await rt.store.query("".join(f"DELETE {table};" for table in tables))
    await compact_files(rt.store)
    await rt.store.reopen()
    without = size(rt.settings.data_dir / DB_DIR)
    return [
        f"    database: {with_graph / 1e6:.1f} MB, {without / 1e6:.1f} MB without the graph's "
        f"rows: {(with_graph - without) / max(without, 1):.1%} extra (target <= 25%)"
    ]


async def latency(rt: Runtime, root: Path, project_id: str) -> list[str]:
    assert rt.redis is not None and rt.store is not None
    rows = (
        await rt.store.query(
            "SELECT VALUE target FROM defines WHERE project = type::record('project', $p) "
            "AND valid_until IS NONE ORDER BY target",
            {"p": project_id},
        )
    )[0]
    rng = random.Random(SEED)
    symbols = rng.sample(rows, min(200, len(rows)))
    # Files the graph knows (a data file such as .netrc has no file entity to ask about).
    graphed = sorted({key.split(":", 1)[1].split("#", 1)[0] for key in rows})
    files = rng.sample(graphed, min(100, len(graphed)))
    timed: dict[str, list[float]] = {"related symbol": [], "related file": [], "impact": []}
    for what, targets in (("related symbol", symbols), ("related file", files)):
        for target in targets:
            ask = target.split(":", 1)[1] if what == "related symbol" else str(root / target)
            started = time.perf_counter()
            await queue.call(rt.redis, jobs.RELATED, ask, str(root), project_id, None, 50)
            timed[what].append(time.perf_counter() - started)
    for target in files:
        started = time.perf_counter()
        await queue.call(rt.redis, jobs.IMPACT, [str(root / target)], str(root), 2, None, 50)
        timed["impact"].append(time.perf_counter() - started)
    return [f"(b) {what} x{len(s)}: {_ms(s)} (target p95 <= 50 ms)" for what, s in timed.items()]


async def incremental(rt: Runtime, root: Path, project_id: str) -> list[str]:
    assert rt.redis is not None
    candidates = sorted(p for p in (root).rglob("*.py") if ".git" not in p.parts)
    path = max(candidates, key=lambda p: (p.stat().st_size < 20_000, p.stat().st_size))
    rel = path.relative_to(root).as_posix()
    text = path.read_text()
    called = re.findall(r"^def (\w+)\(", text, re.M)
    body = f"{called[0]}()" if called else "pass"
    path.write_text(text + f"\n\ndef bench_codegraph_added():\n    return {body}\n")
    try:
        [(job, _)] = await queue.enqueue_index(rt.redis, project_id, root, [rel], 32, fresh=True)
        report = await queue.wait_for(job, timeout=600)
        started = time.perf_counter()
        graph = file_graph_of(project_id, root, [rel])
        pure = time.perf_counter() - started
        started = time.perf_counter()
        assert rt.store is not None
        await rt.store.write_graph(project_id, graph)
        writes = time.perf_counter() - started
    finally:
        path.write_text(text)
    return [
        f"(c) one edited file ({rel}, {len(text)} bytes): "
        f"index job {report['seconds'] * 1000:.0f} ms "
        f"(chunks, graph, embedding); graph part {pure * 1000:.1f} ms extracting + "
        f"{writes * 1000:.1f} ms writing (target <= 100 ms)"
    ]


def pure_cost(project_id: str, root: Path) -> list[str]:
    """The graph's pure stage against the chunker's on the same files, without a daemon, as the
    index job runs them: one parse per file shared by the chunker and the graph, one DiskTree
    for the round. CPU seconds (the machine is shared): chunking is the parse and the chunker,
    the graph's pure cost its extraction and resolution on that parse. The index job also
    embeds and writes: its share of a whole cold index is lower. Also the slowest file's graph
    (an edit's extraction), median of 5. The process's start-up is frozen first, as the reader
    process's and the daemon's are (memoryd/heap.py)."""
    heap.freeze_startup()
    load = os.getloadavg()
    paths = [
        p
        for p in _git(root, "ls-files", "-z").split("\x00")[:-1]
        if language_for_path(p) and (root / p).is_file()
    ]
    texts = {p: (root / p).read_text("utf-8", "replace") for p in paths}
    tree = DiskTree(root)
    parsing = chunking = extracting = resolving = 0.0
    chunks = edges = refs = 0
    slowest, slowest_path = 0.0, ""
    trees: dict[str, Tree | None] = {}
    for rel in paths:
        text, language = texts[rel], language_for_path(rel)
        started = time.process_time()
        trees[rel] = parsed = parse(text, language) if language in GRAPH_LANGUAGES else None
        parsed_at = time.process_time()
        chunks += len(chunk_text(text, language, parsed=parsed))
        chunked_at = time.process_time()
        parsing += parsed_at - started
        chunking += chunked_at - parsed_at
        facts = extract(text, language, parsed)
        if facts is None:
            continue
        extracted_at = time.process_time()
        rows = resolve(project_id, rel, facts, tree)
        resolved_at = time.process_time()
        extracting += extracted_at - chunked_at
        resolving += resolved_at - extracted_at
        edges, refs = edges + len(rows.edges), refs + len(rows.refs)
        if resolved_at - chunked_at > slowest:
            slowest, slowest_path = resolved_at - chunked_at, rel
    alone = parsing + chunking
    graph = extracting + resolving
    one: list[float] = []
    for _ in range(5):
        started = time.process_time()
        text, language = texts[slowest_path], language_for_path(slowest_path)
        facts = extract(text, language, trees[slowest_path])
        if facts is not None:
            resolve(project_id, slowest_path, facts, DiskTree(root))
        one.append(time.process_time() - started)
    return [
        f"(a') pure stages, {len(paths)} files, CPU seconds (load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} before, {os.getloadavg()[0]:.1f} after): "
        f"chunking {alone:.1f} s (parse {parsing:.1f} s + chunker {chunking:.1f} s, "
        f"{chunks} chunks); graph {graph:.1f} s (extract {extracting:.1f} s + resolve "
        f"{resolving:.1f} s; {edges} edges, {refs} references by name) = "
        f"{graph / max(alone, 1e-9):.1%} of chunking (target <= 25%)",
        f"(c') slowest file's graph ({slowest_path}, {len(texts[slowest_path])} bytes): "
        f"median of 5 {statistics.median(one) * 1000:.1f} ms extract + resolve on its parse "
        "(target <= 100 ms)",
    ]


def _jedi_sites(root: Path, rel: str, line: int, name: str) -> set[tuple[str, int]] | None:
    import jedi

    source = (root / rel).read_text()
    text = source.splitlines()[line - 1]
    column = text.find(name, text.find("def ") if "def " in text else 0)
    if column < 0:
        return None
    # The source roots memoryd's resolver starts absolute imports from: the root and `src`
    # (click's layout), else jedi sees no reference through `from .x import f` under src/.
    extra = [str(root / "src")] if (root / "src").is_dir() else []
    project = jedi.Project(str(root), added_sys_path=extra)
    script = jedi.Script(source, path=str(root / rel), project=project)
    sites = set()
    for ref in script.get_references(line, column):
        if ref.is_definition() or ref.module_path is None:
            continue
        ref_path = Path(ref.module_path)
        if not ref_path.is_relative_to(root):
            continue
        ref_line = ref_path.read_text().splitlines()[ref.line - 1]
        if ref_line[ref.column + len(name) :].lstrip().startswith("("):
            sites.add((ref_path.relative_to(root).as_posix(), ref.line))
    return sites


def _callers(graph: list[GraphRows]) -> dict[str, dict[str, set[tuple[str, int]]]]:
    """Per symbol key, its call sites as `related` lists them: "settled" (CALLS edges) and
    "with guesses" (also the references by name whose only candidate it is, by the same
    `guess` `related` makes). From the pure stage's rows, the very rows the index job writes."""
    by_name: dict[str, list[dict[str, str]]] = {}  # short name -> symbol rows
    for rows in graph:
        for edge in rows.edges:
            if edge["table"] == "defines":
                symbol = {"key": edge["target"], "path": rows.path, "name": edge["name"]}
                by_name.setdefault(edge["name"].rsplit(".", 1)[-1], []).append(symbol)
    out: dict[str, dict[str, set[tuple[str, int]]]] = {}

    def sites(key: str) -> dict[str, set[tuple[str, int]]]:
        return out.setdefault(key, {"settled": set(), "with guesses": set()})

    for rows in graph:
        for edge in rows.edges:
            if edge["table"] == "calls":
                for line in edge["lines"]:
                    sites(edge["target"])["settled"].add((rows.path, line))
                    sites(edge["target"])["with guesses"].add((rows.path, line))
        for ref in rows.refs:
            if ref["verb"] != "calls":
                continue
            allowed = guess(ref, by_name.get(ref["name"], []))
            if len(allowed) == 1:
                sites(allowed[0]["key"])["with guesses"].update(
                    (rows.path, n) for n in ref["lines"]
                )
    return out


def _ts_sites(
    root: Path, files: list[str], queries: list[tuple[str, int, str]], node_path: Path
) -> list[set[tuple[str, int]]]:
    """Call sites by the TypeScript compiler's language service (bench/ts_references.cjs)."""
    script = Path(__file__).with_name("ts_references.cjs")
    request = {
        "root": str(root),
        "files": files,
        "queries": [{"path": p, "line": n, "name": name} for p, n, name in queries],
    }
    done = subprocess.run(
        ["node", "--max-old-space-size=4096", str(script)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NODE_PATH": str(node_path)},
    )
    return [{(p, n) for p, n in sites} for sites in json.loads(done.stdout)]


def _sampled(
    project_id: str, root: Path, language: str, sample: int
) -> tuple[list[GraphRows], dict[str, tuple[str, int, str]], list[str]]:
    """The graph of the language's files, and functions sampled (fixed seed) from what the
    files define before anything of the calls is looked at: Python, every `def` that is not
    a dunder; TypeScript, every function and method but constructors (nested functions
    excluded: the graph has no symbol for them)."""
    patterns = ("*.py",) if language == "python" else ("*.ts", "*.tsx")
    paths = sorted(_git(root, "ls-files", "-z", *patterns).split("\x00")[:-1])
    paths = [p for p in paths if not p.endswith(".d.ts")]
    graph = file_graph_of(project_id, root, paths)
    defined = {}
    for rows in graph:
        text = (root / rows.path).read_text("utf-8", "replace")
        lines = text.splitlines()
        if language == "python":
            wanted = None
        else:
            facts = extract(text, language_for_path(rows.path))
            wanted = {
                (d.line, d.qualified)
                for d in (facts.definitions if facts else [])
                if d.kind in ("function", "method") and d.name != "constructor"
            }
        for edge in rows.edges:
            if edge["table"] != "defines":
                continue
            name = edge["name"].rsplit(".", 1)[-1]
            if wanted is None:
                pick = re.match(rf"\s*(async\s+)?def {re.escape(name)}\b", lines[edge["line"] - 1])
                pick = pick and not name.startswith("__")
            else:
                pick = (edge["line"], edge["name"]) in wanted
            if pick:
                defined[edge["target"]] = (rows.path, edge["line"], name)
    chosen = random.Random(SEED).sample(sorted(defined), min(sample, len(defined)))
    return graph, defined, chosen


def accuracy(
    project_id: str, root: Path, sample: int, show: bool, language: str, node_path: Path | None
) -> list[str]:
    """Callers against jedi's (Python) or the TypeScript language service's."""
    graph, defined, chosen = _sampled(project_id, root, language, sample)
    if language == "python":
        theirs_all = [_jedi_sites(root, *defined[key]) for key in chosen]
        tool = "jedi"
    else:
        assert node_path is not None
        theirs_all = list(
            _ts_sites(root, [g.path for g in graph], [defined[k] for k in chosen], node_path)
        )
        tool = "tsserver"
    ours_by_key = _callers(graph)
    found = {"settled": [0, 0, 0], "with guesses": [0, 0, 0]}  # hits, ours, theirs
    for key, theirs in zip(chosen, theirs_all, strict=True):
        if theirs is None:
            continue
        for name, (hits, ours_n, theirs_n) in found.items():
            ours = ours_by_key.get(key, {}).get(name, set())
            found[name] = [hits + len(ours & theirs), ours_n + len(ours), theirs_n + len(theirs)]
            if show and name == "with guesses":
                for site in sorted(theirs - ours):
                    print(f"    miss {key.split(':', 1)[1]} <- {site[0]}:{site[1]}")
                for site in sorted(ours - theirs):
                    print(f"    extra {key.split(':', 1)[1]} <- {site[0]}:{site[1]}")
    out = []
    for name, (hits, ours_n, theirs_n) in found.items():
        out.append(
            f"(d) {language} callers vs {tool}, {len(chosen)} functions, {name}: precision "
            f"{hits / max(ours_n, 1):.3f} ({hits}/{ours_n}), recall "
            f"{hits / max(theirs_n, 1):.3f} ({hits}/{theirs_n}) (targets 0.9, 0.8)"
        )
    return out


def cochange(root: Path, settings: Settings) -> list[str]:
    log = _git(
        root,
        "log",
        "-z",
        "--no-merges",
        "--name-only",
        "--no-renames",
        "--format=%x01%H %ct",
        f"--max-count={settings.cochange_commits + 2000}",
    )
    commits = commits_of(log)
    alive = set(_git(root, "ls-files", "-z").split("\x00")) - {""}
    test = []
    for index, commit in enumerate(commits):
        files = sorted({f for f in commit.files if is_source(f) and f in alive})
        if 2 <= len(files) <= 3:
            test.append((index, files))
        if len(test) == 100:
            break
    oldest = test[-1][0]
    train = commits[oldest + 1 : oldest + 1 + settings.cochange_commits]
    rows = pairs("bench", train, alive, settings.cochange_max_files)
    # Back from entity ids to paths: the pure stage's rows carry them both ways.
    from memoryd.ids import file_entity_id

    by_id = {file_entity_id("bench", p): p for p in alive}
    ranked: dict[str, list[tuple[float, str]]] = {}
    for row in rows:
        a, b = by_id[row["a"]], by_id[row["b"]]
        ranked.setdefault(a, []).append((-row["count"], b))
        ranked.setdefault(b, []).append((-row["count"], a))
    sources = sorted(p for p in alive if is_source(p))
    rng = random.Random(SEED)
    hits = {"memoryd": 0, "random": 0, "same directory": 0}
    asked = 0
    for _, files in test:
        for given in files:
            others = set(files) - {given}
            asked += 1
            top = [p for _, p in sorted(ranked.get(given, []))[:5]]
            hits["memoryd"] += bool(others & set(top))
            pool = [p for p in sources if p != given]
            hits["random"] += bool(others & set(rng.sample(pool, min(5, len(pool)))))
            here = [p for p in pool if p.rpartition("/")[0] == given.rpartition("/")[0]]
            hits["same directory"] += bool(others & set(rng.sample(here, min(5, len(here)))))
    return [
        f"(e) co-change hit@5 over {asked} (file, commit) of {len(test)} commits, counted from "
        f"{len(train)} earlier commits: "
        + ", ".join(f"{name} {count / max(asked, 1):.3f}" for name, count in hits.items())
    ]


async def bench(root: Path, data_dir: Path, args: argparse.Namespace) -> None:
    settings = load_settings(data_dir=data_dir)
    project_id = projects.resolve(root).id
    print(f"== {root.name} ({_git(root, 'rev-parse', '--short', 'HEAD').strip()})", flush=True)
    if not args.only:
        rt = Runtime(settings)
        await rt.start_queue(exclusive=True)
        await rt.serve()
        try:
            for part in (cost, latency, incremental, graph_bytes):
                for line in await part(rt, root, project_id):
                    print(line, flush=True)
        finally:
            await rt.close()
    if not args.only or args.only == "accuracy":
        languages = ["python"] if _git(root, "ls-files", "*.py").strip() else []
        if args.typescript is not None and _git(root, "ls-files", "*.ts").strip():
            languages.append("typescript")
        for language in languages:
            for line in accuracy(
                project_id, root, args.sample, args.show, language, args.typescript
            ):
                print(line, flush=True)
    if args.only == "pure-cost":
        for line in pure_cost(project_id, root):
            print(line, flush=True)
    if not args.only or args.only == "cochange":
        for line in cochange(root, settings):
            print(line, flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repos", nargs="+", type=Path)
    parser.add_argument("--sample", type=int, default=100)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument(
        "--only",
        choices=("accuracy", "cochange", "pure-cost"),
        help="one of the parts that need no daemon (no cold index)",
    )
    parser.add_argument("--show", action="store_true", help="list accuracy's misses and extras")
    parser.add_argument(
        "--typescript",
        type=Path,
        default=None,
        help="a node_modules directory holding npm's `typescript`: also compares TypeScript "
        "callers with its language service",
    )
    args = parser.parse_args()
    for repo in args.repos:
        work = Path(tempfile.mkdtemp(dir=args.work, prefix="codegraph-"))
        try:
            await bench(repo.resolve(), work, args)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
