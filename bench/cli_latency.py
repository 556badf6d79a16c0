"""How long the CLI takes, end to end, as a user runs it against a running daemon.

    .venv/bin/python -m bench.cli_latency [--rows 100000] [--runs 7]

1. build: a fresh data dir under /tmp gets at least `--rows` rows: synthetic Python files
   (functions and classes of varied size), chunked by the real chunker (`plan_file`) and
   written by `Store.write_file_index` as the index job writes them (code chunks, file states,
   file and symbol entities, DEFINED_IN edges). No vectors (embedding 100k chunks takes hours
   on 2 cores; status and the process start do not depend on them), except a small indexed
   repository (a copy of arq's source) that the searches find.
2. a daemon (`memoryd run`) starts on it; each command then runs once to warm up, then
   `--runs` times as a fresh process: `memoryd --help`, `memoryd status`, `memoryd search …`,
   `memoryd history FILE` (a file of the indexed repository).
3. the same search, status and history through the client API inside one process: the round
   trip through the daemon alone, without the interpreter's start and imports.
Every search asks a query not asked before (bench/fresh_queries.py): it pays for its vector.

Prints the median wall time of each next to its target, the median CPU time of the command's
process, and the load average before and after (the targets are for an idle machine). Numbers
only: nothing here asserts a timing. Temporary files live under /tmp and are removed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import arq

from bench.fresh_queries import fresh_queries
from memoryd import client, projects, queue
from memoryd.config import load_settings
from memoryd.database.migrate import migrate
from memoryd.errors import DaemonUnavailable
from memoryd.ids import file_state_id
from memoryd.results import SearchRequest
from memoryd.store import Store
from workers.indexing import plan_file

MEMORYD = str(Path(sys.executable).parent / "memoryd")
# history's target is the search-engine issue's (at 100k rows), for the query alone.
TARGETS_MS = {"--help": 200, "status": 200, "search": 300, "history (client API)": 50}
# Every search asks a query no call before it asked (the daemon keeps the vectors of its last
# 64): each pays for its query's vector, as a user's new question does.
ASKED = fresh_queries()
FILES_PER_WRITE = 40


def synthetic_file(n: int) -> str:
    """A Python module of a few functions and a class, different for every n."""
    parts = [f'"""Module {n}: generated for the CLI benchmark."""\n\nimport os\n']
    for f in range(4 + n % 5):
        body = "\n".join(f"    value_{i} = os.getpid() + {n * 31 + f * 7 + i}" for i in range(f))
        parts.append(f"def handler_{n}_{f}(arg):\n{body}\n    return arg\n")
    methods = "\n".join(f"    def step_{m}(self):\n        return {n} * {m}\n" for m in range(3))
    parts.append(f"class Worker{n}:\n{methods}")
    return "\n\n".join(parts)


async def fill(data_dir: Path, rows: int) -> int:
    """Write synthetic code files until the database holds `rows` rows; returns the count."""
    settings = load_settings(data_dir=data_dir)
    store = await Store.open(
        settings.database_url, settings.surreal_namespace, settings.surreal_database
    )
    try:
        await migrate(store, 384, None)
        project = "bench-synthetic"
        await store.upsert_project(project, {"root": "/nonexistent/bench", "name": "bench"})
        total, n = 0, 0
        while total < rows:
            chunks, states, files, symbols = [], [], [], []
            for _ in range(FILES_PER_WRITE):
                rel = f"pkg{n // 100}/mod_{n}.py"
                plan = plan_file(project, rel, synthetic_file(n), f"h{n}", 1500)
                chunks += plan.chunks
                symbols += plan.symbols
                files.append({"entity_id": plan.chunks[0]["entity_id"], "key": rel, "path": rel})
                states.append(
                    {
                        "id": file_state_id(project, rel),
                        "path": rel,
                        "size": 1,
                        "mtime_ns": 1,
                        "hash": f"h{n}",
                        "status": "indexed",
                        "reason": None,
                    }
                )
                n += 1
            await store.write_file_index(project, chunks, states, files, [], symbols)
            if n % (FILES_PER_WRITE * 25) == 0:  # counting is a scan: not after every write
                total = sum((await store.counts()).values())
                print(f"\r  {total} rows", end="", flush=True)
        print()
        return total
    finally:
        await store.close()


def fresh(args: list[str]) -> list[str]:
    """The command with a query not asked before in place of its placeholder."""
    return [next(ASKED) if arg == "<a fresh query>" else arg for arg in args]


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time, and CPU time of the command's own process (user + system): on a loaded
    machine the first waits for the cores, the second is what the command costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([MEMORYD, *args], capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"memoryd {' '.join(args)} failed: {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


async def in_process(data_dir: Path, runs: int, file: Path) -> dict[str, list[float]]:
    """The round trip through the daemon alone (one connection, no process start)."""
    settings = load_settings(data_dir=data_dir)
    async with client.connect(settings) as memoryd:
        calls = {
            "search (client API)": lambda: memoryd.search(SearchRequest(next(ASKED), limit=10)),
            "status (client API)": memoryd.status,
            "history (client API)": lambda: memoryd.history(str(file)),
        }
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(runs):
            for name, call in calls.items():
                started = time.perf_counter()
                await call()
                times[name].append(time.perf_counter() - started)
    return times


async def index_repo(data_dir: Path, repo: Path) -> None:
    settings = load_settings(data_dir=data_dir)
    async with client.connect(settings) as memoryd:
        for job, _ in await projects.sync(await memoryd.work_queue(), projects.resolve(repo), 32):
            await queue.wait_for(job, 1800)


async def wait_until_serving(data_dir: Path, daemon: subprocess.Popen[bytes], log: Path) -> None:
    """Through the client API, which never serves the queue itself (a `memoryd status` would,
    while the daemon is not up yet, and take the database from it)."""
    settings = load_settings(data_dir=data_dir)
    for _ in range(600):
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited:\n{log.read_text()[-3000:]}")
        try:
            async with client.connect(settings):
                return
        except DaemonUnavailable:
            await asyncio.sleep(0.5)
    raise SystemExit("the daemon did not start in 5 minutes")


def workspace(prefix: str) -> tuple[Path, Path, Path, dict[str, str]]:
    """A temp dir under /tmp with an empty data dir and a copy of arq's source, and the
    environment that points memoryd at them (this process's too): (dir, data dir, repo, env)."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    data_dir = work / "data"
    data_dir.mkdir(mode=0o700)
    repo = work / "arq"
    # A real tree for the searches to find: arq's installed source (as tests/conftest.py).
    shutil.copytree(Path(arq.__file__).parent, repo, ignore=shutil.ignore_patterns("__pycache__"))
    env = {
        # Bytecode caches written, as a user's installed memoryd has them: without them every
        # command would compile memoryd's modules at each start.
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "MEMORYD_DATA_DIR": str(data_dir),
        "MEMORYD_TRANSCRIPTS": "[]",
        "MEMORYD_CONFIG": str(work / "no-config.toml"),
    }
    os.environ.update(env)
    return work, data_dir, repo, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    work, data_dir, repo, env = workspace("md-cli-")
    daemon = None
    try:
        print(f"build: {args.rows} rows in {data_dir}")
        started = time.perf_counter()
        rows = asyncio.run(fill(data_dir, args.rows))
        print(f"  {rows} rows in {time.perf_counter() - started:.0f}s")
        daemon_log = work / "daemon.log"
        with daemon_log.open("wb") as out:
            daemon = subprocess.Popen([MEMORYD, "run"], env=env, stdout=out, stderr=out)
        asyncio.run(wait_until_serving(data_dir, daemon, daemon_log))
        asyncio.run(index_repo(data_dir, repo))
        load_before = os.getloadavg()
        file = repo / "connections.py"
        commands = {
            "--help": ["--help"],
            "status": ["status"],
            "search": ["search", "<a fresh query>"],
            "history": ["history", str(file)],
        }
        results: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        # The first run of each writes its bytecode caches, and the first status counts the
        # rows (the next ones reuse that count).
        for command in commands.values():
            timed(fresh(command), env)
        for _ in range(args.runs):
            for name, command in commands.items():
                wall, used = timed(fresh(command), env)
                results[name].append(wall)
                cpu[name].append(used)
        results.update(asyncio.run(in_process(data_dir, args.runs, file)))
        load_after = os.getloadavg()
        print(f"\n{rows} rows; median of {args.runs} runs; load average (1 min) ", end="")
        print(f"{load_before[0]:.2f} before, {load_after[0]:.2f} after, on {os.cpu_count()} cpus")
        for name, times in results.items():
            target = TARGETS_MS.get(name)
            goal = f"target <= {target} ms" if target else ""
            used = f"CPU {statistics.median(cpu[name]) * 1000:4.0f} ms" if name in cpu else ""
            print(
                f"  {name:<22}{statistics.median(times) * 1000:7.0f} ms   "
                f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})   {used:<12} {goal}"
            )
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(120)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
