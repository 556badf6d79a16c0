"""What the canonical functions return: an entity, and the projects a file may belong to."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entity:
    """A canonical thing an action touched.

    ``kind``: file | command | tool | url | error. ``key``: the canonical key (unique per kind).
    ``raw``: the form seen in the transcript (an alias). ``name``: a short display name.
    ``project_id``: the watched project a file belongs to, if any.
    """

    kind: str
    key: str
    raw: str
    name: str
    project_id: str | None = None


@dataclass(frozen=True, slots=True)
class Project:
    """A watched project: its id and the absolute path of its root."""

    id: str
    root: str


ProjectsLike = Iterable["Project | tuple[str, str]"]
