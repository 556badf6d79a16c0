"""Files: one key per file however an agent wrote its path (relative, absolute, `~`, Windows)."""

from __future__ import annotations

import ntpath
import os
import posixpath
import re

from memoryd.ids import file_key
from memoryd.vocabulary import FILE
from workers.stages.entities.model import Entity, Project, ProjectsLike

WINDOWS_ABS = re.compile(r"^[A-Za-z]:[\\/]")


def as_projects(projects: ProjectsLike | None) -> tuple[Project, ...]:
    """Accept ``Project`` objects or ``(project_id, root)`` pairs; roots are normalised."""
    out: list[Project] = []
    for p in projects or ():
        pid, root = (p.id, p.root) if isinstance(p, Project) else p
        out.append(Project(pid, normalize_path(root)))
    # Longest root first, so a nested project wins over the one containing it.
    return tuple(sorted(out, key=lambda p: len(p.root), reverse=True))


def normalize_path(path: str, cwd: str | None = None) -> str:
    """Resolve ``path`` against ``cwd`` and normalise ``.``/``..``/``//`` (no file system use).

    Windows paths (``C:\\x\\y``) are normalised with forward slashes. ``~`` is left as is: the
    home directory of the machine that wrote the transcript is not known here.
    """
    p = path.strip()
    if WINDOWS_ABS.match(p) or (cwd and WINDOWS_ABS.match(cwd)):
        if cwd and not WINDOWS_ABS.match(p) and not p.startswith(("\\", "/")):
            p = ntpath.join(cwd, p)
        return ntpath.normpath(p).replace("\\", "/")
    if cwd and not p.startswith(("/", "~")):
        p = _join_relative(cwd, p) if not cwd.startswith(("/", "~")) else posixpath.join(cwd, p)
    if not p:
        return p
    norm = posixpath.normpath(p)
    # normpath keeps a leading "//" (POSIX allows it to mean something); transcripts never do.
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def _join_relative(cwd: str, path: str) -> str:
    """A relative path under a relative working directory (an anonymised transcript strips
    the same leading folders off both): a path that already starts with the directory, or
    with its last two or more folders, is not put under it a second time."""
    c = posixpath.normpath(cwd).split("/")
    p = posixpath.normpath(path).split("/")
    if p[: len(c)] == c:
        return path
    for n in range(len(c) - 1, 1, -1):
        if p[:n] == c[-n:]:
            return posixpath.join(*c[:-n], path)
    return posixpath.join(cwd, path)


def canonical_file(
    path: str | None,
    cwd: str | None = None,
    projects: ProjectsLike | None = None,
    *,
    resolve_symlinks: bool = False,
    home: str | None = None,
) -> Entity | None:
    """The file entity for ``path`` as seen from ``cwd``.

    Inside a watched project the key is ``"<project_id>:<path relative to the root>"`` (the same
    key the code indexer uses), otherwise the absolute normalised path. ``resolve_symlinks``
    follows symlinks for paths that exist on this machine (off by default: it is I/O).
    ``~/…`` is expanded with ``home``; with no home known it stays ``~/…`` (the key says whose
    home: the transcript writer's), and ``~user/…`` names no file (None).
    """
    if not path or not path.strip():
        return None
    raw = path
    path = expand_home(path, home) or (path if path.startswith("~/") else None)
    if path is None:
        return None
    abs_path = normalize_path(path, cwd)
    if resolve_symlinks and abs_path.startswith("/") and os.path.exists(abs_path):
        abs_path = os.path.realpath(abs_path)
    name = posixpath.basename(abs_path.rstrip("/")) or abs_path
    for project in as_projects(projects):
        rel = _relative_to(abs_path, project.root)
        if rel is not None:
            return Entity(FILE, file_key(project.id, rel), raw, name, project.id)
    return Entity(FILE, abs_path, raw, name)


def expand_home(path: str, home: str | None) -> str | None:
    """``~`` and ``~/…`` with ``home``; None for those with no home known and for ``~user``
    (another user's home is not known either); other paths as they are."""
    if not path.startswith("~"):
        return path
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return None


def _relative_to(path: str, root: str) -> str | None:
    if path == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None
