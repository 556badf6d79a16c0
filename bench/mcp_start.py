"""How fast `memoryd mcp` is there for an agent: from starting the process to the answers to
`initialize` and `tools/list`, as a client sees them over stdio, with a daemon running; idle
and with a CPU hog on every core (started by this bench, killed at its end).

    .venv/bin/python -m bench.mcp_start [--samples 40] [--sdk-samples 5]

Also the first tool call of a session (`status`, answered by the daemon's MCP session), and for
comparison the SDK served in the process itself (`memoryd mcp --in-process`, what `memoryd mcp`
was). Prints p50/p95 next to the targets: initialize + tools/list p95 <= 300 ms idle, <= 2 s
with the hog (Claude Code gives a server's version probe 3 s, and all its servers 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from bench.agent_latency import MEMORYD, env, pct, wait_live
from tests.hog import cpu_hog

TARGETS = {"idle": 300.0, "cpu hog": 2000.0}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def ask(stdin: IO[bytes], stdout: IO[bytes], message: dict[str, object]) -> dict[str, object]:
    stdin.write(json.dumps(message).encode() + b"\n")
    stdin.flush()
    if "id" not in message:
        return {}
    answer: dict[str, object] = json.loads(stdout.readline())
    assert answer.get("id") == message["id"] and "result" in answer, answer
    return answer


def one_session(data: Path, args: list[str]) -> tuple[float, float]:
    """(ms from start to the tools/list answer, ms of the first `status` call)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [MEMORYD, "mcp", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env(data),
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        ask(process.stdin, process.stdout, INITIALIZE)
        ask(
            process.stdin, process.stdout, {"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        tools = ask(
            process.stdin, process.stdout, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )
        listed = (time.perf_counter() - started) * 1000
        assert tools["result"]["tools"], tools  # type: ignore[index]
        called = time.perf_counter()
        status = {"name": "status", "arguments": {}}
        reply = ask(
            process.stdin,
            process.stdout,
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": status},
        )
        assert not reply["result"]["isError"], reply  # type: ignore[index]
        return listed, (time.perf_counter() - called) * 1000
    finally:
        process.stdin.close()
        process.wait(timeout=60)


def measure(data: Path, label: str, samples: int, sdk_samples: int) -> None:
    shim = [one_session(data, []) for _ in range(samples)]
    sdk = [one_session(data, ["--in-process"]) for _ in range(sdk_samples)]
    target = TARGETS[label]
    print(f"\n{label} (load average {os.getloadavg()[0]:.1f}; {samples} and {sdk_samples} runs)")
    print(f"{'':40}{'p50 ms':>10}{'p95 ms':>10}{'max':>10}   target")
    rows = (
        ("memoryd mcp: initialize + tools/list", [s[0] for s in shim], f"p95 <= {target:.0f} ms"),
        ("memoryd mcp: first call (status)", [s[1] for s in shim], "-"),
        ("--in-process: initialize + tools/list", [s[0] for s in sdk], "(before: the SDK here)"),
    )
    for name, values, goal in rows:
        print(
            f"{name:40}{pct(values, 0.5):10.1f}{pct(values, 0.95):10.1f}{max(values):10.1f}"
            f"   {goal}"
        )
    p95 = pct([s[0] for s in shim], 0.95)
    print(f"{'met' if p95 <= target else 'MISSED'}: p95 {p95:.0f} ms against {target:.0f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--sdk-samples", type=int, default=5)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="memoryd-mcp-start-"))
    daemon = subprocess.Popen(
        [MEMORYD, "run"], env=env(data), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await wait_live(data)
        measure(data, "idle", args.samples, args.sdk_samples)
        with cpu_hog() as loops:
            print(f"\n{loops} busy loops started")
            measure(data, "cpu hog", args.samples, args.sdk_samples)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
