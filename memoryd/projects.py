"""Watched repositories: registering one, and bringing its index in line with the disk."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from arq import ArqRedis
from arq.jobs import Job

from memoryd import jobs, queue
from memoryd.errors import MemorydError
from memoryd.scan import find_repo_root, project_id_for, walk


@dataclass(frozen=True, slots=True)
class Project:
    """``remembers``: what the config keeps (memoryd.config.Settings.remembers); the paths it
    keeps out are never queued."""

    id: str
    root: Path
    remembers: Callable[[Path], bool] | None = field(default=None, compare=False)

    def kept(self, paths: Iterable[str]) -> list[str]:
        keep = self.remembers
        return [p for p in paths if keep is None or keep(self.root / p)]


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def resolve(path: Path, remembers: Callable[[Path], bool] | None = None) -> Project:
    """The project a path belongs to; refuses paths that are not existing directories, and
    those `remembers` keeps out."""
    path = path.expanduser()
    if not path.exists():
        raise MemorydError(f"{path} does not exist")
    if not path.is_dir():
        raise MemorydError(f"{path} is not a directory")
    root = find_repo_root(path)
    if remembers is not None and not remembers(root):
        raise MemorydError(f"{root} is excluded by the config (`exclude`/`include`)")
    return Project(project_id_for(root), root, remembers)


async def register(
    redis: ArqRedis, project: Project, run: str | None = None, files_total: int = 0
) -> None:
    """Record the project (root, git remote, branch, head); `run`: a whole-project sync of
    `files_total` files starts, whose progress `status` shows."""
    fields = {
        "root": str(project.root),
        "name": project.root.name,
        "git_remote": await asyncio.to_thread(_git, project.root, "remote", "get-url", "origin"),
        "git_branch": await asyncio.to_thread(_git, project.root, "branch", "--show-current"),
        "git_head": await asyncio.to_thread(_git, project.root, "rev-parse", "HEAD"),
    }
    await queue.call(redis, jobs.REGISTER_PROJECT, project.id, fields, run, files_total)
    if fields["git_head"]:
        # Files changed together, from the commits new since the last head (once per head).
        job_id = cochange_job_id(project.id, fields["git_head"])
        await queue.enqueue(redis, jobs.COCHANGE, project.id, str(project.root), job_id=job_id)


def cochange_job_id(project_id: str, head: str) -> str:
    """The id of the job that counts a head's commits into CHANGES_WITH: one per head."""
    return f"cochange:{project_id}:{head}"


def cochange_job(redis: ArqRedis, project_id: str, head: str) -> Job:
    """That job, to wait for (what reads CHANGES_WITH right after a head moved)."""
    return Job(cochange_job_id(project_id, head), redis, _queue_name=jobs.COCHANGE.queue)


async def sync(
    redis: ArqRedis,
    project: Project,
    batch: int,
    *,
    under: Iterable[str] | None = None,
    extra: Iterable[str] = (),
    fresh: bool = False,
) -> list[tuple[Job, int]]:
    """Enqueue every file on disk and every file the index still holds: the jobs index what is
    new or changed (unchanged files cost one stat) and retire what is gone.

    `under` limits this to some directories (relative; "" is the whole project): what a
    directory deleted or moved away, or an edited nested .gitignore, may have changed. `extra`
    paths are added as they are. `fresh` (an explicit `memoryd index`): enqueue every file,
    also those already waiting in a queued job, so the report covers them all."""
    dirs = None if under is None else sorted({d.strip("/") for d in under})
    if dirs is not None and "" in dirs:
        dirs = None
    on_disk = await asyncio.to_thread(_walk_dirs, project.root, dirs)
    stored = await queue.call(redis, jobs.STORED_PATHS, project.id)
    if dirs is not None:
        stored = [p for p in stored if any(_inside(p, d) for d in dirs)]
    paths = project.kept(sorted(set(on_disk) | set(stored) | set(extra)))
    if dirs is not None:
        return await queue.enqueue_index(redis, project.id, project.root, paths, batch, fresh=fresh)
    # A whole-project sync: its jobs count towards the progress it starts (before the first
    # of them is enqueued, so none can finish uncounted).
    run = uuid.uuid4().hex
    return await queue.enqueue_index(
        redis,
        project.id,
        project.root,
        paths,
        batch,
        fresh=fresh,
        progress=run,
        before=lambda total: register(redis, project, run, total),
    )


def _inside(path: str, directory: str) -> bool:
    return path.startswith(directory + "/")


def _walk_dirs(root: Path, dirs: list[str] | None) -> list[str]:
    if dirs is None:
        return list(walk(root))
    return [rel for d in dirs for rel in walk(root, under=d)]
