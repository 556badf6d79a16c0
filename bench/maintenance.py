"""Maintenance at scale: decay, prune and re-embed over a database of many memories.

    .venv/bin/python -m bench.maintenance [--memories 100000] [--reembed 2000] [--one-process]

1. build: the real Claude Code and Codex fixture sessions, parsed by the real parsers and
   `rows_for`, are replayed with fresh ids until `--memories` memories exist (so kinds, content
   sizes, edges and entities are those of real transcripts). Each replayed session is moved to
   a random start in the past year; 1% of the memories are pinned, 10% were read (access_count,
   last_accessed), 5% got `valid_until`. No memory has a vector except the `--reembed` ones.
   Every replayed transcript is one `Store.write_transcript_batch` transaction, as the ingest
   job writes a transcript of this size, into a fresh data dir of an in-process Runtime.
2. decay: one full `workers.maintenance.decay` pass at "now" (the newest event time).
3. prune: a dry run, then the real prune, at "now"; what is prunable then is computed here with
   the documented formula, so the deleted count is checked against a known number.
4. reembed: `--reembed` short real texts (<= 600 chars, of the kinds ingestion embeds) carry a
   vector of another model; `reembed` runs until nothing remains, then the model alone embeds
   the same texts (in batches of the configured size): the physical limit the job is measured
   against.
5. compact: the database's size on disk before the prune, after it, and after `memoryd
   compact` (the engine keeps deleted values in its value log until then).

Steps 1-2 and steps 3-4 each run in a process of their own, each with an in-process Runtime
(private Redis, arq workers serving, embedded SurrealDB, the offline model) on the same data
dir, as if the daemon had been restarted in between: run all four in one process
(`--one-process`) and at 100k the real prune stalled after its first batch, twice (a store call
that never returned, every thread idle), while a fresh process on a copy of the same database
pruned it all. A store call taking longer than `--stall-seconds` is reported and ends the run.

Each step also prints where its time went, per store call (and the model), so a bottleneck
shows by function name. The workers' cron is switched off for the run (a decay at minute 17
would otherwise run against the same database in the middle of a measurement).
Numbers only: nothing here asserts a timing. Temporary files live under /tmp and are removed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.fixture_rows import whole_file_rows
from memoryd.config import Settings, load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.database.compact import DB_DIR, compact, size
from memoryd.ids import stable_id
from memoryd.store import Ref
from memoryd.vocabulary import EMBEDDED_MEMORY_KINDS
from memoryd.watch.transcripts import transcript_files
from tests.fixtures import CLAUDE, CODEX
from workers import maintenance
from workers.ingest import EMBED_CHARS

OLD_MODEL = "bench/previous-model"
SEED = 20261122
YEAR = timedelta(days=365)
PINNED, READ, INVALID = 0.01, 0.10, 0.05
SHORT_TEXT = 600
MIB = 1024 * 1024
# Records shared by every replay (the same files, commands and errors come up again).
SHARED_TABLES = frozenset({"entity", "project"})


def _isolate_env() -> None:
    """No user config, no user transcripts, no inherited MEMORYD_* settings."""
    for key in [k for k in os.environ if k.startswith("MEMORYD_")]:
        del os.environ[key]
    os.environ["MEMORYD_CONFIG"] = "/nonexistent/memoryd-bench.toml"
    os.environ["MEMORYD_TRANSCRIPTS"] = "[]"


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Synthesis


@dataclass(slots=True)
class Template:
    """One real transcript as the ingest job turns it into rows."""

    name: str
    agent: str
    tables: dict[str, list[dict[str, Any]]]
    start: datetime
    span: timedelta
    size: int


def load_templates() -> list[Template]:
    templates = []
    for path in transcript_files([CLAUDE, CODEX]):
        found = whole_file_rows(path)
        if found is None:
            continue
        agent, data, rows = found
        tables = rows.tables
        times = [m["event_time"] for m in tables.get("memories", []) if m["event_time"]]
        if not times:
            continue  # a file of summaries only
        templates.append(
            Template(Path(path).name, agent, tables, min(times), max(times) - min(times), len(data))
        )
    return templates


def _replay(value: Any, suffix: str, shift: timedelta) -> Any:
    """A copy with fresh record keys (entities and projects stay shared) and moved times."""
    if isinstance(value, Ref):
        if value.table in SHARED_TABLES:
            return value
        return Ref(value.table, stable_id(value.key, suffix))
    if isinstance(value, datetime):
        return value + shift
    if isinstance(value, dict):
        return {k: _replay(v, suffix, shift) for k, v in value.items()}
    if isinstance(value, list):
        return [_replay(v, suffix, shift) for v in value]
    return value


def _keep(tables: dict[str, list[dict[str, Any]]], count: int) -> None:
    """Cut a replay to its first `count` memories, with only the edges between kept rows."""
    memories = tables["memories"][:count]
    kept = {m["id"].key for m in memories}
    tables["memories"] = memories

    def inside(ref: Any) -> bool:
        return not (isinstance(ref, Ref) and ref.table == "memory") or ref.key in kept

    for name, rows in list(tables.items()):
        if name.startswith("edge_"):
            tables[name] = [r for r in rows if inside(r["in"]) and inside(r["out"])]
    tables["goals"] = [g for g in tables.get("goals", []) if inside(g["memory"])]


@dataclass(slots=True)
class Batch:
    tables: dict[str, list[dict[str, Any]]]
    cursor: dict[str, Any]


def age_from(row: dict[str, Any]) -> datetime:
    return row.get("last_accessed") or row["event_time"] or row["ingestion_time"]


def idle_from(row: dict[str, Any]) -> datetime:
    return row.get("last_accessed") or row["ingestion_time"] or row["event_time"]


def expected_prunable(row: dict[str, Any], at: datetime, s: Settings) -> bool:
    """What decay then prune at `at` should do to this row (the README formula; the database
    counts whole seconds of age)."""
    if row.get("pinned"):
        return False
    until = row.get("valid_until")
    if until is not None and (at - until).total_seconds() // 1 > s.retention_days * 86400:
        return True
    age = (at - age_from(row)).total_seconds() // 1
    half = s.half_life_days.get(row["kind"], s.default_half_life_days)
    boost = 1.0 + s.access_boost * math.log(1.0 + row.get("access_count", 0))
    importance = min(1.0, 0.5 ** (age / 86400.0 / half) * boost)
    idle = (at - idle_from(row)).total_seconds() // 1
    return importance < s.importance_floor and idle > s.prune_idle_days * 86400


def synthesize(
    templates: list[Template], total: int, now: datetime, rng: random.Random
) -> list[Batch]:
    batches: list[Batch] = []
    made, copy = 0, 0
    while made < total:
        for t in templates:
            if made >= total:
                break
            start = now - YEAR + (YEAR - t.span) * rng.random()
            shift = start - t.start
            suffix = f"bench-{copy}"
            tables = _replay(t.tables, suffix, shift)
            if made + len(tables["memories"]) > total:
                _keep(tables, total - made)
            for m in tables["memories"]:
                # Ingested a few minutes after it happened (rows_for stamps the real now).
                happened = m["event_time"] or start
                m["ingestion_time"] = min(now, happened + timedelta(minutes=5))
                m["valid_from"] = m["event_time"] or m["ingestion_time"]
                ever = m["event_time"] or m["ingestion_time"]
                draw = rng.random()
                if draw < PINNED:
                    m["pinned"], m["importance"] = True, 1.0
                elif draw < PINNED + READ:
                    m["access_count"] = 1 + int(rng.expovariate(1 / 4))
                    m["last_accessed"] = ever + (now - ever) * rng.random()
                if rng.random() < INVALID:
                    m["valid_until"] = ever + (now - ever) * rng.random()
            made += len(tables["memories"])
            path = f"/bench/transcripts/{suffix}/{t.name}"
            cursor = {
                "path": path,
                "agent": t.agent,
                "inode": 0,
                "offset": t.size,
                "size": t.size,
                "state": None,
                "lines_skipped": 0,
                "note": None,
            }
            batches.append(Batch(tables, cursor))
        copy += 1
    return batches


def mark_for_reembed(
    batches: list[Batch], count: int, dim: int, at: datetime, s: Settings, rng: random.Random
) -> list[str]:
    """Give `count` short texts that prune keeps a vector of another model; returns the texts."""
    eligible = [
        m
        for b in batches
        for m in b.tables["memories"]
        if m["kind"] in EMBEDDED_MEMORY_KINDS
        and m["content"].strip()
        and len(m["content"]) <= SHORT_TEXT
        and not expected_prunable(m, at, s)
    ]
    chosen = rng.sample(eligible, min(count, len(eligible)))
    vectors = np.random.default_rng(SEED).standard_normal((len(chosen), dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for m, v in zip(chosen, vectors, strict=True):
        m["embedding"], m["embedding_model"] = v.tolist(), OLD_MODEL
    return [m["content"][:EMBED_CHARS] for m in chosen]


# --------------------------------------------------------------------------------------------
# Where the time goes


class Calls:
    """Wraps methods of an object in place and records the seconds of each call."""

    def __init__(self, stall: float, on_stall: Callable[[str], Awaitable[None]]) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self.stall, self.on_stall = stall, on_stall

    def wrap(self, obj: Any, name: str) -> None:
        original = getattr(obj, name)
        label = f"{type(obj).__name__}.{name}"
        if inspect.iscoroutinefunction(original):

            @functools.wraps(original)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await asyncio.wait_for(original(*args, **kwargs), self.stall)
                except TimeoutError:
                    await self.on_stall(label)
                    raise
                finally:
                    self.seconds[label].append(time.perf_counter() - started)

            setattr(obj, name, timed_async)
        else:

            @functools.wraps(original)
            def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.seconds[label].append(time.perf_counter() - started)

            setattr(obj, name, timed)

    def report(self, total: float) -> None:
        """Print and forget the calls so far, the costliest first."""
        for label, times in sorted(self.seconds.items(), key=lambda kv: -sum(kv[1])):
            spent = sum(times)
            detail = (
                f"first {times[0]:.3f} s, median {statistics.median(times):.3f} s, "
                f"last {times[-1]:.3f} s, max {max(times):.3f} s"
                if len(times) > 1
                else ""
            )
            print(
                f"    {label:34s} {len(times):5d} calls {spent:8.2f} s "
                f"({100 * spent / total:5.1f}%)  {detail}"
            )
        self.seconds.clear()


# --------------------------------------------------------------------------------------------


STORE_CALLS = (
    "write_transcript_batch",
    "decay_memories",
    "prune_candidates",
    "prune_preview",
    "delete_rows",
    "orphan_entities",
    "stale_vectors",
    "set_vectors",
    "count_stale_vectors",
    "record_maintenance",
)


@dataclass(slots=True)
class Open:
    """An in-process Runtime serving the queues, as the daemon does, its store calls timed."""

    rt: Runtime
    ctx: dict[str, Any]
    calls: Calls
    seconds: float


async def open_runtime(work: Path, stall_seconds: float) -> Open:
    started = time.perf_counter()
    rt = Runtime(load_settings(data_dir=work / "data"))
    await rt.start_queue(exclusive=True)
    await rt.serve()
    assert rt.store is not None and rt.embedder is not None
    for worker in rt.workers:
        worker.cron_jobs = []  # no scheduled decay/prune in the middle of a measurement
    store = rt.store

    async def stalled(label: str) -> None:
        # Seen at 100k in one process: a store call that never returns, every thread idle.
        # Say so and stop rather than wait forever (closing the database could hang too).
        try:
            await asyncio.wait_for(store.query("RETURN 1"), 10)
            answers = "the database still answers RETURN 1"
        except Exception:
            answers = "the database does not answer RETURN 1 either"
        print(
            f"STALL: {label} did not return in {stall_seconds:.0f} s; {answers} "
            f"(load average {_load()}); stopping",
            flush=True,
        )
        if rt.redis_service is not None:
            rt.redis_service.stop()
        shutil.rmtree(work, ignore_errors=True)
        os._exit(3)

    calls = Calls(stall_seconds, stalled)
    for name in STORE_CALLS:
        calls.wrap(store, name)
    calls.wrap(rt.embedder, "embed")
    # As a worker's ctx: the tasks take their run lock in Redis.
    ctx = {
        "store": store,
        "embedder": rt.embedder,
        "settings": rt.settings,
        "redis": rt.redis,
        "search": rt.search,
    }
    return Open(rt, ctx, calls, time.perf_counter() - started)


async def build(o: Open, args: argparse.Namespace, work: Path) -> None:
    """Steps 1 and 2; leaves what step 3 and 4 check in work/state.json."""
    store, embedder, settings = o.ctx["store"], o.ctx["embedder"], o.ctx["settings"]
    rng = random.Random(SEED)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    templates = load_templates()
    per_replay = sum(len(t.tables["memories"]) for t in templates)
    kinds = Counter(m["kind"] for t in templates for m in t.tables["memories"])

    # -- 1. build ----------------------------------------------------------------------------
    started = time.perf_counter()
    batches = synthesize(templates, args.memories, now, rng)
    texts = mark_for_reembed(batches, args.reembed, embedder.dim, now, settings, rng)
    memories = [m for b in batches for m in b.tables["memories"]]
    prunable = sum(expected_prunable(m, now, settings) for m in memories)
    synth_seconds = time.perf_counter() - started
    sizes: Counter[str] = Counter()
    for b in batches:
        for name, rows in b.tables.items():
            sizes["edges" if name.startswith("edge_") else name] += len(rows)
    print(
        f"fixtures: {len(templates)} real sessions, {per_replay} memories per replay "
        f"({', '.join(f'{k} {100 * v / per_replay:.0f}%' for k, v in kinds.most_common())})"
    )
    print(
        f"synthesized in {synth_seconds:.1f} s: {len(memories)} memories in "
        f"{len(batches)} sessions (one transaction each), {sizes['edges']} edges, "
        f"{sizes['goals']} goals; event times {now - YEAR:%Y-%m-%d} .. {now:%Y-%m-%d}"
    )
    print(
        f"  pinned {sum(bool(m.get('pinned')) for m in memories)}, "
        f"read {sum(bool(m.get('access_count')) for m in memories)}, "
        f"valid_until {sum(m.get('valid_until') is not None for m in memories)}, "
        f"vectors of {OLD_MODEL!r} {len(texts)}"
    )
    o.calls.seconds.clear()
    started = time.perf_counter()
    step = max(1, len(batches) // 10)
    for i, b in enumerate(batches, 1):
        await store.write_transcript_batch(b.tables, b.cursor)
        if i % step == 0:
            elapsed = time.perf_counter() - started
            done = sum(len(x.tables["memories"]) for x in batches[:i])
            _err(f"  build: {done} memories in {elapsed:.0f} s")
    build_seconds = time.perf_counter() - started
    counts = await store.counts()
    print(
        f"1. insert: {counts['memory']} memories in {build_seconds:.1f} s = "
        f"{counts['memory'] / build_seconds:.0f} memories/s "
        f"({(len(memories) + sizes['edges']) / build_seconds:.0f} rows+edges/s; "
        f"db: {counts['session']} sessions, {counts['entity']} entities, "
        f"{counts['goal']} goals)"
    )
    o.calls.report(build_seconds)
    state = {"now": now.isoformat(), "prunable": prunable, "before": counts["memory"]}
    (work / "state.json").write_text(json.dumps({**state, "texts": texts}))
    del batches, memories

    # -- 2. decay ----------------------------------------------------------------------------
    # At "now", and an hour later as the hourly cron runs it next: what each pass writes.
    db = work / "data" / DB_DIR
    for at in (now, now + timedelta(hours=1)):
        o.calls.seconds.clear()
        before = size(db)
        started = time.perf_counter()
        decayed = await maintenance.decay(o.ctx, at=at.isoformat())
        seconds = time.perf_counter() - started
        print(
            f"2. decay at {at:%Y-%m-%d %H:%M}: {decayed['memories']} memories in "
            f"{seconds:.1f} s = {decayed['memories'] / seconds:.0f} rows/s "
            f"(batch {settings.maintenance_batch}), {decayed.get('rewritten', 'all')} "
            f"rewritten; database on disk {before / MIB:.1f} -> {size(db) / MIB:.1f} MiB"
        )
        o.calls.report(seconds)


async def maintain(o: Open, args: argparse.Namespace, work: Path) -> None:
    """Steps 3 and 4 on the database `build` left (and its size on disk around the prune)."""
    store, embedder = o.ctx["store"], o.ctx["embedder"]
    state = json.loads((work / "state.json").read_text())
    at, prunable, before, texts = state["now"], state["prunable"], state["before"], state["texts"]

    # -- 3. prune ----------------------------------------------------------------------------
    print(
        f"3. prune at the decay's time: {prunable} of {before} memories "
        f"({100 * prunable / before:.1f}%) are prunable by the formula"
    )
    db = work / "data" / DB_DIR
    print(f"  database on disk before the prune: {size(db) / MIB:.1f} MiB")
    o.calls.seconds.clear()
    started = time.perf_counter()
    dry = await maintenance.prune(o.ctx, at=at, dry_run=True)
    seconds = time.perf_counter() - started
    print(f"  dry run: {seconds:.1f} s, reports {dry['deleted']}")
    o.calls.report(seconds)
    started = time.perf_counter()
    pruned = await maintenance.prune(o.ctx, at=at)
    seconds = time.perf_counter() - started
    after = (await store.counts())["memory"]
    deleted = pruned["deleted"]
    print(
        f"  prune: {seconds:.1f} s, deleted {deleted} "
        f"= {deleted['memory'] / seconds:.0f} memories/s; "
        f"memories {before} -> {after} (expected {before - prunable})"
    )
    print(f"  database on disk after the prune: {size(db) / MIB:.1f} MiB")
    o.calls.report(seconds)

    # -- 4. reembed --------------------------------------------------------------------------
    waiting = await store.count_stale_vectors(embedder.model)
    o.calls.seconds.clear()
    runs, moved = 0, 0
    started = time.perf_counter()
    while True:
        result = await maintenance.reembed(o.ctx)
        runs += 1
        moved += sum(result["reembedded"].values())
        if not sum(result["remaining"].values()):
            break
    job_seconds = time.perf_counter() - started
    print(
        f"4. reembed {OLD_MODEL!r} -> {embedder.model!r}: waiting {waiting}; "
        f"{moved} texts in {runs} run(s), {job_seconds:.1f} s = "
        f"{moved / job_seconds:.1f} texts/s"
    )
    o.calls.report(job_seconds)
    started = time.perf_counter()
    embedder.embed(texts)  # in batches of the configured size, as the job does
    model_seconds = time.perf_counter() - started
    o.calls.seconds.clear()
    chars = sorted(len(t) for t in texts)
    print(
        f"  model alone (batch {embedder.batch_size}): {len(texts)} texts "
        f"(median {chars[len(chars) // 2]} "
        f"chars) in {model_seconds:.1f} s = {len(texts) / model_seconds:.1f} texts/s"
    )
    print(
        f"  ratio reembed/model (texts/s): "
        f"{(moved / job_seconds) / (len(texts) / model_seconds):.2f}"
    )


PHASES = {"build": (build,), "maintain": (maintain,), "all": (build, maintain)}


async def run(args: argparse.Namespace, work: Path) -> None:
    o = await open_runtime(work, args.stall_seconds)
    try:
        if args.phase == "maintain":
            print(
                f"database reopened by a new process (as after a daemon restart) "
                f"in {o.seconds:.1f} s"
            )
        for phase in PHASES[args.phase]:
            await phase(o, args, work)
    finally:
        await o.rt.close()


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--reembed", type=int, default=2000)
    parser.add_argument(
        "--stall-seconds",
        type=float,
        default=900,
        help="give up when one store call takes longer than this",
    )
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="build, decay, prune and reembed in one Runtime (at 100k the prune stalled)",
    )
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _isolate_env()
    if args.phase:  # a child started below
        asyncio.run(run(args, args.work))
        return
    print(f"load average at start (machine shared, {os.cpu_count()} cores): {_load()}")
    # Short path under /tmp: the private Redis socket path must stay under 108 bytes.
    work = Path(tempfile.mkdtemp(prefix="mdm-", dir="/tmp"))
    try:
        if args.one_process:
            args.phase = "all"
            asyncio.run(run(args, work))
        else:
            for phase in ("build", "maintain"):
                child = [sys.executable, "-m", __spec__.name, "--phase", phase, "--work", str(work)]
                child += ["--memories", str(args.memories), "--reembed", str(args.reembed)]
                child += ["--stall-seconds", str(args.stall_seconds)]
                sys.stdout.flush()
                code = subprocess.run(child, check=False).returncode
                if code:
                    print(f"phase {phase} exited with status {code}")
                    sys.exit(code)
            # The engine keeps deleted values in its value log: `memoryd compact` (daemon
            # stopped) is what gives the disk back.
            db = work / "data" / DB_DIR
            before = size(db)
            started = time.perf_counter()
            asyncio.run(compact(load_settings(data_dir=work / "data")))
            print(
                f"5. compact (as `memoryd compact`, daemon stopped): database on disk "
                f"{before / MIB:.1f} -> {size(db) / MIB:.1f} MiB in "
                f"{time.perf_counter() - started:.1f} s"
            )
        print(f"load average at end: {_load()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
