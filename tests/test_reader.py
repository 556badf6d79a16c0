"""The file reader's process (workers/stages/reader.py): real processes, started, replaced and
stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from workers.stages import reader as reader_module
from workers.stages.reader import Reader


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A child that exited stays a zombie until reaped: that is gone too. Reaped between the
    # two looks (the reader's pool reaps it), its /proc entry is gone as well.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


async def _until_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_files_are_read_in_a_process_of_their_own_which_goes_with_close() -> None:
    reader = Reader()
    try:
        pid = await reader.run(os.getpid)
        assert pid != os.getpid()
        assert await reader.run(os.getpid) == pid  # the same process, while in use
    finally:
        await reader.close()
    assert await _until_gone(pid)


async def test_a_killed_process_is_replaced_and_no_call_is_lost() -> None:
    reader = Reader()
    try:
        pid = await reader.run(os.getpid)
        os.kill(pid, signal.SIGKILL)
        assert await _until_gone(pid)
        # The call that finds it dead runs in this process; the next has a new one.
        assert await reader.run(os.getpid) == os.getpid()
        again = await reader.run(os.getpid)
        assert again not in (pid, os.getpid())
    finally:
        await reader.close()


async def test_an_idle_process_goes_and_comes_back_when_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reader_module, "IDLE_SECONDS", 0.4)
    reader = Reader()
    try:
        pid = await reader.run(os.getpid)
        assert await _until_gone(pid)
        again = await reader.run(os.getpid)
        assert again not in (pid, os.getpid())
    finally:
        await reader.close()


PARENT = """
import asyncio, os, sys, time
from workers.stages.reader import Reader

async def main():
    reader = Reader()
    print(await reader.run(os.getpid), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_the_reader_process_and_its_helper_end_when_memoryd_is_killed() -> None:
    """kill -9 of `memoryd run` left the reader process and multiprocessing's resource tracker
    alive for ever (parent pid 1), each waiting on a pipe whose write end the reader holds."""
    import subprocess
    import sys

    import psutil

    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        assert parent.stdout is not None
        reader_pid = int(parent.stdout.readline())
        children = {p.pid for p in psutil.Process(parent.pid).children(recursive=True)}
        assert reader_pid in children and len(children) == 2  # the reader and the tracker
    finally:
        parent.kill()
        parent.wait()
    for pid in children:
        assert await _until_gone(pid, 30), pid
