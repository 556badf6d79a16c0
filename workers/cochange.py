"""CHANGES_WITH: pairs of source files changed in the same commits of the repository's history.

The window is the last `cochange_commits` commits of HEAD made at most `cochange_days` before
HEAD's own commit. Each commit is counted once (the ids of those counted are kept), so when
HEAD moves (a commit, a branch switch) only the commits new to the window are read. A commit weighs
min(1, FULL_WEIGHT_FILES / files it changes): a large one (a mass rename, a reformat) counts
less, and one over `cochange_max_files` not at all. Only pairs of files that exist at HEAD
count: a deleted file changes with nothing.

`commits_of` (reading git's output) and `pairs` are pure; `update_cochange` is the job.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

from memoryd.ids import file_entity_id, stable_id
from workers.context import JobContext
from workers.stages.chunking import language_for_path

log = logging.getLogger(__name__)

# A commit of this many source files or fewer counts fully.
FULL_WEIGHT_FILES = 4
# Files that are prose or configuration, not source: they change with everything.
_NOT_SOURCE = frozenset(
    {"markdown", "json", "yaml", "toml", "rst", "xml", "ini", "html", "css", "scss", "latex"}
)


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    at: datetime
    files: tuple[str, ...]


def is_source(path: str) -> bool:
    language = language_for_path(path)
    return language is not None and language not in _NOT_SOURCE


def commits_of(log_output: str) -> list[Commit]:
    """Commits from `git log -z --name-only --format=%x01%H %ct`, newest first."""
    commits = []
    # Each record: "<sha> <time>" NUL, then "\n" and the file names, each ended by NUL.
    for record in log_output.split("\x01")[1:]:
        head, *names = record.split("\x00")
        sha, _, stamp = head.strip().partition(" ")
        files = tuple(f.strip("\n") for f in names if f.strip("\n"))
        commits.append(Commit(sha, datetime.fromtimestamp(int(stamp), UTC), files))
    return commits


def weight(files: int, max_files: int) -> float:
    if files < 2 or files > max_files:
        return 0.0
    return min(1.0, FULL_WEIGHT_FILES / files)


def pairs(
    project_id: str, commits: Iterable[Commit], alive: set[str], max_files: int
) -> list[dict[str, Any]]:
    """Weighted counts and last time of each pair of source files, as CHANGES_WITH rows (the
    edge goes from the file with the smaller key, so a pair is one edge)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for commit in commits:
        files = sorted({f for f in commit.files if is_source(f) and f in alive})
        share = weight(len(files), max_files)
        if not share:
            continue
        for a, b in combinations(files, 2):
            row = found.setdefault(
                (a, b),
                {
                    "id": stable_id("changes_with", project_id, a, b),
                    "a": file_entity_id(project_id, a),
                    "b": file_entity_id(project_id, b),
                    "count": 0.0,
                    "last_at": commit.at,
                },
            )
            row["count"] = round(row["count"] + share, 4)
            row["last_at"] = max(row["last_at"], commit.at)
    return [found[key] for key in sorted(found)]


def _git(root: Path, *args: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def _read(
    root: Path, commits: int, days: float, seen: set[str]
) -> tuple[str, list[Commit], set[str], list[str]] | None:
    """(HEAD, the window's commits not yet counted, files at HEAD, the window's ids)."""
    head_at = _git(root, "log", "-1", "--format=%H %ct", "HEAD")
    if not head_at:
        return None  # not a git repository, or no commit yet
    head, stamp = head_at.split()
    # Days before HEAD's own commit, not before now: a repository picked up again after a
    # quiet year still has the history of how its files change.
    oldest = int(stamp) - int(days * 86400)
    window = (
        _git(root, "rev-list", f"--max-count={commits}", f"--max-age={oldest}", "HEAD") or ""
    ).split()
    new = [sha for sha in window if sha not in seen]
    found: list[Commit] = []
    # In slices: a command line has a length limit.
    for start in range(0, len(new), 500):
        out = _git(
            root,
            "log",
            "--no-walk=unsorted",
            "-z",
            "--name-only",
            "--no-renames",
            "--format=%x01%H %ct",
            *new[start : start + 500],
        )
        found += commits_of(out or "")
    alive = set((_git(root, "ls-files", "-z") or "").split("\x00")) - {""}
    return head, found, alive, window


async def update_cochange(ctx: JobContext, project_id: str, root: str) -> dict[str, Any]:
    """Count the commits new to the window into CHANGES_WITH (the `cochange` job)."""
    store, settings = ctx["store"], ctx["settings"]
    state = await store.cochange_state(project_id) or {}
    seen = set(state.get("seen") or [])
    read = await asyncio.to_thread(
        _read, Path(root), settings.cochange_commits, settings.cochange_days, seen
    )
    if read is None:
        return {"commits": 0, "pairs": 0}
    head, commits, alive, window = read
    rows = pairs(project_id, commits, alive, settings.cochange_max_files)
    # The window's ids, and some that left it (a branch switched back to brings them again).
    keep = window + [sha for sha in state.get("seen") or [] if sha not in set(window)]
    await store.write_changes_with(project_id, rows, head, keep[: 4 * settings.cochange_commits])
    if commits:
        log.info(
            "co-change of %s: %d commits read, %d pairs counted",
            project_id,
            len(commits),
            len(rows),
        )
    return {"commits": len(commits), "pairs": len(rows)}
