"""What an agent waits for: MCP `search` and `file_history` through the running daemon, and a
hook end to end (process start included), with the daemon idle and while it indexes and ingests;
and the hooks at the moment of action (before an edit, after a failure), idle and with every
core saturated by a CPU hog.

    .venv/bin/python -m bench.agent_latency --data-dir DIR [--chunks 20000] [--memories 20000]
        [--samples 40] [--only action-hooks]

The dataset is built once into DIR (keep it outside the repo; a second run reuses it), the trees
it indexes beside it (agent-latency-tree-NAME, agent-latency-action-NAME for DIR's name): a tree of
installed packages' source (code nobody here wrote) indexed by `memoryd run`, and a Claude Code
transcript made of the real fixtures' (tool call, result) pairs with fresh ids, ingested through
the daemon, until the database holds `--chunks` valid chunks and `--memories` memories. Then,
over one MCP stdio session of the SDK's own client, `--samples` calls of each tool, and as many
runs of `memoryd hook claude-code user-prompt-submit` (a new session each, so the hook never has
nothing new to say); once idle, once while a second tree is indexed and a transcript ingested.
Prints p50/p95 next to the targets (MCP search p50 <= 100 ms, hook p95 <= 300 ms).

The action hooks: a real Claude Code transcript (tests/fixtures: claude-code-log, 5 files edited,
21 failures) ingested `--copies` times as separate sessions of a repository of the same layout
made here, then `memoryd hook claude-code pre-tool-use` for an Edit of each file it edited and
`post-tool-use-failure` with each failure's own output, each from a new session. Targets: p95
<= 150 ms idle, <= 400 ms with the hog. These hooks look up the graph by file and by error
signature: they compute no query vector, so no vector cache can flatter them. Every search and
prompt is a query not asked before in the run (bench/fresh_queries.py): its vector is computed
afresh, not recalled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from bench import index_throughput
from bench import transcripts as transcript_bench
from bench.fresh_queries import fresh_queries
from memoryd import client
from memoryd.config import load_settings
from memoryd.errors import DaemonUnavailable

MEMORYD = str(Path(sys.executable).parent / "memoryd")
# Every search and prompt hook asks a query no call before it asked (the daemon keeps the
# vectors of its last 64): each pays for its query's vector, as a user's new question does.
ASKED = fresh_queries()
TARGETS = {
    "mcp search": ("p50", 100.0),
    "hook end to end": ("p95", 300.0),
    "pre-tool hook": ("p95", 150.0),
    "post-tool hook": ("p95", 150.0),
}
# With both cores saturated by the hog.
HOG_TARGETS = {"pre-tool hook": ("p95", 400.0), "post-tool hook": ("p95", 400.0)}
# The fixture transcript the action hooks are measured on, and the folder it was recorded in.
ACTION_TRANSCRIPT = (
    Path(__file__).parent.parent
    / "tests/fixtures/transcripts/claude-code/-Users-dain-workspace-claude-code-log-sample"
    / "37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
)
ACTION_ROOT = "/Users/dain/workspace/claude-code-log"


def env(data: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    return clean | {
        "MEMORYD_CONFIG": "/nonexistent/memoryd-bench.toml",
        "MEMORYD_TRANSCRIPTS": "[]",
        "MEMORYD_DATA_DIR": str(data),
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def counts(data: Path) -> dict[str, int]:
    async with client.connect(load_settings(data_dir=data)) as memoryd:
        status = await memoryd.status()
    return {"chunks": status["valid_chunks"], "memories": status["counts"].get("memory", 0)}


async def wait_live(data: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await counts(data)
            return
        except DaemonUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(2)


async def build(data: Path, tree: Path, chunks: int, memories: int, have: dict[str, int]) -> None:
    """Index and ingest until the targets are met (each step only when still short)."""
    if have["chunks"] < chunks:
        # About eight chunks per file of these packages.
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        files = index_throughput.build_tree(tree, chunks // 8 + 1)
        print(f"indexing {files} files of installed packages…", flush=True)
        subprocess.run(
            [MEMORYD, "index", str(tree), "--json"],
            env=env(data),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if have["memories"] < memories:
        path = data.parent / f"agent-latency-{uuid.uuid4().hex[:8]}.jsonl"
        # Two memories per pair; a pair of the fixtures takes about 37 KB (measured).
        pairs, _ = transcript_bench.build_big(path, (memories // 2) * 38_000, str(uuid.uuid4()))
        print(f"ingesting {pairs} tool call/result pairs…", flush=True)
        subprocess.run([MEMORYD, "ingest", str(path)], env=env(data), check=True)
        await settled(data)


async def settled(data: Path, quiet_seconds: float = 60) -> None:
    """Wait until the follow-up jobs of a long transcript are done: the counts stop moving."""
    last, still_since = await counts(data), time.monotonic()
    while time.monotonic() - still_since < quiet_seconds:
        await asyncio.sleep(10)
        now = await counts(data)
        if now != last:
            last, still_since = now, time.monotonic()
            print(f"  {now['memories']} memories", flush=True)


async def measure_mcp(data: Path, cwd: Path, samples: int) -> dict[str, list[float]]:
    params = StdioServerParameters(command=MEMORYD, args=["mcp"], cwd=cwd, env=env(data))
    times: dict[str, list[float]] = {"mcp search": [], "mcp file_history": []}
    files = sorted(p for p in cwd.rglob("*.py"))[:samples]
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("status", {})
        for n in range(samples):
            started = time.perf_counter()
            await session.call_tool("search", {"query": next(ASKED), "limit": 10})
            times["mcp search"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await session.call_tool("file_history", {"path": str(files[n % len(files)])})
            times["mcp file_history"].append((time.perf_counter() - started) * 1000)
    return times


def measure_hooks(data: Path, cwd: Path, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        payload = {
            "session_id": f"bench-{uuid.uuid4().hex}",
            "cwd": str(cwd),
            "prompt": next(ASKED),
        }
        started = time.perf_counter()
        subprocess.run(
            [MEMORYD, "hook", "claude-code", "user-prompt-submit"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=env(data),
            check=True,
        )
        times.append((time.perf_counter() - started) * 1000)
    return times


def fixture_tree(root: Path) -> tuple[str, list[str], list[str]]:
    """The fixture transcript recorded in `root` instead, and `root` made a repository holding
    the files it edits: (its text, those files, the outputs of its failures in order, as the
    hooks are given them)."""
    text = ACTION_TRANSCRIPT.read_text().replace(ACTION_ROOT, str(root))
    files: set[str] = set()
    failures: list[str] = []
    for line in text.splitlines():
        content = (json.loads(line).get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block.get("name") in ("Edit", "Write"):
                files.add(block["input"]["file_path"])
            if block.get("type") == "tool_result" and block.get("is_error"):
                given = block.get("content")
                failures.append(given if isinstance(given, str) else json.dumps(given))
    for path in files:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("# bench\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)  # a repository, as users have
    return text, sorted(files), failures


def fixture_copies(text: str, folder: Path, copies: int) -> None:
    """`copies` transcripts of the fixture in `folder`, each a session of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(copies):
        fresh = str(uuid.uuid4())
        (folder / f"{fresh}.jsonl").write_text(text.replace(ACTION_TRANSCRIPT.stem, fresh))


def action_scenario(data: Path, root: Path, copies: int) -> tuple[list[str], list[str]]:
    """The fixture's sessions `copies` times over in `root` (indexed as a project): the files
    they edited and the outputs of their failures, as the hooks will be given them."""
    text, files, failures = fixture_tree(root)
    subprocess.run([MEMORYD, "index", str(root)], env=env(data), check=True, capture_output=True)
    folder = root.parent / "transcripts"
    fixture_copies(text, folder, copies)
    subprocess.run([MEMORYD, "ingest", str(folder)], env=env(data), check=True, capture_output=True)
    return files, failures


def measure_action_hooks(
    data: Path, cwd: Path, files: list[str], failures: list[str], samples: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Each hook `samples` times from new sessions; also how many answers said something."""
    times: dict[str, list[float]] = {"pre-tool hook": [], "post-tool hook": []}
    said = dict.fromkeys(times, 0)
    for n in range(samples):
        base = {"session_id": f"bench-{uuid.uuid4().hex}", "cwd": str(cwd)}
        calls = {
            "pre-tool hook": (
                "pre-tool-use",
                base | {"tool_name": "Edit", "tool_input": {"file_path": files[n % len(files)]}},
            ),
            "post-tool hook": (
                "post-tool-use-failure",
                base | {"tool_name": "Bash", "error": failures[n % len(failures)]},
            ),
        }
        for name, (event, payload) in calls.items():
            started = time.perf_counter()
            done = subprocess.run(
                [MEMORYD, "hook", "claude-code", event],
                input=json.dumps(payload),
                capture_output=True,
                text=True,
                env=env(data),
                check=True,
            )
            times[name].append((time.perf_counter() - started) * 1000)
            said[name] += bool(done.stdout.strip())
    return times, said


def cpu_hog() -> list[subprocess.Popen[bytes]]:
    """One busy process per core."""
    spin = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 2)]


def action_round(data: Path, root: Path, files: list[str], failures: list[str], n: int) -> None:
    idle, said = measure_action_hooks(data, root, files, failures, n)
    report("action hooks, idle", idle)
    print(f"answers with context: {said} of {n} each")
    hog = cpu_hog()
    try:
        time.sleep(2)  # the hog's processes up and spinning before the first sample
        busy, said = measure_action_hooks(data, root, files, failures, n)
        report(f"action hooks, {len(hog)} CPU hog processes", busy, HOG_TARGETS)
        print(f"answers with context: {said} of {n} each")
    finally:
        for process in hog:
            process.kill()
            process.wait()


def report(
    label: str, times: dict[str, list[float]], targets: dict[str, tuple[str, float]] = TARGETS
) -> None:
    print(f"\n{label} (load average {os.getloadavg()[0]:.1f})")
    print(f"{'':22}{'p50 ms':>10}{'p95 ms':>10}{'mean':>10}   target")
    for name, values in times.items():
        which, limit = targets.get(name, ("", 0.0))
        target = f"{which} <= {limit:.0f} ms" if which else "-"
        print(
            f"{name:22}{pct(values, 0.5):10.1f}{pct(values, 0.95):10.1f}"
            f"{statistics.mean(values):10.1f}   {target}"
        )


async def busy_work(data: Path, tree: Path, scratch: Path) -> subprocess.Popen[bytes]:
    """Indexing and ingestion running while the second round is measured."""
    index_throughput.build_tree(scratch / "busy", 400)
    path = scratch / "busy.jsonl"
    transcript_bench.build_big(path, 20 << 20, str(uuid.uuid4()))
    subprocess.Popen([MEMORYD, "ingest", str(path)], env=env(data), stdout=subprocess.DEVNULL)
    return subprocess.Popen(
        [MEMORYD, "index", str(scratch / "busy"), "--json"],
        env=env(data),
        stdout=subprocess.DEVNULL,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--copies", type=int, default=20, help="sessions of the action fixture")
    parser.add_argument("--only", choices=["action-hooks"], help="measure only these")
    args = parser.parse_args()
    data = args.data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    # Beside the data dir and named after it: another data dir in the same folder has its own
    # (a shared scenario folder left a second data dir with no sessions: hooks said nothing).
    tree = data.parent / f"agent-latency-tree-{data.name}"
    daemon = subprocess.Popen(
        [MEMORYD, "run"], env=env(data), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await wait_live(data)
        root = data.parent / f"agent-latency-action-{data.name}" / "claude-code-log"
        made = root.parent / "scenario.json"
        if not made.exists():
            print(f"ingesting {args.copies} sessions that edit files and fail…", flush=True)
            shutil.rmtree(root.parent, ignore_errors=True)  # a run cut short: start afresh
            made.parent.mkdir(parents=True)
            made.write_text(json.dumps(action_scenario(data, root, args.copies)))
        files, failures = json.loads(made.read_text())
        action_round(data, root, files, failures, args.samples)
        if args.only:
            return
        have = await counts(data)
        await build(data, tree, args.chunks, args.memories, have)
        have = await counts(data)
        print(f"dataset: {have['chunks']} valid chunks, {have['memories']} memories")
        idle = await measure_mcp(data, tree, args.samples)
        idle["hook end to end"] = measure_hooks(data, tree, args.samples)
        report("idle", idle)
        scratch = data.parent / f"agent-latency-busy-{uuid.uuid4().hex[:8]}"
        indexing = await busy_work(data, tree, scratch)
        busy = await measure_mcp(data, tree, args.samples)
        busy["hook end to end"] = measure_hooks(data, tree, args.samples)
        report("while indexing and ingesting", busy)
        indexing.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)


if __name__ == "__main__":
    asyncio.run(main())
