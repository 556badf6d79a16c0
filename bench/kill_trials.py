"""Randomized kill -9 trials of `memoryd run` mid-index and mid-ingest, against a clean run.

    .venv/bin/python bench/kill_trials.py [--trials 20] [--min-wait 1] [--max-wait 12]
        [--target memoryd|redis]

One tree (two installed packages' source, committed to git) and the transcript fixtures are
indexed and ingested by a daemon that is killed with SIGKILL (its private Redis left behind, as
a crash leaves it) after a random delay, --trials times on one data dir; a last start runs to the
end. A clean run (no kill) on another data dir is the reference. Printed, per kind of row:
lost (in the clean run, missing after the trials), duplicated (more copies than the clean run)
and stale (valid chunks the clean run does not have), plus the jobs left in the queue.

`--target redis` kills the daemon's private redis-server instead, and the daemon lives on: it
starts Redis again itself (3 times in 10 minutes at most; past that it exits 1, and the bench
starts it again as a service manager would). Printed as well: how each kill ended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from memoryd import projects
from memoryd.embedded import stop_orphan
from memoryd.store import Store

REPO = Path(__file__).resolve().parents[1]
MEMORYD = str(Path(sys.executable).parent / "memoryd")
# The transcript fixtures the tests ingest.
FIXTURES = REPO / "tests" / "fixtures" / "transcripts" / "claude-code"
TRANSCRIPT_TABLES = ("session", "memory", "goal", "has_goal", "reads", "modifies", "mentions")


def _site_package(name: str) -> Path:
    return Path(__import__(name).__file__).parent  # type: ignore[arg-type]


def _tree(work: Path) -> Path:
    root = work / "tree"
    for name in ("arq", "pathspec"):
        shutil.copytree(
            _site_package(name), root / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "import"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env)
    return root


def _env(work: Path, transcripts: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    env["MEMORYD_CONFIG"] = str(work / "no-config.toml")
    env["MEMORYD_TRANSCRIPTS"] = json.dumps([str(transcripts)] if transcripts else [])
    env["MEMORYD_INDEX_BATCH_FILES"] = "4"  # many commits: kills land between and inside them
    return env


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _status(data_dir: Path, env: dict[str, str]) -> dict[str, Any] | None:
    done = subprocess.run(
        [MEMORYD, "status", "--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


def _log(data_dir: Path) -> Path:
    """Where the daemons of a data dir log, one after another."""
    return data_dir.with_suffix(".log")


# The lines that say how many code chunk texts the model embedded, one per part of the
# embedding phase and per batch of reembed, so a daemon killed mid-job has its work counted.
_EMBEDDED_LINES = (
    re.compile(r"embed_chunks: (\d+) texts embedded for \d+ chunks"),
    re.compile(r"reembed: (\d+) code_chunk texts embedded"),
)


def _code_texts_embedded(data_dir: Path) -> int:
    """Code chunk texts the model embedded in the daemons of a data dir, from their log lines
    (a run killed before its line counts nothing)."""
    lines = _log(data_dir).read_text(errors="replace").splitlines()
    return sum(
        int(found.group(1))
        for line in lines
        for pattern in _EMBEDDED_LINES
        if (found := pattern.search(line))
    )


def _start(data_dir: Path, root: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with _log(data_dir).open("ab") as log:
        return subprocess.Popen(
            [MEMORYD, "run", "--data-dir", str(data_dir), "--repo", str(root)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def _run_to_the_end(data_dir: Path, root: Path, env: dict[str, str], files: int) -> float:
    """Start the daemon and wait until its queue is empty and every file has a state twice in
    a row; stop it with SIGTERM. Returns the seconds it took."""
    started = time.monotonic()
    daemon = _start(data_dir, root, env)
    settled = 0
    try:
        while settled < 2 and time.monotonic() - started < 1800:
            time.sleep(2)
            info = _status(data_dir, env)
            done = (
                info is not None
                and info["daemon_running"]
                and info["queue"]["jobs"] == 0
                and info["counts"]["file_state"] >= files
            )
            settled = settled + 1 if done else 0
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
    return time.monotonic() - started


async def _snapshot(data_dir: Path, project_id: str) -> tuple[Counter[Any], Counter[str]]:
    store = await Store.open(f"surrealkv://{data_dir / 'db'}", "memoryd", "memory")
    try:
        chunks = Counter(
            (path, chunk)
            for path, rows in (await store.code_index(project_id)).items()
            for chunk in rows
        )
        tables = await store.table_counts()
    finally:
        await store.close()
    return chunks, Counter({t: tables.get(t, 0) for t in TRANSCRIPT_TABLES})


def _kill_redis(daemon: subprocess.Popen[bytes]) -> str:
    """SIGKILL the daemon's redis-server; how that ended: started again, or the daemon exited."""
    deadline = time.monotonic() + 60
    servers: list[psutil.Process] = []
    while not servers and daemon.poll() is None and time.monotonic() < deadline:
        servers = [p for p in psutil.Process(daemon.pid).children() if "redis" in p.name()]
        time.sleep(0.05)
    if not servers:
        return f"no redis-server to kill (daemon exit code {daemon.poll()})"
    servers[0].kill()
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            return f"daemon exited with code {daemon.returncode}"
        again = [p for p in psutil.Process(daemon.pid).children() if "redis" in p.name()]
        if again and again[0].pid != servers[0].pid:
            return "redis-server started again"
        time.sleep(0.05)
    return "neither restarted nor exited within 60 s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--min-wait", type=float, default=1.0)
    parser.add_argument("--max-wait", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--target", choices=("memoryd", "redis"), default="memoryd")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="md-kill-", dir="/tmp"))
    try:
        root = _tree(work)
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files"], capture_output=True, text=True, check=True
        )
        files = len(listed.stdout.splitlines())
        transcripts = None
        if FIXTURES.is_dir():
            transcripts = work / "transcripts"
            shutil.copytree(FIXTURES, transcripts)
        env = _env(work, transcripts)
        project_id = projects.resolve(root).id
        clean, killed = work / "clean", work / "killed"
        took = _run_to_the_end(clean, root, env, files)
        print(f"clean run: {took:.0f}s, {files} files; load {load()}", flush=True)
        daemon = None
        outcomes: Counter[str] = Counter()
        for trial in range(args.trials):
            wait = rng.uniform(args.min_wait, args.max_wait)
            if daemon is None or daemon.poll() is not None:
                daemon = _start(killed, root, env)
            time.sleep(wait)
            if args.target == "redis":
                outcome = _kill_redis(daemon)
                outcomes[outcome] += 1
                print(f"trial {trial + 1}: redis-server killed after {wait:.1f}s: {outcome}")
                continue
            daemon.kill()  # SIGKILL: no clean-up at all; its private Redis lives on
            daemon.wait()
            print(f"trial {trial + 1}: killed after {wait:.1f}s", flush=True)
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=120)
        took = _run_to_the_end(killed, root, env, files)
        info = _status(killed, env)
        expected_chunks, expected_rows = asyncio.run(_snapshot(clean, project_id))
        chunks, rows = asyncio.run(_snapshot(killed, project_id))
        lost = sum((expected_chunks - chunks).values())
        duplicated = sum(
            (chunks - expected_chunks)[key] for key in chunks if key in expected_chunks
        )
        stale = sum(n for key, n in chunks.items() if key not in expected_chunks)
        print(f"final run after {args.trials} kills: {took:.0f}s; load {load()}")
        total, expected_total = sum(chunks.values()), sum(expected_chunks.values())
        print(f"code chunks: clean {expected_total}, after kills {total}")
        print(f"  lost {lost}, duplicated {duplicated}, stale {stale}")
        # Each text once: the model's work on code per chunk (target 1.00 clean, <= 1.05 after
        # kills; a text killed mid-embedding is embedded again, and content shared by several
        # chunks is embedded once, so a clean run may print less than 1).
        for name, data_dir, count in (
            ("clean", clean, expected_total),
            ("after kills", killed, total),
        ):
            texts = _code_texts_embedded(data_dir)
            ratio = texts / max(count, 1)
            target = "1.00" if name == "clean" else "<= 1.05"
            print(
                f"code texts embedded {name}: {texts} for {count} chunks = {ratio:.3f} "
                f"(target {target}; memories and goals not counted); load {load()}"
            )
        for table in TRANSCRIPT_TABLES:
            print(f"{table}: clean {expected_rows[table]}, after kills {rows[table]}")
        print(
            f"transcript rows lost {sum((expected_rows - rows).values())}, "
            f"duplicated {sum((rows - expected_rows).values())}"
        )
        print(f"jobs left in the queue: {info['queue']['jobs'] if info else '?'}")
        lines = _log(killed).read_text(errors="replace").splitlines()
        failed = [line for line in lines if "max retries" in line or '"level": "error"' in line]
        print(f"errors and jobs out of tries in the daemons' logs: {len(failed)}")
        for line in failed[:5]:
            print(f"  {line[:200]}")
        for outcome, count in sorted(outcomes.items()):
            print(f"redis kills: {count} x {outcome}")
    finally:
        for data_dir in (work / "clean", work / "killed"):  # a Redis an interruption left
            stop_orphan(data_dir / "redis" / "redis.sock")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
