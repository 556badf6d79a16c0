"""What a real machine puts in a repository: each bad file is skipped (or indexed correctly) with
one clear log line, and nothing else is affected. Real queue, worker, database and model."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import workers.indexing
from memoryd import projects, queue
from memoryd.daemon.runtime import Runtime
from tests.conftest import MEMORYD, git, queued_search, settle

GOOD = "def tax_rate_for_region(region):\n    return {'north': 0.2}.get(region, 0.25)\n"
NON_ASCII = "docs/notes with spaces/naïve café.py"


def _lines_about(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    """Log lines at INFO or above that name one file (the job's summary line names none)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.INFO
        and r.name in ("workers.indexing", "memoryd.scan")
        and re.search(rf"(^|[\s']){re.escape(name)}[:' ]", r.getMessage())
    ]


async def _sync(rt: Runtime, root: Path) -> dict[str, Any]:
    assert rt.redis is not None
    totals: dict[str, Any] = {"skips": {}}
    for job, _ in await projects.sync(rt.redis, projects.resolve(root), 32):
        report = await queue.wait_for(job, timeout=120)
        for key in ("indexed", "skipped", "removed", "failed"):
            totals[key] = totals.get(key, 0) + report[key]
        totals["skips"].update(report["skips"])
    return totals


async def test_bad_files_are_skipped_with_one_line_each(
    stack: Runtime,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    root = tmp_path / "bad"
    root.mkdir()
    (root / "good.py").write_text(GOOD)
    (root / "payload.txt").write_bytes(b"header\x00\x01\x02" * 100)
    (root / "latin1.py").write_bytes(b"# caf\xe9 au lait\ndef brew_latin_coffee():\n    return 1\n")
    # 50 MB of generated code, never opened: its size alone rules it out.
    with open(root / "huge_generated.py", "wb") as out:
        block = b"VALUE_%08d = %d\n"
        out.write(b"".join(block % (i, i) for i in range(2_500_000)))
    assert (root / "huge_generated.py").stat().st_size > 50_000_000
    (root / "bundle.js").write_text("var a=1;" * 650_000)  # one line, 5.2 MB
    (root / "small_bundle.js").write_text("var b=2;" * 150_000)  # one line, 1.2 MB: minified
    os.mkfifo(root / "pipe.py")
    (root / "loop_a.py").symlink_to("loop_b.py")
    (root / "loop_b.py").symlink_to("loop_a.py")
    (tmp_path / "elsewhere.py").write_text("PASSWORD = 'not for the index'\n")
    (root / "outside.py").symlink_to(tmp_path / "elsewhere.py")
    (root / "inside.py").symlink_to("good.py")  # a link within the tree is indexed as a file
    # Skipped once with no line and no record: a link to nothing, a link to a directory, a
    # minified bundle known by its name.
    (root / "dangling.py").symlink_to("nowhere.py")
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text(GOOD.replace("tax_rate", "duty_rate"))
    (root / "linked_pkg").symlink_to("pkg")
    (root / "app.min.js").write_text("function a(){return 1}\n")
    (root / os.fsdecode(b"caf\xe9-latin1-name.py")).write_text("def x():\n    return 1\n")
    (root / NON_ASCII).parent.mkdir(parents=True)
    (root / NON_ASCII).write_text("def crème_brûlée_recipe():\n    return 'caramelise the top'\n")
    git(root, "init", "-q", "-b", "main")

    opened: list[str] = []
    original = workers.indexing._read_bytes

    def spy(path: Path, max_bytes: int) -> Any:
        opened.append(Path(path).name)
        return original(path, max_bytes)

    monkeypatch.setattr(workers.indexing, "_read_bytes", spy)
    totals = await _sync(stack, root)
    assert totals["skips"] == {
        "payload.txt": "binary",
        "huge_generated.py": f"too large ({(root / 'huge_generated.py').stat().st_size} bytes, "
        "limit 2000000)",
        "bundle.js": "too large (5200000 bytes, limit 2000000)",
        "small_bundle.js": "minified",
        "pipe.py": "not a regular file (a FIFO)",
        "loop_a.py": "unreadable: Too many levels of symbolic links",
        "loop_b.py": "unreadable: Too many levels of symbolic links",
        "outside.py": "a symlink to outside the repository",
        "dangling.py": "a symlink to nothing (nowhere.py)",
        "linked_pkg": "a symlink to a directory (not followed)",
        "app.min.js": "minified or generated (its name ends in .min.js)",
    }
    assert totals["failed"] == 0
    assert not {"huge_generated.py", "pipe.py", "app.min.js"} & set(opened)
    for name in totals["skips"]:
        assert len(_lines_about(caplog, name)) == 1, (name, _lines_about(caplog, name))
    assert _lines_about(caplog, "latin1.py") == [
        "latin1.py is not valid UTF-8: bad bytes replaced, the rest indexed"
    ]
    assert [m for m in caplog.messages if "name is not valid UTF-8" in m] == [
        "skip 'caf\\udce9-latin1-name.py': the file name is not valid UTF-8"
    ]

    # Everything else is indexed exactly, the odd path included, and found by search.
    pid = projects.resolve(root).id
    index = await settle(stack, root, pid)
    assert set(index) == {"good.py", "inside.py", "latin1.py", "pkg/mod.py", NON_ASCII}
    hits = await queued_search(stack.redis, "crème brûlée recipe", 1)
    assert hits[0]["path"] == NON_ASCII and hits[0]["name"] == "crème_brûlée_recipe"
    hits = await queued_search(stack.redis, "brew latin coffee", 1)
    assert hits[0]["path"] == "latin1.py"

    # A second look at the same tree is quiet: known skips are not logged again.
    caplog.clear()
    await _sync(stack, root)
    assert all(not _lines_about(caplog, name) for name in totals["skips"])


async def test_files_that_change_shape_or_vanish_under_the_job(
    stack: Runtime,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO)
    root = tmp_path / "shapes"
    root.mkdir()
    (root / "good.py").write_text(GOOD)
    (root / "becomes_dir.py").write_text("def soon_a_directory():\n    return 1\n")
    (root / "deleted_late.py").write_text("def deleted_between_event_and_read():\n    return 2\n")
    git(root, "init", "-q", "-b", "main")
    pid = projects.resolve(root).id
    await _sync(stack, root)
    await settle(stack, root, pid)
    assert stack.redis is not None and stack.store is not None

    # A file replaced by a directory (with a file of its own).
    (root / "becomes_dir.py").unlink()
    (root / "becomes_dir.py").mkdir()
    (root / "becomes_dir.py" / "inner.py").write_text("def inside_the_new_dir():\n    return 3\n")
    # A file deleted after the job looked at it but before it was read.
    original = workers.indexing._read_bytes

    def delete_first(path: Path, max_bytes: int) -> Any:
        if Path(path).name == "deleted_late.py":
            Path(path).unlink()
        return original(path, max_bytes)

    monkeypatch.setattr(workers.indexing, "_read_bytes", delete_first)
    os.utime(root / "deleted_late.py", ns=(1, 1))  # stat says: changed, read it
    paths = ["becomes_dir.py", "becomes_dir.py/inner.py", "deleted_late.py", "good.py"]
    [(job, _)] = await queue.enqueue_index(stack.redis, pid, root, paths, 32)
    report = await queue.wait_for(job, timeout=60)
    assert (report["indexed"], report["unchanged"], report["removed"]) == (1, 1, 2)
    assert _lines_about(caplog, "becomes_dir.py") == [
        "becomes_dir.py: a directory now; its chunks are retired"
    ]
    assert _lines_about(caplog, "deleted_late.py") == [
        "deleted_late.py: deleted before it was read; its chunks are retired"
    ]
    index = await settle(stack, root, pid)
    assert set(index) == {"good.py", "becomes_dir.py/inner.py"}


@pytest.mark.e2e
def test_permission_denied_is_skipped_by_an_unprivileged_daemon(
    data_dir: Path, tmp_path: Path
) -> None:
    """Tests run as root, which reads everything; `memoryd index` runs here without the
    capabilities that let root ignore file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so
    mode 000 means what it means for any user."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop root's file-mode override")
    root = tmp_path / "perm"
    root.mkdir()
    (root / "good.py").write_text(GOOD)
    (root / "secret.py").write_text("def hidden_secret():\n    return 'x'\n")
    (root / "locked").mkdir()
    (root / "locked" / "inner.py").write_text("def behind_a_locked_door():\n    return 1\n")
    git(root, "init", "-q", "-b", "main")
    os.chmod(root / "secret.py", 0)
    os.chmod(root / "locked", 0)
    try:
        drop = "-dac_override,-dac_read_search"
        unprivileged = [setpriv, "--bounding-set", drop, "--inh-caps", drop]
        done = subprocess.run(
            [*unprivileged, MEMORYD, "index", str(root), "--data-dir", str(data_dir), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        os.chmod(root / "secret.py", 0o644)
        os.chmod(root / "locked", 0o755)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["skips"] == {"secret.py": "unreadable: Permission denied"}
    assert report["indexed"] == 1  # good.py
    assert f"skip directory {root / 'locked'}: Permission denied" in done.stderr


async def test_a_file_written_without_pause_does_not_keep_the_queue_busy(
    stack: Runtime,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each job re-checks its files after writing and indexes again what changed meanwhile;
    for a file that is rewritten all the time (a log that is not gitignored), that stops after
    three follow-up jobs (a watcher sends a job for each change anyway). Here every read of the
    file is followed by a write to it, so every check finds it changed."""
    caplog.set_level(logging.INFO)
    root = tmp_path / "churn"
    root.mkdir()
    (root / "busy.py").write_text(GOOD)
    git(root, "init", "-q", "-b", "main")
    writes = itertools.count()
    original = workers.indexing._read_bytes

    def read_then_written(path: Path, max_bytes: int) -> Any:
        result = original(path, max_bytes)
        Path(path).write_text(f"{GOOD}# write {next(writes)}\n")
        return result

    monkeypatch.setattr(workers.indexing, "_read_bytes", read_then_written)
    assert stack.redis is not None
    pid = projects.resolve(root).id
    [(job, _)] = await queue.enqueue_index(stack.redis, pid, root, ["busy.py"], 32, fresh=True)
    report = await queue.wait_for(job, timeout=60)
    assert (report["reindexed"], report["requeued"]) == (2, 1)
    for _ in range(1200):
        if "still changing after 3 follow-up jobs: busy.py" in caplog.text:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the follow-ups never stopped")
    assert caplog.text.count("a follow-up job will index them") == 3


async def test_counts_add_up_after_sed_in_place(
    stack: Runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`sed -i` writes a temp file next to the real one and renames it over: the watcher
    sends both paths, and the temp file is gone by the time the job looks. Every file of a
    job lands in exactly one count."""
    assert stack.redis is not None
    root = tmp_path / "sed"
    root.mkdir()
    (root / "rates.py").write_text(GOOD)
    (root / "other.py").write_text("def other():\n    return 2\n")
    pid = projects.resolve(root).id
    await _sync(stack, root)
    subprocess.run(["sed", "-i", "s/0.25/0.3/", str(root / "rates.py")], check=True)
    caplog.set_level(logging.INFO, logger="workers.indexing")
    paths = ["other.py", "rates.py", "sedAb12Cd"]
    [(job, _)] = await queue.enqueue_index(stack.redis, pid, root, paths, 32)
    report = await queue.wait_for(job, timeout=60)
    kinds = ("indexed", "unchanged", "skipped", "removed", "untracked", "failed")
    counts = [report[k] for k in kinds]
    assert (report["files"], counts) == (3, [1, 1, 0, 0, 1, 0])
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("index_files")]
    assert line.startswith(
        f"index_files {pid}: 3 files: 1 indexed, 1 unchanged, 0 skipped, 0 removed, 1 untracked, "
        "0 failed;"
    )
