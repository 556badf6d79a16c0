"""Transcript ingestion: throughput, append-to-visible latency, and memory on a huge transcript.

    .venv/bin/python -m bench.transcripts [--size-mb 64,256,1024] [--skip a,b,c] [--appends 20]
                                          [--cli-appends 3] [--stall 600]

(a) throughput: every Claude Code and Codex fixture through the real queue (private Redis, arq
    worker, parsers, the offline model, embedded SurrealDB) into a fresh database, as lines/s and
    memories/s; then the model alone embeds exactly the texts the job embedded (recomputed with
    the pure parsers and `rows_for`): the physical limit the pipeline is measured against.
(b) latency: a real `memoryd run` follows a transcript folder; one fresh record at a time is
    appended, and the time until the record shows in the session replay is measured, through
    the daemon's own Redis (no process start-up), and for a few appends through the real
    `memoryd session ID --json` (which includes Python start-up).
(c) memory: for each of `--size-mb`, a transcript of that size built from the Claude fixtures'
    (tool_use, big tool_result) pairs with fresh ids is ingested by an in-process Runtime in a
    child process; its RSS is sampled every 0.2 s and printed at 25/50/75/100% of the file.
    When no batch is written for `--stall` seconds the run is stopped and where it stalled is
    printed. Then the database's bytes on disk against the transcript's (and which fields
    they are), and at the end the ratio and the peak RSS of every size against the targets.
(a) also prints the database's bytes against the fixtures' bytes.

Numbers only: nothing here asserts a timing. Temporary files live under /tmp and are removed.
Every part prints the load average first: on a shared machine it explains a lot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.fixture_rows import whole_file_rows
from memoryd import jobs, queue
from memoryd.config import load_settings
from memoryd.daemon.runtime import Runtime
from memoryd.embedded import stop_orphan
from memoryd.errors import NotFound
from memoryd.store import Store, plain
from memoryd.watch.transcripts import transcript_files
from tests.fixtures import CLAUDE, CODEX, S37
from workers.stages.transcripts import Memory, Source, parser_for, split_lines
from workers.stages.transcripts.claude_code import prompt_text, render_call

# (b) follows a copy of this real session and appends to it.
LATENCY_FIXTURE = S37
MEMORYD = str(Path(sys.executable).parent / "memoryd")

# (c): pairs whose result line is at least this big and whose call renders this short.
BIG_RESULT_BYTES = 16_000
SHORT_CALL_CHARS = 200
# Tools whose results start follow-ups or subagents; a repeated pair must stand alone.
_NOT_REPEATABLE = {"task", "agent", "bashoutput", "killshell", "killbash"}


def _tmpdir(prefix: str) -> Path:
    # Short path under /tmp: the private Redis socket path must stay under 108 bytes.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def _isolate_env() -> None:
    """No user config, no user transcripts, no inherited MEMORYD_* settings."""
    for key in [k for k in os.environ if k.startswith("MEMORYD_")]:
        del os.environ[key]
    os.environ["MEMORYD_CONFIG"] = "/nonexistent/memoryd-bench.toml"
    os.environ["MEMORYD_TRANSCRIPTS"] = "[]"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------------------------
# (a) throughput


def embedded_texts(files: list[str]) -> list[str]:
    """The texts the ingest job embeds for these files, from the pure stages alone."""
    texts: list[str] = []
    for path in files:
        if found := whole_file_rows(path):
            texts += [text for _, text in found[2].embed]
    return texts


async def part_a(work: Path) -> None:
    files = transcript_files([CLAUDE, CODEX])
    rt = Runtime(load_settings(data_dir=work / "a-data"))
    try:
        redis = await rt.start_queue(exclusive=True)
        await rt.serve()  # loads the model (and warms it with one probe text)
        assert rt.store is not None and rt.embedder is not None
        started = time.perf_counter()
        jobs = await queue.enqueue_ingest(redis, files, fresh=True)
        reports = [await queue.wait_for(job, 3600) for job in jobs]
        seconds = time.perf_counter() - started

        dump = await rt.store.dump()
        vectors = sum(
            1 for table in ("memory", "goal") for row in dump.get(table, []) if row.get("embedding")
        )
        texts = embedded_texts(files)
        batch = rt.embedder.batch_size
        started = time.perf_counter()
        rt.embedder.embed(texts)
        model_seconds = time.perf_counter() - started
    finally:
        await rt.close()

    lines = sum(r["lines"] for r in reports)
    memories = sum(r["memories"] for r in reports)
    goals = sum(r["goals"] for r in reports)
    agents: dict[str, int] = {}
    for r in reports:
        agents[r["agent"] or "?"] = agents.get(r["agent"] or "?", 0) + 1
    size = sum(os.path.getsize(f) for f in files)
    pipeline_rate = len(texts) / seconds
    model_rate = len(texts) / model_seconds
    print("(a) ingest all fixtures through the queue into a fresh embedded database")
    print(
        f"  {len(files)} files ({', '.join(f'{k} {v}' for k, v in sorted(agents.items()))}), "
        f"{size / 1e6:.1f} MB: {lines} lines, {memories} memories, {goals} goals, "
        f"{len(texts)} texts embedded, in {seconds:.1f} s"
    )
    print(f"  lines/s          {lines / seconds:8.1f}")
    print(f"  memories/s       {memories / seconds:8.1f}")
    print(f"  embedded texts/s {pipeline_rate:8.1f}")
    print(
        f"  (check: {vectors} memory+goal rows hold a vector; {len(texts)} texts recomputed "
        "with the pure parsers)"
    )
    print(
        f"  model alone (batch {batch}) on those {len(texts)} texts: {model_seconds:.1f} s "
        f"= {model_rate:.1f} texts/s"
    )
    print(f"  ratio pipeline/model (embedded texts/s): {pipeline_rate / model_rate:.2f}")
    await print_storage(work / "a-data", size)


# --------------------------------------------------------------------------------------------
# (b) latency from append to visible


def append_templates() -> list[dict[str, Any]]:
    """Typed prompts and plain assistant text records of the latency fixture."""
    out = []
    with LATENCY_FIXTURE.open("rb") as f:
        for raw in f:
            rec = json.loads(raw)
            message = rec.get("message")
            if rec.get("isSidechain") or rec.get("isMeta") or not isinstance(message, dict):
                continue
            content = message.get("content")
            prompt = rec.get("type") == "user" and isinstance(content, str)
            text_only = (
                rec.get("type") == "assistant"
                and isinstance(content, list)
                and bool(content)
                and all(isinstance(b, dict) and b.get("type") == "text" for b in content)
            )
            if (prompt and prompt_text(content)) or text_only:
                out.append(rec)
    return out


class Appender:
    """Appends fixture records to a transcript, each with fresh ids chained to the last one."""

    def __init__(self, path: Path, session_id: str, last_uuid: str) -> None:
        self.path = path
        self.session_id = session_id
        self.last_uuid = last_uuid
        self.templates = append_templates()
        self.count = 0

    def append(self) -> float:
        """Write one record; returns the monotonic time right after the write was closed."""
        rec = json.loads(json.dumps(self.templates[self.count % len(self.templates)]))
        self.count += 1
        rec["uuid"] = str(uuid.uuid4())
        rec["parentUuid"] = self.last_uuid
        rec["sessionId"] = self.session_id
        rec["timestamp"] = _now_iso()
        if "requestId" in rec:
            rec["requestId"] = f"req_bench{uuid.uuid4().hex}"
        if isinstance(rec["message"], dict) and "id" in rec["message"]:
            rec["message"]["id"] = f"msg_bench{uuid.uuid4().hex}"
        self.last_uuid = rec["uuid"]
        with self.path.open("ab") as f:
            f.write(json.dumps(rec).encode() + b"\n")
        return time.monotonic()


def expected_events(path: Path, session_id: str) -> int:
    """How many memories the session replay of this file shows, from the pure parser."""
    lines, _ = split_lines(path.read_bytes(), 0)
    result = parser_for("claude-code").parse(lines, None, Source.of(str(path)))
    return len(
        {e.id for e in result.events if isinstance(e, Memory) and e.session_id == session_id}
    )


def _last_uuid(path: Path) -> str:
    last = ""
    with path.open("rb") as f:
        for raw in f:
            rec = json.loads(raw)
            if isinstance(rec.get("uuid"), str) and rec.get("type") in ("user", "assistant"):
                last = rec["uuid"]
    return last


async def _events(redis: Any, session_id: str) -> int:
    try:
        doc = await queue.call(redis, jobs.SESSION, session_id, timeout=60)
    except NotFound:  # not ingested yet
        return -1
    return len(doc["events"])


def _cli_events(data: Path, session_id: str) -> int:
    done = subprocess.run(
        [MEMORYD, "session", session_id, "--data-dir", str(data), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return len(json.loads(done.stdout)["events"]) if done.returncode == 0 else -1


async def part_b(work: Path, appends: int, cli_appends: int, poll: float) -> None:
    transcripts = work / "transcripts"
    transcripts.mkdir()
    target = transcripts / LATENCY_FIXTURE.name
    shutil.copyfile(LATENCY_FIXTURE, target)
    session_id = LATENCY_FIXTURE.stem
    initial = expected_events(target, session_id)
    data = work / "b-data"
    log_path = work / "daemon.log"
    env = {**os.environ, "MEMORYD_TRANSCRIPTS": json.dumps([str(transcripts)])}
    with log_path.open("w") as log:
        daemon = subprocess.Popen(
            [MEMORYD, "run", "--data-dir", str(data)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    redis = None
    try:
        socket = data / "redis" / "redis.sock"
        deadline = time.monotonic() + 180
        while True:
            if daemon.poll() is not None:
                raise SystemExit(f"memoryd run exited:\n{log_path.read_text()[-3000:]}")
            if socket.exists():
                if redis is None:
                    redis = await queue.connect(f"unix://{socket}")
                if await queue.live_workers(redis) and await _events(redis, session_id) >= initial:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"fixture never ingested:\n{log_path.read_text()[-3000:]}")
            await asyncio.sleep(0.2)
        assert redis is not None
        appender = Appender(target, session_id, _last_uuid(target))
        rng = random.Random(20261122)

        async def one(query: Any) -> tuple[float, int]:
            before = await query()
            appended = appender.append()
            polls = 0
            while True:
                polls += 1
                if await query() > before:
                    return time.monotonic() - appended, polls
                if time.monotonic() - appended > 120:
                    raise SystemExit(f"append not visible:\n{log_path.read_text()[-3000:]}")
                await asyncio.sleep(poll)

        query_times = []
        for _ in range(5):
            started = time.monotonic()
            await _events(redis, session_id)
            query_times.append(time.monotonic() - started)
        latencies, polls = [], []
        for _ in range(appends):
            await asyncio.sleep(rng.uniform(0.3, 0.8))
            seconds, count = await one(lambda: _events(redis, session_id))
            latencies.append(seconds)
            polls.append(count)

        cli_start = []
        for _ in range(2):
            started = time.monotonic()
            await asyncio.to_thread(_cli_events, data, session_id)
            cli_start.append(time.monotonic() - started)
        cli_latencies = []
        for _ in range(cli_appends):
            await asyncio.sleep(rng.uniform(0.3, 0.8))
            seconds, _ = await one(lambda: asyncio.to_thread(_cli_events, data, session_id))
            cli_latencies.append(seconds)
        final = await _events(redis, session_id)
    finally:
        if redis is not None:
            await redis.aclose()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
            stop_orphan(data / "redis" / "redis.sock")

    print("(b) `memoryd run` up; append one fresh record, wait until the session replay shows it")
    print(
        f"  session {session_id[:8]} (copy of a {initial}-memory fixture); {appends} appends of "
        "user-prompt / assistant-text records; polled through the daemon's Redis "
        f"(queue.call 'session', every {poll * 1000:.0f} ms; one call takes "
        f"{statistics.median(query_times) * 1000:.0f} ms median)"
    )
    print(
        f"  append -> visible: p50 {_pct(latencies, 0.5):.3f} s, "
        f"p95 {_pct(latencies, 0.95):.3f} s, "
        f"max {max(latencies):.3f} s, min {min(latencies):.3f} s (target p50 <= 1 s); "
        f"polls per append median {statistics.median(polls):.0f}"
    )
    print(
        f"  through `memoryd session ID --json` (INCLUDES process start-up: one call takes "
        f"{statistics.median(cli_start):.2f} s): {cli_appends} appends -> "
        + ", ".join(f"{s:.2f} s" for s in cli_latencies)
    )
    print(f"  events in the session at the end: {final} ({initial} + {appender.count} appended)")


# --------------------------------------------------------------------------------------------
# (c) peak RSS on a >= 1 GB transcript


@dataclass
class PairTemplate:
    """A (tool_use, tool_result) line pair as byte pieces around id slots."""

    parts: list[bytes]
    slots: list[str]
    tool: str
    size: int

    def render(self, values: dict[str, str]) -> bytes:
        out = [self.parts[0]]
        for slot, part in zip(self.slots, self.parts[1:], strict=True):
            out += [values[slot].encode(), part]
        return b"".join(out)


_SLOT = "@@BENCH:{}@@"
_SLOT_RE = re.compile(rb"@@BENCH:(\w+)@@")


def _template(call: dict[str, Any], result: dict[str, Any], session_id: str) -> PairTemplate:
    """Placeholders for every id that must be fresh per repetition, then split on them."""
    use = call["message"]["content"][0]
    block = result["message"]["content"][0]
    old = {
        "CU": call["uuid"],
        "RU": result["uuid"],
        "TID": use["id"],
        "MID": call["message"].get("id") or "",
        "RID": call.get("requestId") or "",
    }
    for rec in (call, result):
        rec["sessionId"] = session_id
        rec["isSidechain"] = False  # a subagent file's pair, moved into the one main session
        rec.pop("agentId", None)
    call["parentUuid"] = _SLOT.format("PU")
    result["parentUuid"] = _SLOT.format("CU")
    text = json.dumps(call) + "\n" + json.dumps(result) + "\n"
    assert block["tool_use_id"] == old["TID"]
    for slot, value in old.items():
        if value:  # also catches toolUseResult / sourceToolAssistantUUID copies of the ids
            text = text.replace(value, _SLOT.format(slot))
    pieces = _SLOT_RE.split(text.encode())  # text, slot, text, slot, ..., text
    parts, slots = pieces[0::2], [slot.decode() for slot in pieces[1::2]]
    assert set(slots) <= {"CU", "RU", "TID", "MID", "RID", "PU"} and "TID" in slots
    return PairTemplate(parts, slots, use["name"], len(text.encode()))


def pair_templates(session_id: str) -> list[PairTemplate]:
    """Claude fixture pairs: one tool_use record answered by one tool_result record, no error,
    a short call (the call is embedded) and a big result (it is not)."""
    found = []
    for path in transcript_files([CLAUDE]):
        calls: dict[str, dict[str, Any]] = {}
        with open(path, "rb") as f:
            for raw in f:
                if b"@@BENCH:" in raw:
                    continue  # would confuse the placeholders
                rec = json.loads(raw)
                message = rec.get("message")
                content = message.get("content") if isinstance(message, dict) else None
                if not isinstance(content, list) or len(content) != 1:
                    continue
                block = content[0]
                if not isinstance(block, dict):
                    continue
                if rec.get("type") == "assistant" and block.get("type") == "tool_use":
                    calls[block["id"]] = rec
                elif rec.get("type") == "user" and block.get("type") == "tool_result":
                    call = calls.get(block.get("tool_use_id"))
                    tur = rec.get("toolUseResult")
                    if (
                        call is None
                        or block.get("is_error")
                        or len(raw) < BIG_RESULT_BYTES
                        or (isinstance(tur, dict) and tur.get("backgroundTaskId"))
                    ):
                        continue
                    use = call["message"]["content"][0]
                    if use["name"].lower() in _NOT_REPEATABLE:
                        continue
                    if len(render_call(use["name"], use.get("input") or {})) > SHORT_CALL_CHARS:
                        continue
                    found.append(_template(json.loads(json.dumps(call)), rec, session_id))
    return found


def first_prompt(session_id: str) -> bytes:
    with LATENCY_FIXTURE.open("rb") as f:
        for raw in f:
            rec = json.loads(raw)
            content = (rec.get("message") or {}).get("content")
            if rec.get("type") == "user" and isinstance(content, str) and prompt_text(content):
                rec |= {"sessionId": session_id, "uuid": str(uuid.uuid4()), "parentUuid": None}
                return json.dumps(rec).encode() + b"\n"
    raise RuntimeError("no prompt in the latency fixture")


def build_big(path: Path, size: int, session_id: str) -> tuple[int, dict[str, int]]:
    """Write a prompt, then the pair templates in turn with fresh ids until `size` bytes."""
    templates = pair_templates(session_id)
    if not templates:
        raise SystemExit("no (tool_use, big tool_result) pairs in the fixtures")
    head = first_prompt(session_id)
    parent = json.loads(head)["uuid"]
    written, pairs, tools = len(head), 0, {}
    with path.open("wb", buffering=8 << 20) as f:
        f.write(head)
        while written < size:
            t = templates[pairs % len(templates)]
            call_uuid = str(uuid.uuid4())
            ids = {
                "PU": parent,
                "CU": call_uuid,
                "RU": str(uuid.uuid4()),
                "TID": f"toolu_bench{uuid.uuid4().hex[:20]}",
                "MID": f"msg_bench{uuid.uuid4().hex[:20]}",
                "RID": f"req_bench{uuid.uuid4().hex[:20]}",
            }
            chunk = t.render(ids)
            f.write(chunk)
            written += len(chunk)
            parent = ids["RU"]
            pairs += 1
            tools[t.tool] = tools.get(t.tool, 0) + 1
    return pairs, tools


class RssSampler(threading.Thread):
    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.samples: list[tuple[float, int]] = []  # (monotonic, VmRSS kB)
        self._halt = threading.Event()

    @staticmethod
    def rss_kb() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append((time.monotonic(), self.rss_kb()))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


async def rss_child(path: Path, data: Path) -> dict[str, Any]:
    """Runs in its own process (so nothing else ran in it): ingest `path`, sample RSS.

    Progress and counts come from the job's own writes (the store's write_transcript_batch is
    wrapped in this process), so the benchmark adds no database traffic of its own. A huge
    transcript is ingested by a chain of jobs (each enqueues the next slice); when the queue
    runs dry before the end of the file, a new job is enqueued and that is reported."""
    sampler = RssSampler()
    sampler.start()
    size = path.stat().st_size
    rt = Runtime(load_settings(data_dir=data))
    try:
        redis = await rt.start_queue(exclusive=True)
        await rt.serve()
        assert rt.store is not None
        baseline = RssSampler.rss_kb()
        progress: list[tuple[float, int]] = []
        counts: dict[str, int] = {}
        write = rt.store.write_transcript_batch

        async def recording(batch: dict[str, Any], cursor: dict[str, Any]) -> int | None:
            generation = await write(batch, cursor)
            if cursor["path"] == str(path):
                for table, rows in batch.items():
                    counts[table] = counts.get(table, 0) + len(rows)
                progress.append((time.monotonic(), cursor["offset"]))
                print(json.dumps({"offset": cursor["offset"]}), flush=True)
            return generation

        rt.store.write_transcript_batch = recording  # type: ignore[method-assign]
        restarts: list[str] = []
        started = time.perf_counter()
        [job] = await queue.enqueue_ingest(redis, [str(path)], fresh=True)
        # A finite timeout: wait_for formats it into its message.
        first = asyncio.create_task(queue.wait_for(job, 7 * 24 * 3600))
        while not progress or progress[-1][1] < size:
            await asyncio.sleep(1.0)
            # A job stays in the queue's sorted set while it runs, and a slice enqueues the
            # next one before it ends: an empty queue means the chain stopped.
            if progress and progress[-1][1] >= size:
                break
            if await queue.queue_depth(redis) == 0:
                why = "ok"
                if first.done():
                    why = f"{first.exception()}" if first.exception() else "ok"
                at = progress[-1][1] if progress else 0
                restarts.append(f"queue empty at byte {at} (first job: {why})")
                print(json.dumps({"failed": restarts[-1]}), flush=True)
                [job] = await queue.enqueue_ingest(redis, [str(path)], fresh=True)
        seconds = time.perf_counter() - started
        first.cancel()
    finally:
        await rt.close()
        sampler.stop()
    marks = []
    for quarter in (25, 50, 75, 100):
        at = next(t for t, off in progress if off >= size * quarter / 100)
        before = [kb for t, kb in sampler.samples if t <= at] or [sampler.samples[0][1]]
        marks.append({"pct": quarter, "rss_kb": before[-1], "peak_kb": max(before)})
    return {
        "size": size,
        "seconds": seconds,
        "baseline_kb": baseline,
        "marks": marks,
        "peak_kb": max(kb for _, kb in sampler.samples),
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "samples": len(sampler.samples),
        "batches": len(progress),
        "restarts": restarts,
        "memories": counts.get("memories", 0),
        "edges": {
            k.removeprefix("edge_"): v for k, v in sorted(counts.items()) if k.startswith("edge_")
        },
    }


def _proc_rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_child(path: Path, data: Path, stall: float) -> dict[str, Any]:
    """Run the ingesting process; kill it (and its private Redis) if the job makes no progress
    for `stall` seconds, and say where it stopped."""
    child = subprocess.Popen(
        [sys.executable, "-m", __spec__.name, "--rss-child", str(path), "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        return _follow_child(child, path, stall)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        stop_orphan(data / "redis" / "redis.sock")  # it daemonized out of the child's group


def _follow_child(child: subprocess.Popen[bytes], path: Path, stall: float) -> dict[str, Any]:
    assert child.stdout is not None
    fd = child.stdout.fileno()
    size = path.stat().st_size
    last_change, offset, result = time.monotonic(), 0, None
    buffered = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 5.0)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break  # the child closed its stdout: it is ending
            *complete, buffered = (buffered + chunk).split(b"\n")
            for line in complete:
                doc = json.loads(line) if line.startswith(b"{") else {}
                if "offset" in doc:
                    offset, last_change = doc["offset"], time.monotonic()
                elif "failed" in doc:
                    print(f"  the job chain stopped early, enqueued again: {doc['failed']}")
                elif "marks" in doc:
                    result = doc
        if time.monotonic() - last_change > stall:
            rss = _proc_rss_kb(child.pid) / 1024
            print(
                f"  STALLED: no batch written for {stall:.0f} s at offset {offset} "
                f"({100 * offset / size:.1f}% of the file), RSS {rss:.0f} MiB; killing it"
            )
            return {}
    child.wait()
    if child.returncode != 0 or result is None:
        raise SystemExit(f"the ingesting process failed (exit {child.returncode})")
    return result


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _db_layout(db: Path) -> str:
    """Total size and the share of each engine folder (SurrealKV: wal, sstables, vlog...)."""
    if not db.exists():
        return "none"
    parts = [f"{d.name} {_du(d) / 2**20:.0f} MiB" for d in sorted(db.iterdir()) if d.is_dir()]
    return f"{_du(db) / 2**20:.0f} MiB ({', '.join(parts)})"


# Targets of the storage policy (DESIGN.md): database bytes per transcript byte ingested, and
# peak RSS of the ingesting process.
TARGET_RATIO = 0.25
TARGET_RSS_MB = 600


def _value_bytes(value: Any) -> int:
    """About what a value costs in the engine's encoding: strings and bytes by their length,
    numbers 8 bytes, containers the sum of their parts (plus keys). An estimate, to say which
    fields dominate; the disk total is measured."""
    if isinstance(value, str | bytes):
        return len(value.encode() if isinstance(value, str) else value) + 1
    if isinstance(value, list):
        return 1 + sum(_value_bytes(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(len(k) + 1 + _value_bytes(v) for k, v in value.items())
    return 1 if value is None or isinstance(value, bool) else 9


async def byte_shares(data: Path) -> list[tuple[str, int, int]]:
    """(table.field, rows, estimated bytes) of every field of every table, largest first."""
    settings = load_settings(data_dir=data)
    store = await Store.open(
        settings.database_url, settings.surreal_namespace, settings.surreal_database
    )
    sizes: dict[str, list[int]] = {}
    try:
        for table in await store.table_names():
            after = None
            while rows := await store.stored_rows_after(table, after, 500):
                for row in rows:
                    for field, value in plain(row, qualified=True).items():
                        entry = sizes.setdefault(f"{table}.{field}", [0, 0])
                        entry[0] += 1
                        entry[1] += _value_bytes(value)
                after = rows[-1]["id"]
    finally:
        await store.close()
    return sorted(((k, n, b) for k, (n, b) in sizes.items()), key=lambda s: -s[2])


async def print_storage(data: Path, ingested: int) -> float:
    """The database's size against the transcript bytes, and what its bytes are."""
    db = _du(data / "db")
    print(
        f"  database on disk: {_db_layout(data / 'db')}; {db / ingested:.3f} x the "
        f"{ingested / 2**20:.1f} MiB of transcripts (target <= {TARGET_RATIO})"
    )
    shares = await byte_shares(data)
    # Opened and closed once more: what the engine leaves on disk once it is at rest.
    print(f"  after a reopen: {_db_layout(data / 'db')}")
    total = sum(b for _, _, b in shares) or 1
    top = ", ".join(f"{k} {b / 2**20:.1f} MiB ({100 * b / total:.0f}%)" for k, _, b in shares[:8])
    print(f"  estimated value bytes {total / 2**20:.1f} MiB, largest fields: {top}")
    return db / ingested


async def part_c(work: Path, size_mb: int, stall: float) -> tuple[float, float] | None:
    """Returns (database bytes / transcript bytes, peak VmRSS in MB), None if it stalled."""
    work = work / f"c-{size_mb}"
    path = work / "big" / "4d0a8b1e-bench-big-transcript.jsonl"
    path.parent.mkdir(parents=True)
    session_id = path.stem
    started = time.perf_counter()
    pairs, tools = build_big(path, size_mb * 1024 * 1024, session_id)
    build_seconds = time.perf_counter() - started
    size = path.stat().st_size
    print(f"(c) peak RSS while ingesting a {size / 2**20:.0f} MiB transcript")
    print(
        f"  built in {build_seconds:.1f} s: 1 prompt + {pairs} (tool_use, tool_result) pairs with "
        f"fresh ids, {size / pairs / 1024:.1f} KiB per pair on average; tools "
        + ", ".join(f"{k} {v}" for k, v in sorted(tools.items()))
    )
    print(
        "  mostly big tool results (stored capped, not embedded) and short calls (embedded), "
        "so the model (~20 long texts/s here) does not dominate and 1 GB takes minutes"
    )
    data = work / "c-data"
    r = run_child(path, data, stall)
    if not r:
        print(f"  database on disk when it stalled: {_db_layout(data / 'db')}")
        return None
    mib = 1024
    print(
        f"  ingested in {r['seconds']:.0f} s ({size / 2**20 / r['seconds']:.2f} MiB/s) in "
        f"{r['batches']} batches: {1 + 2 * pairs} lines, {r['memories']} memories written "
        f"({r['memories'] / r['seconds']:.1f}/s), edges {r['edges']}"
        + (f"; the job chain stopped {len(r['restarts'])}x" if r["restarts"] else "")
    )
    print(
        f"  RSS of the ingesting process (model and database open, before the job): "
        f"{r['baseline_kb'] / mib:.0f} MiB"
    )
    for m in r["marks"]:
        print(
            f"  RSS at {m['pct']:3d}% of the file: {m['rss_kb'] / mib:6.0f} MiB "
            f"(peak so far {m['peak_kb'] / mib:.0f} MiB)"
        )
    print(
        f"  peak VmRSS {r['peak_kb'] / mib:.0f} MiB ({r['samples']} samples every 0.2 s); "
        f"ru_maxrss {r['maxrss_kb'] / mib:.0f} MiB (target < {TARGET_RSS_MB} MB)"
    )
    ratio = await print_storage(data, size)
    shutil.rmtree(work, ignore_errors=True)
    return ratio, r["peak_kb"] * 1024 / 1e6


# --------------------------------------------------------------------------------------------


def _load() -> None:
    """Other work on the machine skews every number here: say how busy it is."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"[load average {load}]")


async def amain(args: argparse.Namespace) -> None:
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    work = _tmpdir("mdt-")
    print(f"machine: {os.cpu_count()} cores")
    try:
        if "a" not in skip:
            _load()
            await part_a(work)
        if "b" not in skip:
            _load()
            await part_b(work, args.appends, args.cli_appends, args.poll)
        if "c" not in skip:
            scaling = []
            for size_mb in sorted({int(s) for s in args.size_mb.split(",")}):
                _load()
                if found := await part_c(work, size_mb, args.stall):
                    scaling.append((size_mb, *found))
            print("(c) by size: MiB of transcript -> database/transcript, peak RSS")
            for size_mb, ratio, peak in scaling:
                print(
                    f"  {size_mb:5d} MiB: {ratio:.3f} (target <= {TARGET_RATIO}), "
                    f"{peak:.0f} MB (target < {TARGET_RSS_MB} MB)"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size-mb", default="64,256,1024", help="(c) transcript sizes, MiB, comma-separated"
    )
    parser.add_argument("--skip", default="", help="parts to skip, e.g. a,c")
    parser.add_argument("--appends", type=int, default=20, help="(b) appends polled via Redis")
    parser.add_argument("--cli-appends", type=int, default=3, help="(b) appends via the CLI")
    parser.add_argument("--poll", type=float, default=0.05, help="(b) poll interval, s")
    parser.add_argument(
        "--stall", type=float, default=600, help="(c) give up after this long without progress, s"
    )
    parser.add_argument("--rss-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _isolate_env()
    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the private Redis servers and the
    # daemon, and remove the temp dirs.
    signal.signal(signal.SIGTERM, _interrupt)
    if args.rss_child:
        result = asyncio.run(rss_child(args.rss_child, args.data_dir))
        print(json.dumps(result))
        return
    asyncio.run(amain(args))


if __name__ == "__main__":
    main()
