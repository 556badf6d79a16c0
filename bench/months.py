"""Months of use under the unit's memory limit: a real `memoryd run` in a cgroup, a simulated clock.

    sudo nice -n 5 .venv/bin/python -m bench.months --repo PATH [--repo-files 5000] [--days 90]
        [--sessions-per-day 2] [--edits-per-day 3] [--keep]

Needs root and a cgroup v1 memory controller: the daemon (and the private Redis it starts) runs
in a fresh memory cgroup whose `memory.limit_in_bytes` is the MemoryMax of the project's systemd
unit (systemd/memoryd.service.in): the kernel enforces it, as under systemd. `ulimit -v` would
not: it limits address space, not memory used.

1. repo: the first --repo-files files (by path) of HEAD of the git repository at --repo (a work
   tree or a bare git dir) are copied to a temp dir, committed, and given to `memoryd run
   --repo`. The run waits until the code index holds every chunk and every vector.
2. days: each simulated day writes --sessions-per-day transcripts into the watched folder:
   the Claude Code and Codex fixture sessions in turn, every uuid and tool/message/request id
   replaced by a fresh one (consistently within the file), every timestamp moved to that day
   (09:00 UTC onwards, 14 h apart / K). --edits-per-day repo files get a new function appended.
   The run waits until the daemon has ingested and indexed all of it.
3. crons on the simulated clock: the daemon's own schedule is off; after each day the bench
   enqueues decay, prune and reembed on the daemon's queue with `at` = 03:41 of the next
   simulated day (prune's default cron time), and the daemon's worker runs them. These are the
   jobs the crons run, with the `now` parameter they already take; the database is not touched
   by the bench. Event times are simulated (they come from the transcripts' timestamps); what
   the daemon stamps with the wall clock is not: `ingestion_time`, and the `valid_until` of a
   code chunk an edit retires. The simulated days start at the next midnight after the real
   start, so to every simulated prune all chunks retired in the run look retired on day 0.
4. end: the daemon is stopped; the cgroup's peak usage (`memory.max_usage_in_bytes`, page
   cache included, as MemoryMax counts it), the peak of its anonymous memory (sampled every
   second from memory.stat), `memory.failcnt` and the OOM kills; then, from the database,
   every memory that should survive (the pure parsers' rows of every replayed file, minus what
   the prune formula deletes at the last prune's time) against what is stored, and the code
   index against the files on disk (exact: path, lines, content hash); then `memoryd compact`.

Prints the database size each simulated week and around each prune (is disk given back?), the
wall time per day, and how the run time scales with days and sessions.
Numbers only, except that a loss or an OOM kill is printed as such. Temp files live under /tmp.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from bench.fixture_rows import whole_file_rows
from bench.incremental import (
    GIT_ENV,
    Daemon,
    connect_when_up,
    exact_check,
    load,
    terminate,
)
from bench.maintenance import expected_prunable
from memoryd import jobs, queue
from memoryd.config import Settings, load_settings
from memoryd.database.compact import DB_DIR, compact, size
from memoryd.embedded import stop_orphan
from memoryd.store import Store
from memoryd.store.base import key_of
from memoryd.watch.transcripts import transcript_files
from tests.fixtures import CLAUDE, CODEX

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
UNIT = Path(__file__).resolve().parent.parent / "systemd" / "memoryd.service.in"
MIB = 2**20
# The maintenance the crons run, in the order they run at night (prune's cron time).
NIGHTLY = (jobs.DECAY, jobs.PRUNE, jobs.REEMBED)
CRON_TIME = timedelta(hours=3, minutes=41)
FIRST_SESSION = timedelta(hours=9)
WORKDAY = timedelta(hours=14)

_UUID = re.compile(rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# Anthropic message/request/tool ids and Codex call ids.
_PREFIXED = re.compile(rb"\b(toolu|msg|req|call)_([A-Za-z0-9]{8,})")
_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
_FILE_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d")


def memory_max() -> int:
    """MemoryMax= of the project's unit, in bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    found = re.search(r"^MemoryMax=(\d+)([KMGT]?)$", UNIT.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"no MemoryMax= in {UNIT.name}")
    return int(found.group(1)) * units.get(found.group(2), 1)


# --------------------------------------------------------------------------------------------
# The cgroup


class Cgroup:
    """A cgroup v1 memory group with a hard limit, and a sampler of what its tasks use."""

    def __init__(self, name: str, limit: int) -> None:
        self.path = CGROUP_ROOT / name
        if self.path.exists():
            self.path.rmdir()  # left by a killed run; fails loudly if tasks are still in it
        self.path.mkdir()
        self.limit = limit
        self._write("memory.limit_in_bytes", limit)
        if (self.path / "memory.memsw.limit_in_bytes").exists():
            self._write("memory.memsw.limit_in_bytes", limit)  # no escape into swap
        self.peak_rss = 0
        self.rss_samples: list[int] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _write(self, name: str, value: int) -> None:
        (self.path / name).write_text(str(value))

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    def number(self, name: str) -> int:
        return int(self.read(name).split()[0])

    def stat(self) -> dict[str, int]:
        return {
            k: int(v) for k, v in (line.split() for line in self.read("memory.stat").splitlines())
        }

    def join_here(self) -> None:
        """For a child between fork and exec: itself and all it starts are in the group."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _sample(self) -> None:
        while not self._halt.is_set():
            try:
                stat = self.stat()
            except OSError:
                return
            rss = stat.get("rss", 0) + stat.get("mapped_file", 0)
            self.peak_rss = max(self.peak_rss, rss)
            self.rss_samples.append(rss)
            self._halt.wait(1.0)

    def oom(self) -> dict[str, int]:
        return {
            k: int(v)
            for k, v in (line.split() for line in self.read("memory.oom_control").splitlines())
        }

    def close(self) -> None:
        self._halt.set()
        self._thread.join()
        deadline = time.monotonic() + 30
        while self.read("cgroup.procs").strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.path.rmdir()


# --------------------------------------------------------------------------------------------
# The repo


def prepare_repo(source: Path, dest: Path, files: int) -> int:
    """HEAD's first `files` files (by path) of the repository at `source`, committed at `dest`;
    returns their bytes."""
    bare = (source / "objects").is_dir() and (source / "HEAD").is_file()
    git_dir = (
        source
        if bare
        else Path(
            subprocess.run(
                ["git", "-C", str(source), "rev-parse", "--absolute-git-dir"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    )
    listing = (
        subprocess.run(
            ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", "--name-only", "HEAD"],
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    chosen = set(sorted(p for p in listing if p)[:files])
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "--format=tar", "HEAD"],
        capture_output=True,
        check=True,
    ).stdout
    dest.mkdir(parents=True)
    total = 0
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name in chosen]
        tar.extractall(dest, members=members, filter="data")
        total = sum(m.size for m in members)
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "sim")):
        subprocess.run(["git", "-C", str(dest), *args], check=True, env=GIT_ENV)
    return total


def edit_files(root: Path, rng: random.Random, count: int, day: int) -> list[str]:
    """Append a small function to `count` source files (tracked, not yet edited ones first)."""
    candidates = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts and p.suffix in (".java", ".scala", ".py")
    )
    picked = rng.sample(candidates, min(count, len(candidates)))
    for i, path in enumerate(picked):
        with path.open("a") as out:
            if path.suffix == ".py":
                out.write(f"\n\ndef sim_day_{day}_{i}(value):\n    return value + {day}\n")
            else:
                out.write(
                    f"\n// simulated day {day}, edit {i}\n"
                    f"class SimDay{day}Edit{i} {{ int v = {day}; }}\n"
                )
    return [p.relative_to(root).as_posix() for p in picked]


# --------------------------------------------------------------------------------------------
# Sessions


@dataclass(slots=True)
class Template:
    path: Path
    agent: str
    data: bytes
    start: datetime


def load_templates() -> list[Template]:
    """Fixture sessions that hold memories; subagent files go with their parent, not alone."""
    found = []
    for path in transcript_files([CLAUDE, CODEX]):
        if Path(path).name.startswith("agent-"):
            continue
        rows = whole_file_rows(path)
        if rows is None:
            continue
        # The first event, not the first timestamp in the text: a tool output may quote any.
        times = [m["event_time"] for m in rows[2].tables.get("memories", []) if m["event_time"]]
        if times:
            found.append(Template(Path(path), rows[0], rows[1], min(times)))
    return found


def _parse_stamp(raw: bytes) -> datetime:
    return datetime.fromisoformat(raw.decode().replace("Z", "+00:00"))


def replay(t: Template, start: datetime, transcripts: Path) -> Path:
    """A copy of the template with fresh ids and its first record at `start`; written next to
    its final place and renamed in, so the watcher never sees half a file."""
    fresh: dict[bytes, bytes] = {}

    def new_uuid(m: re.Match[bytes]) -> bytes:
        key = m.group(0).lower()
        return fresh.setdefault(key, str(uuid.uuid4()).encode())

    def new_prefixed(m: re.Match[bytes]) -> bytes:
        key = m.group(0)
        tail = uuid.uuid4().hex * 2
        return fresh.setdefault(key, m.group(1) + b"_" + tail[: len(m.group(2))].encode())

    shift = start - t.start

    def moved(m: re.Match[bytes]) -> bytes:
        at = _parse_stamp(m.group(0)) + shift
        return at.isoformat(timespec="milliseconds").replace("+00:00", "Z").encode()

    data = _STAMP.sub(moved, _PREFIXED.sub(new_prefixed, _UUID.sub(new_uuid, t.data)))
    name = _UUID.sub(new_uuid, t.path.name.encode()).decode()
    name = _FILE_STAMP.sub(start.strftime("%Y-%m-%dT%H-%M-%S"), name)
    folder = transcripts / t.agent / t.path.parent.name
    folder.mkdir(parents=True, exist_ok=True)
    staging = transcripts.parent / "staging" / name
    staging.parent.mkdir(exist_ok=True)
    staging.write_bytes(data)
    staging.rename(folder / name)
    return folder / name


@dataclass(slots=True)
class Expected:
    """What each replayed memory needs for the prune formula, by key."""

    memories: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: int = 0
    bytes: int = 0

    def add(self, path: Path) -> int:
        found = whole_file_rows(str(path))
        assert found is not None
        _, data, rows = found
        keep = ("kind", "pinned", "valid_until", "last_accessed", "event_time", "ingestion_time")
        memories = rows.tables["memories"]
        for m in memories:
            self.memories[m["id"].key] = {k: m.get(k) for k in keep}
        self.sessions += 1
        self.bytes += len(data)
        return len(memories)

    def split(self, at: datetime, settings: Settings) -> tuple[list[str], list[str]]:
        """(keys that survive a decay and prune at `at`, keys that do not)."""
        kept, gone = [], []
        for key, m in self.memories.items():
            (gone if expected_prunable(m, at, settings) else kept).append(key)
        return kept, gone


# --------------------------------------------------------------------------------------------
# The run


T = TypeVar("T")


async def alive(daemon: Daemon, waiting: Awaitable[T]) -> T:
    """`waiting`, unless the daemon dies first (the limit's kill): then the run stops, where a
    wait for a job of the dead worker would have lasted its whole timeout."""
    task = asyncio.ensure_future(waiting)
    while not task.done():
        if daemon.proc.poll() is not None:
            task.cancel()
            raise SystemExit(f"the daemon exited ({daemon.proc.returncode}): killed by the limit?")
        await asyncio.wait({task}, timeout=1.0)
    return task.result()


async def settle(redis: Any, daemon: Daemon, timeout: float = 3600) -> dict[str, Any]:
    """Until the daemon has read every transcript byte and its work queue is empty (for a
    while: the watchers debounce); returns its status then."""
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    while time.monotonic() < deadline:
        if daemon.proc.poll() is not None:
            raise SystemExit(f"the daemon exited ({daemon.proc.returncode}): killed by the limit?")
        now = time.monotonic()
        if await queue.queue_depth(redis) == 0:
            quiet_since = quiet_since or now
            if now - quiet_since >= 1.5:
                status = await alive(daemon, queue.call(redis, jobs.STATUS, timeout=600))
                lag = sum(r["bytes"] for r in status["transcript_lag"].values())
                if lag == 0 and await queue.queue_depth(redis) == 0:
                    return status
                quiet_since = None
        else:
            quiet_since = None
        await asyncio.sleep(0.3)
    raise SystemExit("the daemon never caught up")


async def nightly(redis: Any, daemon: Daemon, at: datetime, db: Path) -> dict[str, Any]:
    """The crons' tasks at simulated time `at`, run by the daemon's worker; the database size
    right before and after the prune."""
    out: dict[str, Any] = {}
    for spec in NIGHTLY:
        if spec is jobs.PRUNE:
            out["before"] = size(db)
        job = (
            await queue.enqueue(redis, spec, at=at.isoformat())
            if spec is not jobs.REEMBED
            else (await queue.enqueue(redis, spec))
        )
        assert job is not None
        started = time.perf_counter()
        out[spec.name] = await alive(daemon, queue.wait_for(job, 3600))
        out[f"{spec.name}_seconds"] = time.perf_counter() - started
        if spec is jobs.PRUNE:
            out["after"] = size(db)
    return out


async def simulate(args: argparse.Namespace, work: Path, group: Cgroup) -> dict[str, Any]:
    root, data = work / "repo", work / "data"
    transcripts = work / "feed" / "transcripts"
    transcripts.mkdir(parents=True)
    started = time.perf_counter()
    repo_bytes = prepare_repo(args.repo, root, args.repo_files)
    files = sum(1 for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)
    print(
        f"repo: {files} files, {repo_bytes / MIB:.1f} MiB, copied and committed in "
        f"{time.perf_counter() - started:.0f} s"
    )
    os.environ["MEMORYD_TRANSCRIPTS"] = json.dumps([str(transcripts)])
    os.environ["MEMORYD_MAINTENANCE_SCHEDULE"] = json.dumps(
        dict.fromkeys(("decay", "prune", "reembed"), "off")
    )
    templates = load_templates()
    print(
        f"session templates: {len(templates)} fixture sessions ("
        + ", ".join(f"{t.agent} {len(t.data) / 1e6:.2f} MB" for t in templates)
        + ")"
    )
    daemon = Daemon(data, root, work / "daemon.log", group.join_here)
    result: dict[str, Any] = {"days": [], "prunes": []}
    redis = None
    try:
        redis = await connect_when_up(daemon)
        status = await settle(redis, daemon, timeout=args.repo_timeout)
        result["repo_seconds"] = time.perf_counter() - daemon.started
        print(
            f"repo indexed (chunks and vectors) {result['repo_seconds']:.0f} s after start: "
            f"{status['valid_chunks']} chunks, database {size(data / DB_DIR) / MIB:.0f} MiB, "
            f"cgroup peak so far {group.number('memory.max_usage_in_bytes') / MIB:.0f} MiB "
            f"[load {load()}]"
        )
        expected = Expected()
        rng = random.Random(20261123)
        real_start = datetime.now(UTC)
        day0 = (real_start + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        result["day0"] = day0
        edited = 0
        week_started = time.perf_counter()
        at = day0
        for day in range(args.days):
            day_started = time.perf_counter()
            midnight = day0 + timedelta(days=day)
            for i in range(args.sessions_per_day):
                t = templates[(day * args.sessions_per_day + i) % len(templates)]
                start = midnight + FIRST_SESSION + WORKDAY * i / args.sessions_per_day
                expected.add(replay(t, start, transcripts))
            edited += len(edit_files(root, rng, args.edits_per_day, day))
            await asyncio.sleep(1.0)  # the watchers' debounce, before the queue is looked at
            status = await settle(redis, daemon)
            ingest_seconds = time.perf_counter() - day_started
            at = midnight + timedelta(days=1) + CRON_TIME
            night = await nightly(redis, daemon, at, data / DB_DIR)
            deleted = night["prune"]["deleted"]
            result["prunes"].append((day, night["before"], night["after"], deleted))
            result["days"].append(
                {
                    "day": day,
                    "seconds": time.perf_counter() - day_started,
                    "ingest": ingest_seconds,
                    "maintenance": sum(night[f"{s.name}_seconds"] for s in NIGHTLY),
                    "memories": status["counts"].get("memory", 0),
                }
            )
            if any(deleted.values()):
                print(
                    f"  day {day + 1} prune at {at:%Y-%m-%d %H:%M}: deleted {deleted}; "
                    f"database {night['before'] / MIB:.1f} -> {night['after'] / MIB:.1f} MiB"
                )
            if (day + 1) % 7 == 0 or day + 1 == args.days:
                week = result["days"][-7:]
                print(
                    f"week ending day {day + 1} ({midnight:%Y-%m-%d}): {expected.sessions} "
                    f"sessions ({expected.bytes / MIB:.0f} MiB) replayed, "
                    f"{status['counts'].get('memory', 0)} memories stored, "
                    f"{status['valid_chunks']} valid chunks; database "
                    f"{size(data / DB_DIR) / MIB:.1f} MiB; cgroup peak "
                    f"{group.number('memory.max_usage_in_bytes') / MIB:.0f} MiB, anon peak "
                    f"{group.peak_rss / MIB:.0f} MiB; {time.perf_counter() - week_started:.0f} s "
                    f"wall ({sum(d['ingest'] for d in week) / len(week):.1f} s/day ingest, "
                    f"{sum(d['maintenance'] for d in week) / len(week):.1f} s/day maintenance) "
                    f"[load {load()}]",
                    flush=True,
                )
                week_started = time.perf_counter()
        result.update(expected=expected, last_prune=at, edited=edited, status=status)
        await redis.aclose()
        redis = None
    finally:
        if redis is not None:
            await redis.aclose()
        if daemon.proc.poll() is None:
            daemon.stop()
        else:
            print(f"THE DAEMON DIED (exit {daemon.proc.returncode}); log tail:")
            print("\n".join(daemon.lines()[-20:]))
        stop_orphan(data / "redis" / "redis.sock")
    return result


async def check(work: Path, result: dict[str, Any]) -> None:
    """With the daemon stopped: the memories that should survive, and the code index."""
    data, root = work / "data", work / "repo"
    settings = load_settings(data_dir=data)
    expected: Expected = result["expected"]
    kept, gone = expected.split(result["last_prune"], settings)
    store = await Store.open(
        settings.database_url, settings.surreal_namespace, settings.surreal_database
    )
    try:
        found_kept = found_gone = 0
        missing: list[str] = []
        for keys, is_kept in ((kept, True), (gone, False)):
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                got = {key_of(r["id"]) for r in await store.memories_by_key(part)}
                if is_kept:
                    found_kept += len(got)
                    missing += [k for k in part if k not in got][:5]
                else:
                    found_gone += len(got)
        stored = (await store.counts())["memory"]
    finally:
        await store.close()
    print(
        f"memories: {len(expected.memories)} replayed; {len(kept)} should survive the last prune "
        f"({result['last_prune']:%Y-%m-%d %H:%M}), {found_kept} of them are stored"
        + (f" - LOST e.g. {missing[:5]}" if found_kept < len(kept) else " (nothing lost)")
        + f"; {len(gone)} should be pruned, {found_gone} of them are still stored; "
        f"{stored} memories in the table"
    )
    await exact_check(data, root)


def report_scaling(args: argparse.Namespace, result: dict[str, Any], wall: float) -> None:
    days = result["days"]
    if not days:
        return
    first, last = days[: min(7, len(days))], days[-min(7, len(days)) :]
    per_session = sum(d["ingest"] for d in days) / (len(days) * args.sessions_per_day)
    maint_first = sum(d["maintenance"] for d in first) / len(first)
    maint_last = sum(d["maintenance"] for d in last) / len(last)
    sim = sum(d["seconds"] for d in days)
    print(
        f"time: {wall:.0f} s wall = repo {result['repo_seconds']:.0f} s + {len(days)} days "
        f"{sim:.0f} s ({sim / len(days):.1f} s/day) + checks; per day: ingest "
        f"{per_session:.1f} s per session (incl. {args.edits_per_day} edits/day), maintenance "
        f"{maint_first:.1f} s/day in the first week -> {maint_last:.1f} s/day in the last "
        f"(memories {first[0]['memories']} -> {last[-1]['memories']})"
    )
    # Maintenance grows with the stored memories (each decay visits them all); ingest does not.
    stored = max(1, last[-1]["memories"] - first[0]["memories"])
    per_memory = max(0.0, (maint_last - maint_first) / stored)
    memories_per_session = len(result["expected"].memories) / result["expected"].sessions
    print(
        f"scaling: run time ~ repo + days x (sessions/day x {per_session:.1f} s + "
        f"{maint_first:.1f} s) + {per_memory * 1000:.3f} s per night per 1000 stored memories "
        f"({memories_per_session:.0f} memories per session); stored memories stop growing once "
        f"prune starts (after prune_idle_days = 60 days, for tool calls and results); the repo "
        f"part grows with its chunks (embedding dominates)"
    )
    for days_, spd in ((30, 2), (90, 4), (30, 20)):
        nights = sum(min(d, 60) * spd * memories_per_session for d in range(days_))
        minutes = (days_ * (spd * per_session + maint_first) + per_memory * nights) / 60
        print(f"  {days_} days x {spd} sessions/day: ~{minutes:.0f} min plus the repo")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", type=Path, required=True, help="a git work tree or bare git dir")
    parser.add_argument("--repo-files", type=int, default=5000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--sessions-per-day", type=int, default=2)
    parser.add_argument("--edits-per-day", type=int, default=3)
    parser.add_argument(
        "--repo-timeout", type=float, default=7200, help="s to wait for the repo index"
    )
    parser.add_argument("--cgroup", default="memoryd-sim", help="name of the memory cgroup made")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    for key in [k for k in os.environ if k.startswith("MEMORYD_")]:
        del os.environ[key]
    os.environ["MEMORYD_CONFIG"] = "/nonexistent/memoryd-bench.toml"
    limit = memory_max()
    print(
        f"machine: {os.cpu_count()} cores, load {load()}; limit {limit / MIB:.0f} MiB "
        f"(MemoryMax of the unit) on a cgroup v1 memory group; {args.days} days x "
        f"{args.sessions_per_day} sessions, {args.edits_per_day} edits/day"
    )
    work = Path(tempfile.mkdtemp(prefix="mds-", dir="/tmp"))  # short: the Redis socket path
    started = time.perf_counter()
    group = Cgroup(args.cgroup, limit)
    finished = False
    try:
        try:
            result = asyncio.run(simulate(args, work, group))
        finally:
            oom = group.oom()
            peak = group.number("memory.max_usage_in_bytes")
            failcnt = group.number("memory.failcnt")
            group.close()
        print(
            f"cgroup: peak usage {peak / MIB:.0f} MiB (page cache included) of the "
            f"{limit / MIB:.0f} MiB limit; peak anonymous+mapped {group.peak_rss / MIB:.0f} MiB; "
            f"failcnt {failcnt} (times usage hit the limit and the kernel reclaimed); "
            f"oom_kill {oom.get('oom_kill', '?')}, under_oom {oom.get('under_oom')}"
        )
        expected: Expected = result["expected"]
        print(
            f"simulated {len(result['days'])} days from {result['day0']:%Y-%m-%d}: "
            f"{expected.sessions} sessions, {expected.bytes / MIB:.1f} MiB of transcripts "
            f"replayed, {result['edited']} file edits"
        )
        given = [(d, b, a) for d, b, a, deleted in result["prunes"] if any(deleted.values())]
        if given:
            freed = sum(b - a for _, b, a in given)
            print(
                f"disk around the {len(given)} prunes that deleted rows: "
                f"{freed / MIB:+.1f} MiB in total (before - after; > 0 is given back)"
            )
        asyncio.run(check(work, result))
        db = work / "data" / DB_DIR
        before = size(db)
        t = time.perf_counter()
        asyncio.run(compact(load_settings(data_dir=work / "data")))
        print(
            f"compact (daemon stopped): database {before / MIB:.1f} -> {size(db) / MIB:.1f} MiB "
            f"in {time.perf_counter() - t:.0f} s"
        )
        report_scaling(args, result, time.perf_counter() - started)
        print(f"wall time {time.perf_counter() - started:.0f} s; load at the end {load()}")
        finished = True
    finally:
        if args.keep or not finished:
            # A run that failed keeps its daemon.log: the hour it took is not thrown away blind.
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, terminate)
    main()
